import math
import random

import pytest
import torch

from dualops.devices import ASCEND_910B2, H100, H200, PROFILES, with_cores
from dualops.tiling import MlaPlan, plan_mla_decode
from dualops.tiling.mla_decode import request_lengths

ALL = list(PROFILES.values()) + [with_cores(ASCEND_910B2, 2)]


def varlen(seed, batch, max_len):
    rng = random.Random(seed)
    lens = [rng.randrange(0, max_len + 1) for _ in range(batch)]
    lens[0], lens[-1] = 0, 1          # zero- and one-token requests are always present
    if batch > 2:
        lens[1] = max_len
    return lens


def check_plan(p: MlaPlan, lengths):
    """Every invariant a kernel relies on; returns the pieces for further checks."""
    bt, ovh = p.block_tokens, p.fixed_overhead
    blocks = [max(math.ceil(n / bt), 1) for n in lengths]
    assert p.payload == math.ceil(sum(b + ovh for b in blocks) / p.num_sm_parts) + ovh
    pieces = p.token_ranges(lengths)
    by_req = {r: [] for r in range(p.batch)}
    for part, r, b, e, slot in pieces:
        by_req[r].append((b, e, slot, part))
    ns = p.num_splits
    assert ns[0] == 0 and list(ns) == sorted(ns) and p.total_splits == ns[-1]
    for r, n in enumerate(lengths):
        segs = sorted(by_req[r])
        # each request's tokens covered exactly once, in order, by whole 64-token blocks
        assert segs[0][0] == 0 and segs[-1][1] == n, (r, segs)
        for (b0, e0, _, _), (b1, _, _, _) in zip(segs, segs[1:]):
            assert e0 == b1 and e0 % bt == 0 and b1 > b0
        if n == 0:
            assert segs == [(0, 0, ns[r], segs[0][3])]       # owned by exactly one part
        # split slots: one per piece, consecutive in token order
        assert len(segs) == p.splits_of(r) >= 1
        assert [s[2] for s in segs] == list(range(ns[r], ns[r + 1]))
        parts = [s[3] for s in segs]
        assert parts == sorted(parts) and len(set(parts)) == len(parts)
    # per-part load never exceeds the payload; flags agree with num_splits
    for q in range(p.num_sm_parts):
        rec = p.part(q)
        mine = [x for x in pieces if x[0] == q]
        load = sum(math.ceil(e / bt) - b // bt + ovh if e > b else 1 + ovh
                   for _, _, b, e, _ in mine)
        assert load <= p.payload, (q, rec)
        if not mine:
            assert (rec["begin_req"], rec["end_req"]) == (p.batch, p.batch - 1)
            continue
        assert rec["first_split"] == int(p.splits_of(rec["begin_req"]) > 1)
        assert rec["last_split"] == int(p.splits_of(rec["end_req"]) > 1)
        assert rec["begin_split"] == mine[0][4] - ns[rec["begin_req"]]
    # parts take requests in order
    flat = [(r, b) for _, r, b, _, _ in pieces]
    assert flat == sorted(flat)
    return pieces


def test_num_sm_parts_follows_flashmla():
    assert plan_mla_decode([4096], num_heads_q=128, device=H200).num_sm_parts == 66
    assert plan_mla_decode([4096], num_heads_q=64, device=H200).num_sm_parts == 132
    assert plan_mla_decode([4096], num_heads_q=128, s_q=2, device=H100).num_sm_parts == 33
    assert plan_mla_decode([4096], num_heads_q=16, device=ASCEND_910B2).num_sm_parts == 24
    assert plan_mla_decode([4096], num_heads_q=128, device=ASCEND_910B2).num_sm_parts == 12
    assert plan_mla_decode([4096], num_heads_q=128, s_q=4, device=with_cores(ASCEND_910B2, 2)
                           ).num_sm_parts == 1
    p = plan_mla_decode([1], num_heads_q=128, num_heads_k=2, s_q=3, device=H200)
    assert (p.q_rows, p.num_m_blocks, p.num_sm_parts) == (192, 3, 22)


def test_fixed_overhead_per_piece():
    # FlashMLA's 5 blocks, 2 for the memory-bound CUDA rows (at most 32 q rows)
    assert plan_mla_decode([4096], num_heads_q=16, device=H100).fixed_overhead == 2
    assert plan_mla_decode([4096], num_heads_q=16, s_q=2, device=H200).fixed_overhead == 2
    assert plan_mla_decode([4096], num_heads_q=64, device=H100).fixed_overhead == 5
    assert plan_mla_decode([4096], num_heads_q=16, device=ASCEND_910B2).fixed_overhead == 5
    # b64 s_k4096 h_q16 on 132 SMs: 2 pieces of 32 blocks per request (5: 34 + 30)
    p = plan_mla_decode([4096] * 64, num_heads_q=16, device=H100)
    assert p.payload == 34 and max(e - b for _, _, b, e, _ in p.token_ranges([4096] * 64)) == 32 * 64


def test_hand_worked_schedule():
    # blocks [64, 64] + 5 overhead each = 138 over 4 parts -> payload ceil(138/4) + 5 = 40
    p = plan_mla_decode([4096, 4096], num_heads_q=16, device=with_cores(ASCEND_910B2, 4))
    assert p.payload == 40 and p.num_splits == (0, 2, 5)
    assert p.token_ranges([4096, 4096]) == [
        (0, 0, 0, 2240, 0),        # 35 blocks of request 0
        (1, 0, 2240, 4096, 1),     # its last 29 blocks ...
        (1, 1, 0, 64, 2),          # ... then 1 block of request 1 fills the part
        (2, 1, 64, 2304, 3),
        (3, 1, 2304, 4096, 4)]
    assert p.part(1) == dict(begin_req=0, end_req=1, begin_token=2240, end_token=64,
                             begin_split=1, first_split=1, last_split=1)


@pytest.mark.parametrize("dev", ALL, ids=lambda d: d.name)
def test_dense_varlen_covers_every_block_once(dev):
    for seed, (batch, max_len, h_q, s_q) in enumerate(
            [(1, 131072, 128, 1), (7, 5000, 128, 2), (33, 4096, 16, 1), (128, 8192, 64, 1),
             (3, 63, 128, 1), (2, 0, 128, 1)]):
        lens = varlen(seed, batch, max_len) if max_len else [0] * batch
        p = plan_mla_decode(lens, num_heads_q=h_q, s_q=s_q, device=dev)
        check_plan(p, lens)


def test_long_single_request_is_split_over_the_parts():
    for dev in (H200, ASCEND_910B2):
        p = plan_mla_decode([131072], num_heads_q=128, device=dev)
        pieces = check_plan(p, [131072])
        # per-piece overhead rounding may leave the last part or two idle
        assert p.splits_of(0) == len(pieces) >= 0.9 * p.num_sm_parts
    # a big batch of short requests is not split at all
    p = plan_mla_decode([64] * 512, num_heads_q=128, device=H200)
    check_plan(p, [64] * 512)
    assert p.total_splits == 512


def test_sparse_lengths_come_from_topk():
    lens = [0, 5, 100000]
    assert request_lengths(lens, topk=2048) == [2048] * 3
    assert request_lengths(lens, topk=100, extra_topk=30) == [128 + 30] * 3
    p = plan_mla_decode(lens, num_heads_q=128, s_q=2, topk=2048, kv_format="fp8_v32", device=H200)
    assert (p.sparse, p.topk, p.extra_topk, p.kv_format) == (1, 2048, 0, 1)
    check_plan(p, [2048] * 3)
    q = plan_mla_decode(lens, num_heads_q=64, topk=100, extra_topk=30, kv_format="fp8_model1",
                        device=ASCEND_910B2)
    assert (q.extra_topk, q.kv_format) == (30, 2)
    check_plan(q, [158] * 3)
    # the sparse plan does not depend on the cache lengths
    r = plan_mla_decode([7, 7, 7], num_heads_q=128, s_q=2, topk=2048, kv_format="fp8_v32",
                        device=H200)
    assert torch.equal(r.pack(), p.pack())


def test_tensor_and_list_inputs_agree_and_page_size_does_not_change_the_schedule():
    lens = varlen(5, 20, 3000)
    base = plan_mla_decode(lens, num_heads_q=128, device=H200)
    t = plan_mla_decode(torch.tensor(lens, dtype=torch.int32), num_heads_q=128, device=H200)
    assert t == base
    for pbs in (16, 32, 64, 128, 256):
        p = plan_mla_decode(lens, num_heads_q=128, page_block_size=pbs, device=H200)
        assert p.page_block_size == pbs
        assert p.parts == base.parts and p.num_splits == base.num_splits
        # a piece's pages: the kernel maps [begin, end) onto pages begin // pbs .. (end-1) // pbs
        for _, r, b, e, _ in p.token_ranges(lens):
            if e > b:
                assert (e - 1) // pbs < math.ceil(lens[r] / pbs)


def test_deterministic_and_round_trip():
    lens = varlen(11, 40, 20000)
    a = plan_mla_decode(lens, num_heads_q=128, s_q=2, device=ASCEND_910B2)
    b = plan_mla_decode(list(lens), num_heads_q=128, s_q=2, device=ASCEND_910B2)
    assert torch.equal(a.pack(), b.pack())
    t = a.pack()
    assert t.dtype == torch.int32 and t.numel() == len(MlaPlan.FIELDS) + 8 * a.num_sm_parts + 41
    assert t[:len(MlaPlan.FIELDS)].tolist() == a.header()
    assert t[-41:].tolist() == list(a.num_splits)
    assert MlaPlan.from_packed(t) == a
    with pytest.raises(ValueError, match="ints"):
        MlaPlan.from_packed(t[:-1])
    w_o, w_lse = a.workspace_floats()
    assert w_lse == a.total_splits * a.h_kv * a.q_rows and w_o == 512 * w_lse
    assert a.total_splits <= a.batch + a.num_sm_parts
    assert "parts" in a.describe() and "\n" not in a.describe()


@pytest.mark.parametrize("args, kw, exc, match", [
    ([[10]], dict(num_heads_q=6, num_heads_k=4), ValueError, "num_heads_q"),
    ([[10]], dict(num_heads_q=128, kv_format="fp4"), ValueError, "kv_format"),
    ([[10]], dict(num_heads_q=128, topk=0), ValueError, "topk"),
    ([[10]], dict(num_heads_q=128, extra_topk=64), ValueError, "extra_topk"),
    ([[10, -1]], dict(num_heads_q=128), ValueError, "cache_seqlens"),
    ([[]], dict(num_heads_q=128), ValueError, "cache_seqlens"),
    ([torch.zeros(2, 2, dtype=torch.int32)], dict(num_heads_q=128), ValueError, "cache_seqlens"),
    ([torch.zeros(2)], dict(num_heads_q=128), TypeError, "cache_seqlens"),
    ([[10]], dict(num_heads_q=128, s_q=0), ValueError, "s_q"),
    ([[10]], dict(num_heads_q=128, page_block_size=0), ValueError, "page_block_size"),
    ([[10]], dict(num_heads_q=128, device=None), TypeError, "device"),
])
def test_bad_arguments_name_the_argument(args, kw, exc, match):
    kw.setdefault("device", H200)
    with pytest.raises(exc, match=match):
        plan_mla_decode(*args, **kw)

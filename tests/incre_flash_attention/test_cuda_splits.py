"""CUDA incremental flash attention: split-KV plans and their merges, CTA shapes, CUDA graphs and the
prepared launch, against dualops.reference (the method of test_cuda.py; helpers: tests/helpers/ifa_cuda_cases.py)."""
from __future__ import annotations

import math
import zlib

import pytest
import torch

import dualops
from dualops.testing import LSE_TOLERANCE, assert_close_parity

# (pytest_generate_tests, forced_launch and _forced_launch_override: every test runs under the forced
# launches that name it, ifa_cuda_cases.FORCED_LAUNCHES)
from ifa_cuda_cases import (  # noqa: F401
    BF16, FP16, _backend_kwargs, _capture_and_check_replays, _id, check, cuda_backend, make_case, multi_wave_case, needs_cuda, ref_ifa, _forced_launch_override, forced_launch, pytest_generate_tests)


# ----------------------------------------------------------------------------- split-KV


@needs_cuda
@pytest.mark.parametrize("kv", ["same", "int8", "fp8"])
@pytest.mark.parametrize("page", [0, 128])
def test_split_kv_long_context(kv, page):
    # One request of 6000 keys and a short one: the planner splits (few units for 132 SMs).
    q, k, v, kw = make_case(B=2, h_q=8, h_kv=1, kv=kv, page=page, lens=[6000, 3], seed=21)
    plan = cuda_backend.make_ifa_plan(q, k, kw.get("block_table"))
    assert plan.num_splits > 1, plan.describe()
    check(q, k, v, kw, name=f"split {kv} page{page}")



@needs_cuda
@pytest.mark.parametrize("split_len,num_splits", [(16, 40), (48, 9), (112, 5), (640, 1)])
def test_forced_split_plans(split_len, num_splits):
    # Odd split lengths, and more splits than keys for some requests (empty splits).
    q, k, v, kw = make_case(B=3, h_q=8, h_kv=2, S_q=2, causal=True, lens=[400, 0, 37], s_max=400, seed=split_len)
    base = cuda_backend.make_ifa_plan(q, k, None)
    plan = base.with_splits(num_splits, split_len=split_len)
    out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **_backend_kwargs(q, k, kw))
    ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
    assert_close_parity(out, ref_out, budget=budget.out, name="forced split out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name="forced split lse")


@needs_cuda
@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
def test_forced_split_plans_d256_many_rows(dtype):
    # D 256 (4-warp CTAs) with 12 q rows over 3 splits: a CTA's slice of a cluster merge (12 x 64 / 3
    # slots) would pass its 128 threads, so the plan (and the launcher) take another merge.
    q, k, v, kw = make_case(B=2, h_q=8, h_kv=2, S_q=3, D=256, dtype=dtype, causal=True, lens=[300, 41],
                            s_max=320, seed=7)
    plan = cuda_backend.make_ifa_plan(q, k, None).with_splits(3)
    out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **_backend_kwargs(q, k, kw))
    ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
    assert_close_parity(out, ref_out, budget=budget.out, name="D256 split out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name="D256 split lse")


# Units of at most one 16-key chunk per warp (splits of <= 128 keys, requests of <= 128 keys): the
# variants whose wide kernel steps two chunks at a time (8-bit caches, D 64) run a one-chunk wide
# kernel there (ifa_launch.cuh, kWide1); tuning ifa_cta_shape=wide (the forced-launch runs below) runs the
# two-chunk one on the same plans.
ONE_CHUNK = [dict(kv=kv, D=D, split_len=sl, num_splits=ns)
             for (kv, D) in [("int8", 128), ("fp8", 128), ("int8", 64), ("same", 64)]
             for (sl, ns) in [(128, 4), (16, 28)]]


@needs_cuda
@pytest.mark.parametrize("case", ONE_CHUNK, ids=[_id(c) for c in ONE_CHUNK])
def test_one_chunk_units(case):
    q, k, v, kw = make_case(B=4, h_q=8, h_kv=1, S_q=2, causal=True, kv=case["kv"], D=case["D"],
                            lens=[400, 0, 37, 128], s_max=448, seed=case["split_len"] + case["D"])
    base = cuda_backend.make_ifa_plan(q, k, None)
    plan = base.with_splits(case["num_splits"], split_len=case["split_len"])
    out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **_backend_kwargs(q, k, kw))
    ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
    assert_close_parity(out, ref_out, budget=budget.out, name=f"{_id(case)} out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"{_id(case)} lse")


# Scores that climb along the keys, slowly (the row reference of the kernels' online softmax
# moves only when a score passes it by more than 8 in log2 units, so p reaches 2^8 between
# moves) or steeply (a move every chunk), with jumps; the planner's splits and forced ones merged
# by the last CTA (5) and by the combine kernel (70); every cache type, bf16 and fp16 q. (The
# steep climb spans +-100 in a key channel.)
CLIMB = [dict(kv=kv, dtype=dt, k_trend=tr, ns=ns)
         for kv, dt in (("same", BF16), ("same", FP16), ("int8", BF16), ("fp8", FP16))
         for tr in (0.002, 0.05) for ns in (0, 5, 70)]


@needs_cuda
@pytest.mark.parametrize("case", CLIMB, ids=[_id(c) for c in CLIMB])
def test_climbing_scores(case):
    q, k, v, kw = make_case(B=3, h_q=8, h_kv=2, kv=case["kv"], dtype=case["dtype"], lens=[2000, 1, 700],
                            k_trend=case["k_trend"], k_jumps=4, seed=int(case["k_trend"] * 1000) + case["ns"])
    plan = cuda_backend.make_ifa_plan(q, k, None)
    if case["ns"]:
        plan = plan.with_splits(case["ns"])
    out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **_backend_kwargs(q, k, kw))
    ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
    assert float(ref_lse[0].min()) > math.log(2000) + 5  # climbing scores (random ones: ~log(2000))
    assert_close_parity(out, ref_out, budget=budget.out, name=f"{_id(case)} out")
    lse_tol = LSE_TOLERANCE
    if case["kv"] == "int8" and case["k_trend"] > 0.01:
        # Key channels spanning +-100: the int8 key-offset term sum_d q_d s_d o_d (~280 in lse
        # units here) and the mma's sum_d q_d s_d x_d cancel in fp32 for the short requests, whose
        # scores are small: 2^-24 * 280 * ~16 roundings ~ 3e-4 (H100: 1.2e-4 and 1.8e-4 measured;
        # the reference dequantizes first and sums small values).
        lse_tol = (5e-4,) + tuple(LSE_TOLERANCE[1:])
    assert_close_parity(lse, ref_lse, *lse_tol, budget=budget.lse, name=f"{_id(case)} lse")


# q with a one-signed bias (a channel sum of 64 to 512) on short requests, whose lse is the score
# itself: folding int8 keys as 1152 + x (with 1152 * sum(q) taken off the score) puts a 1-key
# request's lse 2.1e-3 off here, so the kernels take int8 keys exactly. 4 q rows per KV head, or 32 (S_q 4, causal: two m-tiles, where the
# int8 key-offset term is not summed in registers); every cache type, int8 with and without
# offsets, head dims 64 / 128 / 256.
BIASED_Q = [dict(kv=kv, D=D, q_bias=qb, rows=rows)
            for kv in ("same", "int8", "int8_sym", "fp8") for D in (64, 128, 256) for qb in (0.5, 2.0)
            for rows in (4, 32) if rows == 4 or (D == 128 and qb == 2.0)]


@needs_cuda
@pytest.mark.parametrize("case", BIASED_Q, ids=[_id(c) for c in BIASED_Q])
def test_biased_q_short_requests(case):
    S_q, h_q = (1, 8) if case["rows"] == 4 else (4, 16)
    kv = "int8" if case["kv"] == "int8_sym" else case["kv"]
    q, k, v, kw = make_case(B=4, S_q=S_q, h_q=h_q, h_kv=2, D=case["D"], kv=kv, causal=S_q > 1,
                            int8_offset=case["kv"] != "int8_sym", q_bias=case["q_bias"], lens=[1, 2, 17, 300],
                            seed=zlib.crc32(_id(case).encode()) % 1000)
    check(q, k, v, kw, name=_id(case))


# Plans whose first groups run whole and the rest split (the planner's tail split of multi-wave
# grids): every cache type, paged and contiguous, causal S_q 2, empty and 1-key requests among
# both kinds of group; split counts merged by the last CTA (3) and by the combine kernel (70).
WHOLE_GROUPS = [dict(kv=kv, page=pg, ns=ns) for kv in ("same", "int8", "fp8") for pg in (0, 64) for ns in (3, 70)]


@needs_cuda
@pytest.mark.parametrize("case", WHOLE_GROUPS, ids=[_id(c) for c in WHOLE_GROUPS])
def test_whole_groups_then_splits(case):
    lens = [1100, 0, 1, 700, 1120, 33]
    q, k, v, kw = make_case(B=6, h_q=8, h_kv=2, S_q=2, causal=True, kv=case["kv"], page=case["page"], lens=lens,
                            s_max=1120, seed=zlib.crc32(_id(case).encode()) % 1000)
    base = cuda_backend.make_ifa_plan(q, k, kw.get("block_table"))
    bk = _backend_kwargs(q, k, kw)
    ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
    for whole in (1, 5, 11):  # groups 0..whole-1 whole: a split group first / mid-batch / last
        plan = base.with_splits(case["ns"], whole_groups=whole)
        out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **bk)
        assert_close_parity(out, ref_out, budget=budget.out, name=f"{_id(case)} whole={whole} out")
        assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"{_id(case)} whole={whole} lse")


# First-wave CTAs of 16-bit caches prefetch their split's first pipeline fill into L2 before the
# grid-dependency wait, where the split is longer than the fill (128 keys at D 256, 256 at D 128,
# 512 at D 64; paged: at least 2 fills): every layout it reads spans of, and one it skips.
PREFETCH = [dict(dtype=BF16, D=D, layout=lay) for D in (64, 128, 256)
            for lay in ("bshd", "bhsd", "fused", "page16", "page64")]
PREFETCH += [dict(dtype=FP16, D=128, layout="bshd"), dict(dtype=FP16, D=128, layout="page16")]


@needs_cuda
@pytest.mark.parametrize("case", PREFETCH, ids=[_id(c) for c in PREFETCH])
def test_first_fill_prefetch_layouts(case):
    """Long splits (one per request, two, three) on every layout the prefetches read: a head's rows
    dense (a BHSD tensor seen as [B, S, H, D]), heads packed in a row (BSHD), paged blocks -- the
    fill spans several blocks of 16, and the table entries past a request hold -1 or ids past the
    pool, which the prefetches read before kv_lens and must ignore -- and k / v interleaved (not
    prefetched). NaN in every unused slot, so a prefetch that leaked into the arithmetic fails."""
    lay, D = case["layout"], case["D"]
    page = {"page16": 16, "page64": 64}.get(lay, 0)
    # one split of 4512 keys (the second fill is prefetched too, after the wait: splits of >= 4096
    # keys), two of 2256 or three of 1504: every fill rule engages
    lens = [4500, 3, 1300, 0]
    q, k, v, kw = make_case(B=4, h_q=8, h_kv=2, D=D, dtype=case["dtype"], lens=lens, page=page,
                            fused_kv=lay == "fused", seed=zlib.crc32(_id(case).encode()) % 1000)
    if lay == "bhsd":
        k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (k, v))
        assert k.stride(1) == D
    if page:
        table = kw["block_table"]
        for b, n in enumerate(lens):
            used = math.ceil(n / page)
            past = torch.arange(table.shape[1] - used, device=table.device, dtype=torch.int32)
            table[b, used:] = torch.where(past % 2 == 0, -1, k.shape[0] + 1000 * (past + 1))
    base = cuda_backend.make_ifa_plan(q, k, kw.get("block_table"))
    for num_splits in (1, 2, 3):
        plan = base.with_splits(num_splits)
        out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **_backend_kwargs(q, k, kw))
        ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
        assert_close_parity(out, ref_out, budget=budget.out, name=f"{_id(case)} splits={num_splits} out")
        assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"{_id(case)} splits={num_splits} lse")


@needs_cuda
@pytest.mark.parametrize("num_splits", [3, 12, 70])
def test_split_merge_repeats_and_graph_replays(num_splits):
    """Few splits: the last CTA of each group merges in the split kernel (arrival counters that the
    merging CTA resets); many (70 x 4 rows x 512 B > 128 KB of partials): the combine kernel. The
    same plan called again and again, eagerly and as graph replays (a capture stream without
    counters of its own uses the combine kernel), must stay right."""
    q, k, v, kw = make_case(B=2, h_q=8, h_kv=2, lens=[1100, 700], s_max=1120, seed=num_splits)
    base = cuda_backend.make_ifa_plan(q, k, None)
    plan = base.with_splits(num_splits)
    bk = _backend_kwargs(q, k, kw)
    for rep in range(3):
        out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **bk)
        ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
        assert_close_parity(out, ref_out, budget=budget.out, name=f"repeat {rep} out")
        assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"repeat {rep} lse")
    torch.cuda.synchronize()
    _capture_and_check_replays(q, k, v, kw, plan, bk, [None] * 3)


@needs_cuda
def test_split_merge_on_concurrent_streams():
    """Split-KV calls with the in-kernel merge running at the same time on two streams: each stream
    has its own arrival counters, so neither corrupts the other's merge."""
    cases = [make_case(B=2, h_q=8, h_kv=2, lens=[1100, 700], s_max=1120, seed=40 + i) for i in range(2)]
    plans = []
    for q, k, v, kw in cases:
        base = cuda_backend.make_ifa_plan(q, k, None)
        plans.append(base.with_splits(3, split_len=384))
    streams = [torch.cuda.Stream() for _ in cases]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    results = [[] for _ in cases]
    for _ in range(20):
        for i, ((q, k, v, kw), plan, s) in enumerate(zip(cases, plans, streams)):
            with torch.cuda.stream(s):
                results[i].append(cuda_backend.incre_flash_attention(q, k, v, plan=plan, **_backend_kwargs(q, k, kw)))
    torch.cuda.synchronize()
    assert len(cuda_backend._MERGE_COUNTERS.buffers) >= 2
    for (q, k, v, kw), res in zip(cases, results):
        ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
        for n, (out, lse) in enumerate(res):
            assert_close_parity(out, ref_out, budget=budget.out, name=f"stream call {n} out")
            assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"stream call {n} lse")


# ----------------------------------------------------------------------------- CTA shapes

# Grids of many short units (at least two CTAs per SM, short units; ifa_launch.cuh
# many_short_units) go out as narrow CTAs -- on 16-bit caches with the first wave's starts spread
# over 8 us -- where the GPU's DRAM bandwidth per SM calls for it, else as wide ones: varlen
# requests with 0 and 1 keys, paged and contiguous, every cache type, D 64 and 128.
MULTI_WAVE = [dict(kv=kv, D=D, page=pg) for kv in ("same", "int8", "fp8") for D in (64, 128) for pg in (0, 64)]



@needs_cuda
@pytest.mark.parametrize("case", MULTI_WAVE, ids=[_id(c) for c in MULTI_WAVE])
def test_multi_wave_grids(case):
    (q, k, v, kw), two_per_sm = multi_wave_case(zlib.crc32(_id(case).encode()) % 1000, **case)
    plan = cuda_backend.make_ifa_plan(q, k, kw.get("block_table"))
    assert plan.num_units >= two_per_sm, plan.describe()
    check(q, k, v, kw, name=_id(case))


# ----------------------------------------------------------------------------- CUDA graphs


@needs_cuda
@pytest.mark.parametrize("page", [0, 64])
def test_cuda_graph_decode_step(page):
    """Capture a decode step (plan made beforehand), then replay it on new q values and new
    kv_lens written in place: the graph must see them."""
    q, k, v, kw = make_case(B=2, h_q=16, h_kv=2, page=page, lens=[3000, 2100], s_max=3000, seed=7)
    plan = cuda_backend.make_ifa_plan(q, k, kw.get("block_table"))
    assert plan.num_splits > 1  # the split kernel with its merge is captured too
    bk = _backend_kwargs(q, k, kw)
    cuda_backend.incre_flash_attention(q, k, v, plan=plan, **bk)  # warm-up outside capture
    torch.cuda.synchronize()
    _capture_and_check_replays(q, k, v, kw, plan, bk, ([2999, 1], [1500, 2100], [0, 2048]))


# The public API keeps one prepared launch (cuda_backend.IfaLaunch) per call signature
# (ops._PREPARED): later calls with the same shapes, dtypes, strides and scalars only gather
# their tensors' addresses, allocate the outputs and launch.
REUSE = [dict(kv="same", page=0, h_q=8, h_kv=1, s_max=3000),                 # split + combine kernel
         dict(kv="int8", page=64, h_q=16, h_kv=2, s_max=700),               # paged, scales, offsets
         dict(kv="fp8", page=0, h_q=8, h_kv=2, S_q=3, causal=True, mask="per_batch", pse="bqk", pse_dtype=FP16,
              s_max=200)]


@needs_cuda
@pytest.mark.parametrize("case", REUSE, ids=[_id(c) for c in REUSE])
def test_prepared_launch_reused_across_calls(case):
    """Calls with fresh tensors and kv_lens values of one signature reuse the prepared launch and
    each gets its own data's answer (checked against the reference); a view of the same shape and
    strides that starts off a 16-byte boundary still gets the error."""
    from dualops import ops

    ops._PREPARED.clear()
    for seed in range(3):
        lens = [case["s_max"], 1 + 7 * seed, 64 - 9 * seed]  # paged: the same number of blocks each time
        q, k, v, kw = make_case(B=3, seed=seed, lens=lens, **case)
        check(q, k, v, kw, name=f"reuse {seed}")
        assert len(ops._PREPARED) == 1
    launch = next(iter(ops._PREPARED.values())).launch
    assert isinstance(launch, cuda_backend.IfaLaunch)
    flat = torch.empty(k.numel() + 16, dtype=k.dtype, device=k.device)
    k_off = flat[1:1 + k.numel()].view(k.shape)  # same shape and strides, start 1 element in
    k_off.copy_(k)
    with pytest.raises(ValueError, match="k and v caches must start on a 16-byte boundary"):  # the prepared launch's path
        dualops.incre_flash_attention(q, k_off, v, backend="cuda", return_lse=True, **kw)
    assert len(ops._PREPARED) == 1

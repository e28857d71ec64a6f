"""dualops.reference.mla_decode against explicit fp64 loops (one query token and head at a time)."""

import math

import pytest
import torch

from dualops import quant
from dualops.reference import mla_decode as ref_mla

INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1
FORMATS = [("bf16", 576), ("bf16", 512), ("fp8_v32", 576), ("fp8_model1", 512), ("int8_v32", 576)]


def make_cache(fmt, d, nb, pbs, unused):
    """A random cache in ``fmt`` whose tokens listed in ``unused`` (flat ids) hold NaN bytes.
    Returns (cache as the op takes it, dequantized fp64 [nb*pbs, d] view the naive reads)."""
    kv = (torch.randn(nb, pbs, 1, d) * 2).to(torch.bfloat16)
    if fmt == "bf16":
        cache = kv.clone()
        cache.view(-1, d)[unused] = float("nan")
    else:
        cache = quant.pack_mla_kv(kv, fmt)
        if fmt in ("fp8_v32", "int8_v32"):
            cache.view(-1, 656)[unused] = 0xFF   # NaN scales
        else:  # per block: token data, then token scales
            stream = cache.view(nb, -1)
            for t in unused.tolist():
                blk, off = divmod(t, pbs)
                stream[blk, off * 576:(off + 1) * 576] = 0xFF
                stream[blk, pbs * 576 + off * 8: pbs * 576 + off * 8 + 7] = 0xFF
    deq = quant.unpack_mla_kv(cache, fmt, torch.float32) if fmt != "bf16" else cache
    return cache, deq.double().view(-1, d)


def naive(q, key_lists, dv, scale, sink=None):
    """q [B,S_q,H_q,d]; key_lists[b][i] = fp64 [n, d] keys of query token (b, i)."""
    B, S_q, H_q, _ = q.shape
    out = torch.zeros(B, S_q, H_q, dv, dtype=torch.float64)
    lse = torch.full((B, H_q, S_q), math.inf, dtype=torch.float64)
    for b in range(B):
        for i in range(S_q):
            keys = key_lists[b][i]
            if keys.shape[0] == 0:
                continue
            for h in range(H_q):
                s = (keys @ q[b, i, h].double()) * scale
                lse[b, h, i] = torch.logsumexp(s, 0)
                o = torch.softmax(s, 0) @ keys[:, :dv]
                if sink is not None:
                    e = math.exp(lse[b, h, i])
                    o = o * (e / (e + math.exp(float(sink[h]))))
                out[b, i, h] = o
    return out, lse


def check(got, want, tol=2e-5):
    torch.testing.assert_close(got[0].double(), want[0], rtol=tol, atol=tol)
    torch.testing.assert_close(got[1].double(), want[1], rtol=tol, atol=tol)


@pytest.mark.parametrize("fmt,d", FORMATS)
@pytest.mark.parametrize("causal", [False, True])
def test_dense(fmt, d, causal):
    torch.manual_seed(len(fmt) + d + causal)
    B, S_q, H_q, pbs, max_blocks = 4, 2, 6, 8, 5
    lens = [0, 1, 40, 21]
    nb = B * max_blocks + 3
    table = torch.randperm(nb)[:B * max_blocks].view(B, max_blocks).to(torch.int32)
    used = torch.cat([table[b, j].long() * pbs + torch.arange(pbs) for b in range(B) for j in range(max_blocks)])
    used = used.view(B, -1)
    in_use = torch.zeros(nb * pbs, dtype=torch.bool)
    for b in range(B):
        in_use[used[b, :lens[b]]] = True
    cache, deq = make_cache(fmt, d, nb, pbs, torch.nonzero(~in_use).flatten())
    q = torch.randn(B, S_q, H_q, d, dtype=torch.bfloat16)
    dv = 512
    keys = [[deq[used[b, :max(0, lens[b] - (S_q - 1 - i if causal else 0))]] for i in range(S_q)] for b in range(B)]
    got = ref_mla(q, cache, table, torch.tensor(lens, dtype=torch.int32), head_dim_v=dv, causal=causal,
                  kv_format=fmt)
    assert got[0].shape == (B, S_q, H_q, dv) and got[1].shape == (B, H_q, S_q)
    check(got, naive(q, keys, dv, d ** -0.5))
    assert (got[0][0] == 0).all() and torch.isinf(got[1][0]).all()  # seqlen 0
    if causal:  # seqlen 1, S_q 2: the first query token sees nothing
        assert torch.isinf(got[1][1, :, 0]).all() and torch.isfinite(got[1][1, :, 1]).all()
    assert torch.isfinite(got[0]).all()


def test_model1_padded_block_stride():
    torch.manual_seed(7)
    nb, pbs, d = 4, 8, 512
    cache, _ = make_cache("fp8_model1", d, nb, pbs, torch.tensor([], dtype=torch.long))
    stride = (pbs * 584 + 575) // 576 * 576  # FlashMLA's padded block
    buf = torch.zeros(nb, stride, dtype=torch.uint8)
    buf[:, :pbs * 584] = cache.view(nb, -1)
    padded = buf[:, :pbs * 584].view(nb, pbs, 1, 584)
    q = torch.randn(2, 1, 4, d, dtype=torch.bfloat16)
    table = torch.tensor([[3, 1], [0, 2]], dtype=torch.int32)
    lens = torch.tensor([13, 16], dtype=torch.int32)
    a = ref_mla(q, cache, table, lens, kv_format="fp8_model1")
    b = ref_mla(q, padded, table, lens, kv_format="fp8_model1")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _indices(B, S_q, topk, cap, valid_pool):
    """Random indices from valid_pool with invalid entries (-1, INT_MIN, cap, INT_MAX) mixed in."""
    idx = valid_pool[torch.randint(0, len(valid_pool), (B, S_q, topk))]
    bad = torch.rand(B, S_q, topk) < 0.25
    junk = torch.tensor([-1, INT_MIN, cap, INT_MAX])[torch.randint(0, 4, (B, S_q, topk))]
    return torch.where(bad, junk, idx).to(torch.int32)


def _sparse_keys(deq, idx, length):
    cap = deq.shape[0]
    ids = [int(t) for t in idx[:length] if 0 <= int(t) < cap]
    return deq[ids]


@pytest.mark.parametrize("fmt,d", FORMATS)
def test_sparse_with_extra_pool_topk_length_and_sink(fmt, d):
    torch.manual_seed(len(fmt) * 3 + d)
    B, S_q, H_q, topk, extra_topk = 3, 2, 6, 12, 5
    nb, pbs, enb, epbs = 6, 8, 5, 3  # the extra pool has its own page size
    cap, ecap = nb * pbs, enb * epbs
    # Half the tokens are poisoned; in-range indices point at them only past topk_length.
    good = torch.randperm(cap)[:cap // 2]
    egood = torch.randperm(ecap)[:ecap // 2]
    bad_tokens = torch.tensor(sorted(set(range(cap)) - set(good.tolist())))
    ebad_tokens = torch.tensor(sorted(set(range(ecap)) - set(egood.tolist())))
    cache, deq = make_cache(fmt, d, nb, pbs, bad_tokens)
    ecache, edeq = make_cache(fmt, d, enb, epbs, ebad_tokens)
    indices = _indices(B, S_q, topk, cap, good)
    extra_indices = _indices(B, S_q, extra_topk, ecap, egood)
    topk_length = torch.tensor([12, 0, 7], dtype=torch.int32)
    extra_topk_length = torch.tensor([5, 2, 0], dtype=torch.int32)
    indices[2, :, 7:] = bad_tokens[0]  # beyond topk_length: must never be read
    extra_indices[2, :, :] = ebad_tokens[0]
    sink = torch.tensor([math.inf, -math.inf, 0.5, -1.0, 2.0, 0.0])
    q = torch.randn(B, S_q, H_q, d, dtype=torch.bfloat16)
    dv = 512
    keys = [[torch.cat([_sparse_keys(deq, indices[b, i], int(topk_length[b])),
                        _sparse_keys(edeq, extra_indices[b, i], int(extra_topk_length[b]))])
             for i in range(S_q)] for b in range(B)]
    got = ref_mla(q, cache, None, None, head_dim_v=dv, kv_format=fmt, indices=indices, topk_length=topk_length,
                  attn_sink=sink, extra_kv_cache=ecache, extra_indices=extra_indices,
                  extra_topk_length=extra_topk_length, softmax_scale=0.05)
    check(got, naive(q, keys, dv, 0.05, sink=sink))
    out, lse = got
    assert torch.isfinite(out).all()
    assert (out[:, :, 0] == 0).all()  # sink +inf
    no_sink = ref_mla(q, cache, None, None, kv_format=fmt, indices=indices, topk_length=topk_length,
                      extra_kv_cache=ecache, extra_indices=extra_indices, extra_topk_length=extra_topk_length,
                      softmax_scale=0.05)
    torch.testing.assert_close(out[:, :, 1], no_sink[0][:, :, 1])  # sink -inf changes nothing
    assert torch.equal(lse, no_sink[1])  # the sink never changes lse


def test_sparse_nothing_valid():
    torch.manual_seed(9)
    cache = torch.randn(2, 4, 1, 576, dtype=torch.bfloat16)
    q = torch.randn(2, 1, 4, 576, dtype=torch.bfloat16)
    indices = torch.tensor([[[-1, 8, INT_MAX]], [[INT_MIN, -1, -1]]], dtype=torch.int32)
    out, lse = ref_mla(q, cache, None, None, indices=indices, attn_sink=torch.full((4,), math.inf))
    assert (out == 0).all() and torch.isinf(lse).all() and (lse > 0).all()


def test_fp64_compute_and_head_dim_v():
    torch.manual_seed(10)
    nb, pbs, d = 3, 4, 576
    cache = torch.randn(nb, pbs, 1, d, dtype=torch.float64)
    q = torch.randn(2, 2, 3, d, dtype=torch.float64)
    table = torch.tensor([[2, 0, 1], [1, 2, 0]], dtype=torch.int32)
    lens = [11, 5]
    flat = cache.view(-1, d)
    keys = [[flat[(table[b, torch.arange(lens[b]) // pbs].long() * pbs + torch.arange(lens[b]) % pbs)]] * 2
            for b in range(2)]
    out, lse = ref_mla(q, cache, table, torch.tensor(lens, dtype=torch.int32), head_dim_v=128,
                       compute_dtype=torch.float64)
    assert out.dtype == lse.dtype == torch.float64 and out.shape[-1] == 128
    want = naive(q, keys, 128, d ** -0.5)
    torch.testing.assert_close(out, want[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want[1], rtol=1e-12, atol=1e-12)


def test_errors():
    q = torch.randn(1, 1, 2, 576, dtype=torch.bfloat16)
    cache = torch.randn(2, 4, 1, 576, dtype=torch.bfloat16)
    table = torch.tensor([[0, 5]], dtype=torch.int32)
    lens = torch.tensor([6], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"block ids outside \[0, 2\)"):
        ref_mla(q, cache, table, lens)
    with pytest.raises(ValueError, match="cache_seqlens"):
        ref_mla(q, cache, table, torch.tensor([9], dtype=torch.int32))
    with pytest.raises(ValueError, match="does not match kv_cache d_qk"):
        ref_mla(q[..., :512], cache, table, lens)
    with pytest.raises(ValueError, match="causal applies to dense"):
        ref_mla(q, cache, None, None, causal=True, indices=torch.zeros(1, 1, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="extra_indices is required"):
        ref_mla(q, cache, None, None, indices=torch.zeros(1, 1, 2, dtype=torch.int32), extra_kv_cache=cache)
    with pytest.raises(ValueError, match="topk_length needs sparse"):
        ref_mla(q, cache, table, lens, topk_length=lens)
    with pytest.raises(TypeError, match="uint8"):
        ref_mla(q, cache, table, lens, kv_format="fp8_v32")
    with pytest.raises(TypeError, match="'int8_v32' must be uint8"):
        ref_mla(q, cache.view(torch.int8)[..., :656], table, lens, kv_format="int8_v32")
    with pytest.raises(ValueError, match="int8_v32.*656 bytes"):
        ref_mla(q, torch.zeros(2, 4, 1, 584, dtype=torch.uint8), table, lens, kv_format="int8_v32")
    with pytest.raises(ValueError, match="q head dim 512 does not match kv_cache d_qk 576 \\(int8_v32\\)"):
        ref_mla(q[..., :512], torch.zeros(2, 4, 1, 656, dtype=torch.uint8), table, lens, kv_format="int8_v32")
    with pytest.raises(ValueError, match="attn_sink"):
        ref_mla(q, cache, None, None, indices=torch.zeros(1, 1, 2, dtype=torch.int32), attn_sink=torch.zeros(3))

"""dualops.reference.incre_flash_attention against explicit fp64 loops over the valid keys."""

import math

import pytest
import torch

from dualops import quant
from dualops.parity.builders import nan_tail, page
from dualops.reference import incre_flash_attention as ref_ifa


def naive(q, k, v, lens, scale, causal=False, mask=None, pse=None):
    """q [B,S_q,H_q,D], logical k/v [B,S,H_kv,D] (dequantized, fp64); mask/pse full
    [B,H_q,S_q,S_kv].  One (batch, head, query) at a time, plain softmax over visible keys."""
    B, S_q, H_q, D = q.shape
    group = H_q // k.shape[2]
    out = torch.zeros(B, S_q, H_q, D, dtype=torch.float64)
    lse = torch.full((B, H_q, S_q), math.inf, dtype=torch.float64)
    for b in range(B):
        for h in range(H_q):
            for i in range(S_q):
                keys = [j for j in range(lens[b])
                        if not (causal and j >= lens[b] - S_q + i + 1)
                        and not (mask is not None and bool(mask[b, h, i, j]))]
                if not keys:
                    continue
                kk, vv = k[b, keys, h // group].double(), v[b, keys, h // group].double()
                s = (kk @ q[b, i, h].double()) * scale
                if pse is not None:
                    s = s + pse[b, h, i, keys].double()
                lse[b, h, i] = torch.logsumexp(s, 0)
                out[b, i, h] = torch.softmax(s, 0) @ vv
    return out, lse


def check(got, want, tol=2e-5):
    out, lse = got
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), want[0], rtol=tol, atol=tol)
    torch.testing.assert_close(lse.double(), want[1], rtol=tol, atol=tol)  # +inf rows must match


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("h_q,h_kv", [(4, 4), (8, 2), (6, 1)])
def test_layouts_and_heads(paged, h_q, h_kv):
    torch.manual_seed(h_q * 10 + h_kv + paged)
    B, S, D, bs = 4, 37, 32, 8
    lens = [0, 1, 37, 20]
    q = torch.randn(B, 1, h_q, D, dtype=torch.bfloat16)
    k = torch.randn(B, S, h_kv, D, dtype=torch.bfloat16)
    v = torch.randn(B, S, h_kv, D, dtype=torch.bfloat16)
    kv_lens = torch.tensor(lens, dtype=torch.int32)
    if paged:  # k and v share one block table: page them together
        (pool,), table = page((torch.cat([k, v], dim=-1),), lens, bs, torch.Generator().manual_seed(1), unused_id=-1)
        got = ref_ifa(q, pool[..., :D], pool[..., D:], kv_lens=kv_lens, block_table=table)
    else:
        got = ref_ifa(q, nan_tail(k, lens), nan_tail(v, lens), kv_lens=kv_lens)
    want = naive(q, k, v, lens, D ** -0.5)
    check(got, want)
    assert torch.isinf(got[1][0]).all() and (got[0][0] == 0).all()  # kv_len 0: out 0, lse +inf
    assert torch.isfinite(got[0]).all()


def test_default_lengths_and_fp16():
    torch.manual_seed(1)
    q = torch.randn(2, 1, 4, 16, dtype=torch.float16)
    k = torch.randn(2, 9, 2, 16, dtype=torch.float16)
    v = torch.randn(2, 9, 2, 16, dtype=torch.float16)
    check(ref_ifa(q, k, v, softmax_scale=0.3), naive(q, k, v, [9, 9], 0.3))


@pytest.mark.parametrize("paged", [False, True])
def test_causal_mtp(paged):
    torch.manual_seed(2)
    B, S_q, S, H_q, H_kv, D = 4, 3, 16, 4, 2, 16
    lens = [1, 2, 16, 9]  # lengths < S_q leave early queries with nothing to see
    q = torch.randn(B, S_q, H_q, D, dtype=torch.bfloat16)
    k = torch.randn(B, S, H_kv, D, dtype=torch.bfloat16)
    v = torch.randn(B, S, H_kv, D, dtype=torch.bfloat16)
    kv_lens = torch.tensor(lens, dtype=torch.int32)
    if paged:
        kv = torch.cat([k, v], dim=-1)
        (pool,), table = page((kv,), lens, 4, torch.Generator().manual_seed(2), unused_id=-1)
        got = ref_ifa(q, pool[..., :D], pool[..., D:], kv_lens=kv_lens, block_table=table, causal=True)
    else:
        got = ref_ifa(q, k, v, kv_lens=kv_lens, causal=True)
    want = naive(q, k, v, lens, D ** -0.5, causal=True)
    check(got, want)
    assert torch.isinf(got[1][0, :, :2]).all() and torch.isfinite(got[1][0, :, 2]).all()
    assert torch.isinf(got[1][1, :, 0]).all()


@pytest.mark.parametrize("paged", [False, True])
def test_mask_and_pse(paged):
    torch.manual_seed(3)
    B, S_q, S, H_q, H_kv, D, bs = 3, 2, 24, 4, 2, 16, 8
    lens = [24, 13, 5]
    q = torch.randn(B, S_q, H_q, D, dtype=torch.bfloat16)
    k = torch.randn(B, S, H_kv, D, dtype=torch.bfloat16)
    v = torch.randn(B, S, H_kv, D, dtype=torch.bfloat16)
    s_kv = S  # paged: 3 blocks of 8 per request -> also 24
    mask = torch.rand(B, 1, S_q, s_kv) < 0.3  # broadcast over heads
    mask[2, 0, 1, :] = True  # a fully masked row
    pse = torch.randn(1, H_q, S_q, s_kv)  # broadcast over batch
    kv_lens = torch.tensor(lens, dtype=torch.int32)
    if paged:
        (pool,), table = page((torch.cat([k, v], dim=-1),), lens, bs, torch.Generator().manual_seed(3), unused_id=-1)
        got = ref_ifa(q, pool[..., :D], pool[..., D:], kv_lens=kv_lens, block_table=table,
                      atten_mask=mask, pse_shift=pse, softmax_scale=0.2)
    else:
        got = ref_ifa(q, k, v, kv_lens=kv_lens, atten_mask=mask, pse_shift=pse, softmax_scale=0.2)
    full = (B, H_q, S_q, s_kv)
    want = naive(q, k, v, lens, 0.2, mask=mask.expand(full), pse=pse.expand(full))
    check(got, want)
    assert torch.isinf(got[1][2, :, 1]).all() and (got[0][2, 1] == 0).all()


@pytest.mark.parametrize("kind", ["int8_offset", "int8_symmetric", "fp8"])
@pytest.mark.parametrize("paged", [False, True])
def test_quantized_cache(kind, paged):
    torch.manual_seed(4)
    B, S, H_q, H_kv, D, bs = 3, 20, 8, 2, 16, 4
    lens = [20, 7, 0]
    q = torch.randn(B, 2, H_q, D, dtype=torch.bfloat16)
    k, v = torch.randn(B, S, H_kv, D) * 3 + 1, torch.randn(B, S, H_kv, D)
    if kind == "fp8":
        (kq, ks), (vq, vs) = quant.quantize_kv_fp8(k), quant.quantize_kv_fp8(v)
        ko = vo = None
        k_deq, v_deq = kq.double() * ks.double(), vq.double() * vs.double()
    else:
        kq, ks, ko = quant.quantize_kv_int8(k, symmetric=kind == "int8_symmetric")
        vq, vs, vo = quant.quantize_kv_int8(v, symmetric=kind == "int8_symmetric")
        k_deq = (kq.double() + (0 if ko is None else ko.double())) * ks.double()
        v_deq = (vq.double() + (0 if vo is None else vo.double())) * vs.double()
    args = dict(k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo, kv_lens=torch.tensor(lens, dtype=torch.int32),
                causal=True)
    if paged:
        (pool,), table = page((torch.cat([kq, vq], dim=-1),), lens, bs, torch.Generator().manual_seed(4), unused_id=-1)
        got = ref_ifa(q, pool[..., :D], pool[..., D:], block_table=table, **args)
    else:
        got = ref_ifa(q, nan_tail(kq, lens), nan_tail(vq, lens), **args)
    want = naive(q, k_deq, v_deq, lens, D ** -0.5, causal=True)
    check(got, want)


def test_fp64_compute():
    torch.manual_seed(5)
    q = torch.randn(2, 2, 4, 8, dtype=torch.float64)
    k, v = torch.randn(2, 12, 2, 8, dtype=torch.float64), torch.randn(2, 12, 2, 8, dtype=torch.float64)
    lens = [12, 3]
    pse = torch.randn(2, 4, 2, 12, dtype=torch.float64)
    out, lse = ref_ifa(q, k, v, kv_lens=torch.tensor(lens, dtype=torch.int32), causal=True, pse_shift=pse,
                       compute_dtype=torch.float64)
    assert out.dtype == lse.dtype == torch.float64
    want = naive(q, k, v, lens, 8 ** -0.5, causal=True, pse=pse)
    torch.testing.assert_close(out, want[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want[1], rtol=1e-12, atol=1e-12)


def test_nan_in_valid_key_propagates():
    q = torch.randn(1, 1, 2, 8)
    k, v = torch.randn(1, 4, 1, 8), torch.randn(1, 4, 1, 8)
    v[0, 1] = float("nan")
    out, _ = ref_ifa(q, k, v)
    assert torch.isnan(out).all()  # bad data inside kv_len is not hidden


def test_errors():
    q = torch.randn(1, 1, 4, 8, dtype=torch.bfloat16)
    cache = torch.randn(4, 4, 2, 8, dtype=torch.bfloat16)
    table = torch.tensor([[0, 9]], dtype=torch.int32)
    with pytest.raises(ValueError, match="kv_lens is required"):
        ref_ifa(q, cache, cache, block_table=table)
    with pytest.raises(ValueError, match=r"block ids outside \[0, 4\)"):
        ref_ifa(q, cache, cache, block_table=table, kv_lens=torch.tensor([6], dtype=torch.int32))
    # block id 9 is past kv_len 4 -> never read, fine
    ref_ifa(q, cache, cache, block_table=table, kv_lens=torch.tensor([4], dtype=torch.int32))
    with pytest.raises(ValueError, match="multiple of H_kv"):
        ref_ifa(torch.randn(1, 1, 3, 8), cache[:1], cache[:1])
    with pytest.raises(ValueError, match="int8 / float8_e4m3fn caches only"):
        ref_ifa(q, cache[:1], cache[:1], k_scale=torch.ones(2, 8))
    with pytest.raises(ValueError, match="k_scale is required"):
        ref_ifa(q, cache[:1].to(torch.int8), cache[:1].to(torch.int8))
    with pytest.raises(ValueError, match="broadcastable"):
        ref_ifa(q, cache[:1], cache[:1], atten_mask=torch.zeros(1, 1, 1, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="atten_mask"):
        ref_ifa(q, cache[:1], cache[:1], atten_mask=torch.zeros(1, 1, 1, 4))
    with pytest.raises(ValueError, match=r"kv_lens entries must be in \[0, 4\]"):
        ref_ifa(q, cache[:1], cache[:1], kv_lens=torch.tensor([5], dtype=torch.int32))
    with pytest.raises(ValueError, match="compute_dtype"):
        ref_ifa(q, cache[:1], cache[:1], compute_dtype=torch.float16)

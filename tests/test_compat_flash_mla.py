"""dualops.compat.flash_mla against the native dualops.mla_decode, with the call patterns of
FlashMLA's own decode tests (tests/test_flash_mla_{dense,sparse}_decoding.py at 9241ae3): the
no-argument get_mla_metadata() filled on the first call, NaN in every unused cache slot, block
ids past a request's length set to 2147480000, several KV heads, FP8 caches as float8_e4m3fn
views of padded buffers, page sizes 2 / 53 / 61 / 69, sparse calls without block table."""
from __future__ import annotations

import pytest
import torch

import dualops
from dualops.compat import _mla_pools, flash_mla
from dualops.quant import pack_mla_kv

bf16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
from backend_params import BACKENDS, device_of as _dev  # noqa: E402


def _same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(torch.nan_to_num(a.float(), 7.0), torch.nan_to_num(b.float(), 7.0))


# ----------------------------------------------------------------------------- dense


def _dense_inputs(g, B, s_q, h_q, h_kv, lens, bs=64, dtype=bf16, d=576):
    max_pad = max(-(-max(lens) // 256) * 256, 256)
    n_blocks = B * -(-max_pad // bs)
    table = torch.randperm(n_blocks, generator=g).to(torch.int32).view(B, -1)
    q = (torch.randn(B, s_q, h_q, d, generator=g) / 10).clamp(-1, 1).to(dtype)
    kv = (torch.randn(n_blocks, bs, h_kv, d, generator=g) / 10).clamp(-1, 1).to(dtype)
    for i, n in enumerate(lens):  # FlashMLA's test: NaN past each request's tokens, bogus block ids
        used = -(-n // bs)
        kv[table[i, used:].long()] = float("nan")
        if n % bs:
            kv[table[i, used - 1].long(), n % bs:] = float("nan")
        table[i, used:] = 2147480000
    return q, kv, table, torch.tensor(lens, dtype=torch.int32)


def _native_dense(q, kv, table, lens, causal, backend):
    """One native call per KV head with its group of query heads (FlashMLA's dense GQA)."""
    h_kv = kv.shape[2]
    g = q.shape[2] // h_kv
    outs, lses = [], []
    for j in range(h_kv):
        o, lse = dualops.mla_decode(q[:, :, j * g:(j + 1) * g], kv[:, :, j:j + 1].contiguous(), table, lens,
                                    causal=causal, backend=backend)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs, 2), torch.cat(lses, 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("h_q,h_kv,s_q,causal", [(16, 1, 1, False), (9, 3, 2, True), (8, 2, 2, False),
                                                 (16, 8, 1, True), (3, 3, 4, True)])
def test_dense_matches_native(backend, h_q, h_kv, s_q, causal):
    g = torch.Generator().manual_seed(h_q * 10 + h_kv)
    dev = _dev(backend)
    q, kv, table, lens = (t.to(dev) for t in _dense_inputs(g, 3, s_q, h_q, h_kv, [140, 0, 20]))
    meta, splits = flash_mla.get_mla_metadata()
    assert splits is None and not meta.have_initialized
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, splits, causal=causal,
                                                backend=backend)
    assert meta.have_initialized and meta.config.h_k == h_kv and meta.config.page_block_size == 64
    want_out, want_lse = _native_dense(q, kv, table, lens, causal, backend)
    _same(out, want_out)
    _same(lse, want_lse)
    assert torch.isinf(lse[1]).all() and (lse[1] > 0).all() and not out[1].any()  # the empty request
    again = flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, None, causal=causal, backend=backend)
    _same(again[0], out)


def test_dense_fp16_and_scale(gen):
    q, kv, table, lens = _dense_inputs(gen, 2, 1, 8, 1, [70, 33], dtype=torch.float16)
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, flash_mla.get_mla_metadata()[0],
                                                softmax_scale=0.3)
    want = dualops.mla_decode(q, kv, table, lens, softmax_scale=0.3)
    _same(out, want[0])
    _same(lse, want[1])


def test_old_get_mla_metadata_form(gen):
    q, kv, table, lens = _dense_inputs(gen, 2, 2, 16, 1, [90, 7])
    meta, splits = flash_mla.get_mla_metadata(lens, 2 * 16, 1)  # FlashMLA's 2025 arguments
    assert isinstance(meta, flash_mla.FlashMLASchedMeta) and splits is None
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, splits, causal=True)
    want = dualops.mla_decode(q, kv, table, lens, causal=True)
    _same(out, want[0])
    _same(lse, want[1])


@pytest.mark.parametrize("pbs", [8, 24])
def test_dense_page_size_fallback(gen, pbs, monkeypatch):
    """A backend rule of page sizes in multiples of 16 (CUDA's): each request's tokens are
    gathered into 64-token pages; the result is the one of the original cache."""
    q, kv, table, lens = _dense_inputs(gen, 2, 2, 16, 2, [100, 31], bs=pbs)
    want = _native_dense(q, kv, table, lens, True, "reference")
    monkeypatch.setattr(_mla_pools, "page_ok", lambda backend, p: p % 16 == 0)
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, flash_mla.get_mla_metadata()[0],
                                                causal=True)
    torch.testing.assert_close(out, want[0], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(lse, want[1], rtol=1e-6, atol=1e-6)


def test_reused_schedule_checks_the_call(gen):
    q, kv, table, lens = _dense_inputs(gen, 2, 1, 16, 1, [50, 8])
    meta, _ = flash_mla.get_mla_metadata()
    flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, meta)
    with pytest.raises(ValueError, match="h_q"):
        flash_mla.flash_mla_with_kvcache(q[:, :, :8], kv, table, lens, 512, meta)
    with pytest.raises(ValueError, match="causal"):
        flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, causal=True)


# ----------------------------------------------------------------------------- sparse


def _fp8_cache(g, fmt, nb, bs, padded, view=FP8):
    """An FP8 cache built the way FlashMLA's tests build it: a slice of a padded buffer
    (V3.2: one spare token per block; MODEL1: blocks padded to a multiple of 576 bytes)."""
    d = 576 if fmt == "fp8_v32" else 512
    kv = (torch.randn(nb, bs, 1, d, generator=g) / 10).clamp(-1, 1).to(bf16)
    packed = pack_mla_kv(kv, kv_format=fmt)
    tb = packed.shape[-1]
    if not padded:
        return packed, packed.view(view)
    if fmt == "fp8_v32":
        buf = torch.full((nb, bs + 1, tb), 0x7F, dtype=torch.uint8)
        buf[:, :bs] = packed.view(nb, bs, tb)
        return packed, buf[:, :bs].view(nb, bs, 1, tb).view(view)
    stride = -(-bs * tb // 576) * 576
    buf = torch.full((nb, stride), 0x7F, dtype=torch.uint8)
    buf[:, :bs * tb] = packed.view(nb, bs * tb)
    return packed, buf[:, :bs * tb].view(nb, bs, 1, tb).view(view)


def _indices(g, B, s_q, topk, capacity):
    idx = torch.stack([torch.randperm(capacity, generator=g)[:topk] for _ in range(B * s_q)]).view(B, s_q, topk)
    idx = idx.to(torch.int32)
    bad = torch.rand(B, s_q, topk, generator=g) < 0.2
    return torch.where(bad, torch.full_like(idx, -1), idx)


def _sparse_case(g, fmt, bs, padded, extra_bs=None, view=FP8, B=3, s_q=2, h_q=16):
    d = 576 if fmt == "fp8_v32" else 512
    nb = -(-300 // bs)
    packed, cache = _fp8_cache(g, fmt, nb, bs, padded, view)
    q = (torch.randn(B, s_q, h_q, d, generator=g) / 3).to(bf16)
    sink = torch.randn(h_q, generator=g)
    sink[::5] = float("inf")
    sink[1::7] = float("-inf")
    case = dict(q=q, packed=packed, cache=cache, idx=_indices(g, B, s_q, 64, nb * bs),
                topk_length=torch.tensor([64, 0, 17][:B], dtype=torch.int32), sink=sink)
    if extra_bs is not None:
        nb2 = -(-130 // extra_bs)
        case["packed2"], case["cache2"] = _fp8_cache(g, fmt, nb2, extra_bs, padded, view)
        case["idx2"] = _indices(g, B, s_q, 32, nb2 * extra_bs)
        case["topk_length2"] = torch.tensor([5, 32, 0][:B], dtype=torch.int32)
    return case


def _sparse_calls(c, backend, meta=None, native=True):
    dev = _dev(backend)
    t = {k: v.to(dev) for k, v in c.items()}
    extra = "cache2" in c
    got = flash_mla.flash_mla_with_kvcache(
        t["q"], t["cache"], None, None, 512, meta if meta is not None else flash_mla.get_mla_metadata()[0],
        None, 0.07, False, True, t["idx"], t["sink"], t["cache2"] if extra else None,
        t["idx2"] if extra else None, t["topk_length"], t["topk_length2"] if extra else None, backend=backend)
    if not native:
        return got, None
    args, kw = _native_args(t)
    return got, dualops.mla_decode(*args, **kw, backend=backend)


def _native_args(t):
    """The native sparse call's arguments on the case's original pools (tensors t)."""
    B, dev, extra = t["q"].shape[0], t["q"].device, "cache2" in t
    return (t["q"], t["packed"], torch.zeros(B, 1, dtype=torch.int32, device=dev),
            torch.zeros(B, dtype=torch.int32, device=dev)), dict(
        softmax_scale=0.07, kv_format="fp8_v32" if t["packed"].shape[-1] == 656 else "fp8_model1",
        indices=t["idx"], topk_length=t["topk_length"], attn_sink=t["sink"],
        extra_kv_cache=t["packed2"] if extra else None, extra_indices=t["idx2"] if extra else None,
        extra_topk_length=t["topk_length2"] if extra else None)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt,bs,padded,extra_bs", [
    ("fp8_v32", 2, True, None), ("fp8_v32", 64, True, None), ("fp8_v32", 69, True, None),
    ("fp8_v32", 61, False, None), ("fp8_model1", 53, True, 2), ("fp8_model1", 64, True, 61),
    ("fp8_model1", 2, False, 69)])
def test_sparse_matches_native(backend, fmt, bs, padded, extra_bs):
    """The shim against the native call on the original pools; where the backend does not take
    those page sizes natively (CUDA: multiples of 16), the shim's call on this backend against the
    fp32 reference on the original pools, within the parity contract's bound."""
    g = torch.Generator().manual_seed(bs * 7 + (extra_bs or 0))
    c = _sparse_case(g, fmt, bs, padded, extra_bs)
    meta, _ = flash_mla.get_mla_metadata()
    native = all(_mla_pools.page_ok(backend, p) for p in (bs, extra_bs or bs))
    (out, lse), want = _sparse_calls(c, backend, meta, native=native)
    if native:
        torch.testing.assert_close(out, want[0], rtol=0, atol=0)
        torch.testing.assert_close(lse, want[1], rtol=0, atol=0)
    else:
        args, kw = _native_args(c)
        ref_out, ref_lse, budget = dualops.reference.mla_decode(*args, **kw, return_budget=True)
        dualops.testing.assert_close_parity(out.cpu(), ref_out, budget=budget.out, name="sparse out")
        dualops.testing.assert_close_parity(lse.cpu(), ref_lse, budget=budget.lse, name="sparse lse")
    assert meta.config.topk == 64 and meta.config.is_fp8_kvcache and meta.config.extra_topk == (32 if extra_bs else None)
    again, _ = _sparse_calls(c, backend, meta, native=False)  # the filled schedule is reused
    torch.testing.assert_close(again[0], out, rtol=0, atol=0)


@pytest.mark.parametrize("fmt,bs,extra_bs", [("fp8_v32", 2, 69), ("fp8_v32", 53, None), ("fp8_model1", 61, 2)])
def test_sparse_page_size_re_view(fmt, bs, extra_bs, monkeypatch):
    """Under a backend rule of page sizes in multiples of 16 (CUDA's), the shim re-views or
    repacks the pools; results equal the native call on the original pools."""
    c = _sparse_case(torch.Generator().manual_seed(bs), fmt, bs, True, extra_bs)
    want = _sparse_calls(c, "reference")[1]
    monkeypatch.setattr(_mla_pools, "page_ok", lambda backend, p: p % 16 == 0)
    got = _sparse_calls(c, "reference")[0]
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("view", [torch.uint8, torch.int8, FP8])
def test_sparse_cache_dtype_views(view):
    c = _sparse_case(torch.Generator().manual_seed(3), "fp8_v32", 64, False, view=view, B=2, s_q=1)
    (out, lse), (want_out, want_lse) = _sparse_calls(c, "reference")
    _same(out, want_out)
    _same(lse, want_lse)


def test_pool_re_view_keeps_memory():
    """A V3.2 cache padded by one token per block is re-viewed (no copy) when the storage allows."""
    _, cache = _fp8_cache(torch.Generator().manual_seed(0), "fp8_v32", 16, 63, True)  # 16 * 64 rows
    idx = torch.tensor([[[0, 62, 63, 1007, 1008, -5]]], dtype=torch.int32)
    pool, moved = _mla_pools.sparse_pool(cache.view(torch.uint8), "fp8_v32", idx, "reference")
    assert pool.data_ptr() == cache.data_ptr() and pool.is_contiguous()
    assert moved.tolist() == [[[0, 62, 64, 1022, -1, -1]]]


# ----------------------------------------------------------------------------- errors


def test_unsupported_functions_and_arguments(gen):
    for name in ("flash_mla_sparse_fwd", "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
                 "flash_attn_varlen_kvpacked_func"):
        with pytest.raises(NotImplementedError, match=name):
            getattr(flash_mla, name)(None, None, None, 0.5)
    q, kv, table, lens = _dense_inputs(gen, 2, 1, 8, 1, [10, 3])
    meta = flash_mla.get_mla_metadata()[0]
    with pytest.raises(ValueError, match="num_splits"):
        flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, torch.ones(3, dtype=torch.int32))
    with pytest.raises(TypeError, match="tile_scheduler_metadata"):
        flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, torch.zeros(4))
    with pytest.raises(ValueError, match="topk_length"):
        flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, topk_length=lens)
    with pytest.raises(ValueError, match="block_table"):
        flash_mla.flash_mla_with_kvcache(q, kv, None, lens, 512, meta)
    with pytest.raises(ValueError, match="causal"):
        flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, causal=True,
                                         indices=torch.zeros(2, 1, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"k_cache.shape\[2\]"):
        flash_mla.flash_mla_with_kvcache(q, kv.expand(-1, -1, 2, -1), None, None, 512, meta,
                                         indices=torch.zeros(2, 1, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="num_heads_k"):
        flash_mla.flash_mla_with_kvcache(q, torch.zeros(4, 64, 3, 576, dtype=bf16), table, lens, 512, meta)
    with pytest.raises(ValueError, match="656"):
        flash_mla.flash_mla_with_kvcache(q, torch.zeros(4, 64, 1, 600, dtype=FP8), table, lens, 512, meta,
                                         is_fp8_kvcache=True)
    with pytest.raises(TypeError, match="1-byte"):
        flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, is_fp8_kvcache=True)
    with pytest.raises(ValueError, match="head_dim_v"):
        flash_mla.flash_mla_with_kvcache(q, kv, table, lens, 256, None)

"""CUDA sparse MLA decode (``indices``, ``topk_length``, the extra KV pool) against
dualops.reference by the parity method of docs/parity.md: NaN in every cache slot no index names,
invalid indices among the valid ones (-1, int32 min, the capacity, int32 max), entries past
topk_length pointing anywhere, 0- and 1-entry lists, fresh random inputs per case; every cache
format, the wgmma and wgmma_t kernels, host / device / no plan, split lists (the partial merge),
CUDA-graph replays with new indices, the flash_mla compat layer, and argument errors.

GPU tests skip on a machine without an sm_90 GPU (the CPU-side checks still run)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import dualops
from dualops import ops, quant
from dualops.backends.cuda import mla_decode as cuda_mla
from dualops.parity import builders as bld
from dualops.parity import cases as parity_cases
from dualops.parity import expected as exp
from cuda_graphs import capture
from dualops.testing import LSE_TOLERANCE, assert_close_parity
from mla_cuda_cases import needs_cuda
from dualops.heuristics.cuda import (MLA_CUDA_SORT_MAX_KEYS, MLA_CUDA_SORT_MIN_HEADS, MLA_CUDA_WGMMA_T_MAX_Q_ROWS, MLA_CUDA_WGMMA_T_ROWS, cuda_mla_kernel,
                                       cuda_mla_sort_keys)


FORMATS = [("bf16", 576, "bf16"), ("bf16", 512, "fp16"), ("fp8_v32", 576, "bf16"), ("fp8_model1", 512, "bf16"),
           ("fp8_v32", 576, "fp16"), ("int8_v32", 576, "bf16"), ("int8_v32", 576, "fp16")]


# ----------------------------------------------------------------------------- CPU-side checks


def test_capabilities_include_sparse_and_the_extra_pool():
    assert dualops.supports("mla_decode", "cuda", sparse=True, extra_kv=True, kv_format="fp8_model1", h_q=128)
    assert dualops.supports("mla_decode", "cuda", sparse=True, kv_format="bf16", h_q=5, s_q=3)


def test_sparse_kernel_choice_is_plan_data():
    h100 = dualops.devices.profile("h100")
    for fmt in ("bf16", "fp8_v32", "fp8_model1", "int8_v32"):
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=128, sparse=True) == "wgmma"
        few = "wgmma_t" if fmt != "bf16" and 16 <= MLA_CUDA_WGMMA_T_MAX_Q_ROWS[fmt] else "wgmma"
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=16, sparse=True) == few
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=1, sparse=True) == few
    small = dataclasses.replace(h100, smem_per_core_bytes=100 * 1024)
    with pytest.raises(ValueError, match="shared memory"):
        cuda_mla_kernel(small, kv_format="fp8_v32", q_rows=128, sparse=True)


def test_key_list_sort_is_plan_data():
    assert MLA_CUDA_SORT_MIN_HEADS["bf16"] is not None, "16-bit caches gather sorted key lists (measured faster)"
    for fmt, low in MLA_CUDA_SORT_MIN_HEADS.items():
        for h_q in (1, 16, 64, 65, 128):
            on = low is not None and h_q >= low
            assert cuda_mla_sort_keys(kv_format=fmt, h_q=h_q, topk=2048) == on
            assert cuda_mla_sort_keys(kv_format=fmt, h_q=h_q, topk=MLA_CUDA_SORT_MAX_KEYS) == on
            assert not cuda_mla_sort_keys(kv_format=fmt, h_q=h_q, topk=MLA_CUDA_SORT_MAX_KEYS + 1)


@pytest.fixture(params=["planned", "wgmma", "wgmma_t"])
def kernel(request, monkeypatch):
    """Runs a test with the planned kernel, then with each kernel that takes sparse calls forced
    (wgmma_t: FP8 caches with at most MLA_CUDA_WGMMA_T_ROWS heads; other calls skip it)."""
    if request.param != "planned":
        def pick(device, *, kv_format, q_rows, page_block_size=64, sparse=False):
            if request.param == "wgmma_t" and (kv_format == "bf16" or q_rows > MLA_CUDA_WGMMA_T_ROWS):
                pytest.skip("wgmma_t takes sparse calls with an FP8 cache and at most 32 heads")
            return request.param

        monkeypatch.setattr(cuda_mla, "cuda_mla_kernel", pick)
        monkeypatch.setattr(ops, "_PREPARED", {})
    return request.param


# ----------------------------------------------------------------------------- builders


def live_indices(g, idx, cache, kv_format, lens=None):
    """idx with every valid entry (below lens[b], all when None) that names a NaN-poisoned slot
    replaced by a random live token (long lists over a small pool: the builder fills the entries
    past its live tokens at random, and NaN keys would make every output NaN)."""
    n = cache.shape[0] * cache.shape[1]
    live = ~torch.isnan(quant.gather_mla_kv(cache, kv_format, torch.arange(n), torch.float32)).any(-1)
    ids = live.nonzero().flatten()
    pos = torch.arange(idx.shape[-1]).view(1, 1, -1)
    within = pos < (idx.shape[-1] if lens is None else torch.as_tensor(lens).view(-1, 1, 1))
    valid = within & (idx >= 0) & (idx < n)
    dead = valid & ~live[idx.clamp(0, n - 1).long()]
    fill = ids[torch.randint(len(ids), idx.shape, generator=g)].to(idx.dtype)
    return torch.where(dead, fill, idx)


def repaged(pool, kv_format, pbs):
    """The same cache with pages of `pbs` tokens: token ids keep naming the same bytes (fp8_model1,
    laid out per page as [pbs x 576 data][pbs x 8 scales], moved token by token); the new tail
    slots are zeros."""
    nb, p0 = pool.shape[0], pool.shape[1]
    n = -(-nb * p0 // pbs) * pbs
    if kv_format != "fp8_model1":
        flat = pool.reshape(nb * p0, *pool.shape[2:])
        full = torch.zeros((n, *flat.shape[1:]), dtype=flat.dtype)
        full[:flat.shape[0]] = flat
        return full.view(-1, pbs, *flat.shape[1:])
    pages = pool.reshape(nb, p0 * 584)
    data = torch.zeros(n, 576, dtype=torch.uint8)
    scales = torch.zeros(n, 8, dtype=torch.uint8)
    data[:nb * p0] = pages[:, :p0 * 576].reshape(nb * p0, 576)
    scales[:nb * p0] = pages[:, p0 * 576:].reshape(nb * p0, 8)
    out = torch.cat([data.view(-1, pbs * 576), scales.view(-1, pbs * 8)], dim=1)
    return out.view(-1, pbs, 1, 584)


def sparse_inputs(g, *, B, h_q, topk, s_q=1, topk_lens=None, extra_topk=None, extra_pbs=None, pbs=64,
                  kv_format="bf16", d_qk=576, dtype="bf16", sink=False):
    """CPU inputs of one sparse call (dualops.parity.cases): a pool whose unnamed slots hold NaN;
    extra_pbs: the extra pool's page size when it differs from the main pool's."""
    a = parity_cases._mla("cuda_sparse", B=B, h_q=h_q, s_q=s_q, topk=topk, topk_lens=topk_lens, pbs=pbs,
                          kv_format=kv_format, d_qk=d_qk, dtype=dtype, sink=sink, extra_topk=extra_topk).build(g)
    a["indices"] = live_indices(g, a["indices"], a["kv_cache"], kv_format, topk_lens)
    if extra_topk:
        a["extra_indices"] = live_indices(g, a["extra_indices"], a["extra_kv_cache"], kv_format)
    if extra_topk and extra_pbs and extra_pbs != pbs:
        a["extra_kv_cache"] = repaged(a["extra_kv_cache"], kv_format, extra_pbs)
    return a


def to_cuda(a):
    return {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in a.items()}


def check(a, plan="host"):
    """Run the CUDA op on inputs `a` (CPU) and compare with the reference."""
    d = to_cuda(a)
    B, S_q, H_q, _ = d["q"].shape
    topk = d["indices"].shape[-1]
    extra = d["extra_indices"].shape[-1] if d.get("extra_indices") is not None else None
    if plan in ("host", "device"):
        d["plan"] = dualops.get_mla_metadata(d["cache_seqlens"], num_heads_q=H_q, s_q=S_q, kv_format=d["kv_format"],
                                             topk=topk, extra_topk=extra, page_block_size=d["kv_cache"].shape[1],
                                             on_device=plan == "device")
    out, lse = dualops.mla_decode(**d)
    torch.cuda.synchronize()
    want, budget = exp.expected_with_budget("mla_decode", a)
    assert out.dtype == a["q"].dtype and out.shape == (B, S_q, H_q, 512)
    assert torch.isfinite(out).all(), "the lists name live tokens only: every output is finite"
    assert_close_parity(out.cpu(), want["out"].to(out.dtype), budget=budget["out"], name="out")
    assert_close_parity(lse.cpu(), want["lse"], *LSE_TOLERANCE, budget=budget["lse"], name="lse")
    return out, lse


# ----------------------------------------------------------------------------- parity


@needs_cuda
@pytest.mark.parametrize("fmt,d,dtype", FORMATS, ids=str)
@pytest.mark.parametrize("h_q,s_q", [(1, 1), (16, 2), (5, 3), (64, 1), (128, 2)])
def test_parity_sparse(fmt, d, dtype, h_q, s_q, kernel):
    if kernel == "planned" and fmt != "bf16":
        pytest.skip("FP8 / int8 caches: each kernel is forced in turn (the planned one among them)")
    g = bld.generator(h_q * 10 + s_q, "mla_decode", f"cuda/sparse/{fmt}/{d}/{dtype}")
    a = sparse_inputs(g, B=4, h_q=h_q, s_q=s_q, topk=200, topk_lens=(200, 1, 0, 77), kv_format=fmt, d_qk=d,
                      dtype=dtype, sink=h_q > 1)
    check(a, plan="host" if h_q % 2 else "device")


@needs_cuda
@pytest.mark.parametrize("fmt,d,dtype", FORMATS[:4] + FORMATS[5:6], ids=str)
@pytest.mark.parametrize("extra_pbs", [64, 16, 100])
def test_parity_sparse_extra_pool(fmt, d, dtype, extra_pbs, kernel):
    """The extra KV pool attended in the same softmax, with its own page size."""
    if kernel == "planned" and fmt != "bf16":
        pytest.skip("FP8 / int8 caches: each kernel is forced in turn")
    if fmt == "fp8_model1" and extra_pbs % 2:
        extra_pbs += 1
    g = bld.generator(extra_pbs, "mla_decode", f"cuda/sparse-extra/{fmt}/{d}")
    a = sparse_inputs(g, B=3, h_q=24, s_q=2, topk=96, topk_lens=(96, 0, 5), extra_topk=40, extra_pbs=extra_pbs,
                      kv_format=fmt, d_qk=d, dtype=dtype)
    a["extra_topk_length"] = torch.tensor([40, 7, 0], dtype=torch.int32)
    check(a, plan="host")
    check(a, plan=None)


@needs_cuda
@pytest.mark.parametrize("fmt", ["bf16", "fp8_v32", "fp8_model1", "int8_v32"])
@pytest.mark.parametrize("h_q,s_q", [(128, 1), (16, 2)])
def test_parity_sparse_long_lists_split(fmt, h_q, s_q):
    """Long index lists on few requests: every list is split across SM parts (partial merge: the
    combine kernel, or wgmma_t's in-kernel merge per query token); lists whose valid entries end
    early leave later pieces empty."""
    d = 512 if fmt == "fp8_model1" else 576
    g = bld.generator(7 + h_q, "mla_decode", f"cuda/sparse-long/{fmt}")
    a = sparse_inputs(g, B=2, h_q=h_q, s_q=s_q, topk=2048, topk_lens=(2048, 300), kv_format=fmt, d_qk=d)
    plan = dualops.get_mla_metadata(a["cache_seqlens"], num_heads_q=h_q, s_q=s_q, kv_format=fmt, topk=2048,
                                    device=dualops.devices.profile("h100"))
    assert plan.total_splits > plan.batch
    check(a, plan="host")
    check(a, plan="device")


@needs_cuda
@pytest.mark.parametrize("fmt", ["bf16", "fp8_v32", "fp8_model1"])
@pytest.mark.parametrize("topk", [MLA_CUDA_SORT_MAX_KEYS, MLA_CUDA_SORT_MAX_KEYS + 4])
def test_parity_sparse_sorted_key_lists(fmt, topk, monkeypatch):
    """Key lists sorted by token id (forced for every format) up to MLA_CUDA_SORT_MAX_KEYS entries,
    kept in order past it: parity with invalid and repeated entries among the valid ones (a repeat
    counts twice, as in the reference); sorted lists make the result independent of the entries'
    order, bit for bit."""
    monkeypatch.setitem(MLA_CUDA_SORT_MIN_HEADS, fmt, 1)
    monkeypatch.setattr(ops, "_PREPARED", {})
    d = 512 if fmt == "fp8_model1" else 576
    g = bld.generator(topk, "mla_decode", f"cuda/sparse-sorted/{fmt}")
    a = sparse_inputs(g, B=2, h_q=16, topk=topk, kv_format=fmt, d_qk=d)
    a["indices"][..., 40:60] = a["indices"][..., 0:20]
    out, lse = check(a)
    perm = torch.randperm(topk, generator=g)
    out2, lse2 = check({**a, "indices": a["indices"][:, :, perm].contiguous()})
    if topk <= MLA_CUDA_SORT_MAX_KEYS:
        assert torch.equal(out, out2) and torch.equal(lse, lse2)


@needs_cuda
@pytest.mark.parametrize("fmt", ["bf16", "fp8_v32", "int8_v32"])
def test_sparse_graph_replays_with_new_indices(fmt):
    g = bld.generator(9, "mla_decode", f"cuda/sparse-graph/{fmt}")
    a = sparse_inputs(g, B=3, h_q=16, s_q=2, topk=1024, topk_lens=(1024, 3, 0), kv_format=fmt)
    d = to_cuda(a)
    idx, lens = d["indices"], d["topk_length"]

    def step():
        plan = dualops.get_mla_metadata(d["cache_seqlens"], num_heads_q=16, s_q=2, topk=1024, kv_format=fmt,
                                        on_device=True)
        return dualops.mla_decode(d["q"], d["kv_cache"], d["block_table"], d["cache_seqlens"], plan=plan,
                                  indices=idx, topk_length=lens, kv_format=fmt)

    graph, (out, lse) = capture(step)
    for k, new_lens in enumerate(((1, 1024, 64), (0, 0, 0), (1024, 1024, 1024))):
        # new lists over the same pool: the entries shuffled (entries past a length may be anything)
        perm = torch.randperm(1024, generator=g)
        b = {**a, "indices": live_indices(g, a["indices"][:, :, perm].contiguous(), a["kv_cache"], fmt),
             "topk_length": torch.tensor(new_lens, dtype=torch.int32)}
        idx.copy_(b["indices"])
        lens.copy_(b["topk_length"])
        graph.replay()
        torch.cuda.synchronize()
        want, budget = exp.expected_with_budget("mla_decode", b)
        assert_close_parity(out.cpu(), want["out"].to(out.dtype), budget=budget["out"], name=f"out replay {k}")
        assert_close_parity(lse.cpu(), want["lse"], *LSE_TOLERANCE, budget=budget["lse"], name=f"lse replay {k}")


@needs_cuda
def test_compat_flash_mla_sparse_runs_the_cuda_kernels():
    from dualops.compat import flash_mla

    g = bld.generator(11, "mla_decode", "cuda/sparse-compat")
    d = to_cuda(sparse_inputs(g, B=2, h_q=64, topk=256, topk_lens=(256, 9), kv_format="fp8_v32"))
    meta, num_splits = flash_mla.get_mla_metadata(d["cache_seqlens"], 64, 1, is_fp8_kvcache=True, topk=256)
    assert isinstance(meta, flash_mla.FlashMLASchedMeta) and num_splits is None
    out, lse = flash_mla.flash_mla_with_kvcache(d["q"], d["kv_cache"], d["block_table"], d["cache_seqlens"], 512,
                                                meta, num_splits, is_fp8_kvcache=True, indices=d["indices"],
                                                topk_length=d["topk_length"])
    assert meta.tile_scheduler_metadata.is_cuda
    ref_out, ref_lse = dualops.mla_decode(**d)
    torch.testing.assert_close(out, ref_out, atol=0, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=0, rtol=0)


@needs_cuda
def test_sparse_bad_inputs_raise_clear_errors():
    g = bld.generator(12, "mla_decode", "cuda/sparse-bad")
    d = to_cuda(sparse_inputs(g, B=2, h_q=16, topk=64))
    dense = dualops.get_mla_metadata(d["cache_seqlens"], num_heads_q=16)
    with pytest.raises(ValueError, match="sparse"):
        dualops.mla_decode(**d, plan=dense)
    other = dualops.get_mla_metadata(d["cache_seqlens"], num_heads_q=16, topk=32, on_device=True)
    with pytest.raises(ValueError, match="topk"):
        dualops.mla_decode(**d, plan=other)
    with pytest.raises(ValueError, match="causal"):
        dualops.mla_decode(**{**d, "causal": True})
    bad = d["indices"].clone()
    bad[0, 0, :4] = torch.tensor([-1, -(2 ** 31), 2 ** 31 - 1, 10 ** 6], dtype=torch.int32)
    dualops.mla_decode(**{**d, "indices": bad})  # invalid ids are skipped, never read
    torch.cuda.synchronize()

"""CUDA MLA decode against dualops.reference (on the dequantized cache for the FP8 / int8 formats), by
the REFERENCE.md §5 method: NaN in every unused cache slot, randomly permuted block tables, varlen
batches with 0- and 1-token requests, non-contiguous q, fresh random inputs per case; plus NaN
propagation through split merges, the device planner against the host planner, CUDA-graph
capture and replay with changing lengths, the flash_mla compat layer, and argument errors.

GPU tests skip on a machine without an sm_90 GPU (the CPU-side checks still run)."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import dualops
from dualops import ops, quant, schema
from dualops.backends.cuda import mla_decode as cuda_mla
from dualops.parity import builders as bld
from dualops.parity import expected as exp
from cuda_graphs import capture
from dualops.testing import LSE_TOLERANCE, assert_close_parity
from dualops.heuristics.cuda import (MLA_CUDA_WGMMA_MIN_Q_ROWS, MLA_CUDA_WGMMA_T_MAX_Q_ROWS, MLA_CUDA_WGMMA_T_ROWS,
                                     cuda_mla_kernel)
from dualops.tiling.mla_decode import MlaPlan

HAS_CUDA = torch.cuda.is_available() and cuda_mla.status()[0] and "mla_decode" in __import__(
    "dualops.backends.cuda", fromlist=["built_ops"]).built_ops()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs an sm_90 GPU and dualops._C built with the CUDA MLA kernels")

BF16, FP16 = torch.bfloat16, torch.float16
D_QK = {"bf16": 576, "fp8_v32": 576, "fp8_model1": 512, "int8_v32": 576}


# ----------------------------------------------------------------------------- CPU-side checks


def test_params_pack_like_the_schema():
    vals = dict(q=0x1000, kv_cache=0x2000, out=0x3000, plan=0x4000, q_stride_b=-3, num_blocks=1 << 40,
                softmax_scale=0.125, causal=1, kv_format=2, q_dtype=2, head_dim=512, page_block_size=16)
    from dualops.backends.cuda._common import pack_params, ptr_head, ptr_run

    assert pack_params("mla_decode", **vals) == schema.pack_params("mla_decode", "cuda", **vals)
    assert cuda_mla._HEADER.size == 4 * len(MlaPlan.FIELDS)
    # MlaLaunch packs the pointers per call (the shared ones first, the CUDA-only ones after the
    # shared fields) around the rest, packed once
    ptrs = {f: 0x100 * (i + 1) for i, f in enumerate(cuda_mla._PTR_FIELDS + cuda_mla._CALL_PTR_FIELDS)}
    rest = {k: v for k, v in vals.items() if k not in ptrs}
    full = pack_params("mla_decode", **rest, sort_keys=1, kernel=3)
    head = ptr_head("mla_decode", cuda_mla._PTR_FIELDS)
    run, off = ptr_run("mla_decode", cuda_mla._CALL_PTR_FIELDS)
    launch = head.pack(*(ptrs[f] for f in cuda_mla._PTR_FIELDS)) + full[head.size:off] \
        + run.pack(*(ptrs[f] for f in cuda_mla._CALL_PTR_FIELDS)) + full[off + run.size:]
    assert launch == schema.pack_params("mla_decode", "cuda", **ptrs, **rest, sort_keys=1, kernel=3)
    # the shared struct (what the Ascend kernel reads) has none of the CUDA-only fields
    with pytest.raises(ValueError, match="unknown field"):
        schema.pack_params("mla_decode", kernel=1)


def test_capabilities():
    assert dualops.supports("mla_decode", "cuda", sparse=False, kv_format="fp8_model1", s_q=4, h_q=5)
    assert dualops.supports("mla_decode", "cuda", sparse=True, kv_format="int8_v32", s_q=2, h_q=128)
    assert not dualops.supports("mla_decode", "cuda", h_q=129)
    reason = schema.support_reason("mla_decode", "cuda", s_q=9)
    assert "mla_decode" in reason and "cuda" in reason


def test_device_plan_numel_bound():
    assert cuda_mla.packed_numel(3, 10) == len(MlaPlan.FIELDS) + 80 + 4


def test_kernel_choice_is_plan_data():
    h100 = dualops.devices.profile("h100")
    for fmt in ("bf16", "fp8_v32", "fp8_model1", "int8_v32"):
        top = MLA_CUDA_WGMMA_T_MAX_Q_ROWS[fmt]
        assert top <= MLA_CUDA_WGMMA_T_ROWS
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=128) == ("wgmma_seesaw" if fmt == "bf16" else "wgmma")
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=128, page_block_size=16) == "wgmma"
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=64) == "wgmma"
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=1) == ("wgmma_t" if top >= 1 else "mma")
        assert top < 1 or cuda_mla_kernel(h100, kv_format=fmt, q_rows=top) == "wgmma_t"
        above = cuda_mla_kernel(h100, kv_format=fmt, q_rows=top + 1)
        assert above == ("wgmma" if top + 1 >= MLA_CUDA_WGMMA_MIN_Q_ROWS[fmt] else "mma")
    small = dataclasses.replace(h100, smem_per_core_bytes=100 * 1024)
    assert cuda_mla_kernel(small, kv_format="bf16", q_rows=128) == "mma"
    assert cuda_mla_kernel(small, kv_format="fp8_v32", q_rows=16) == "mma"
    for q_rows in (1, 16, 32, 33, 64, 128):  # int8_v32 runs where fp8_v32 runs
        assert cuda_mla_kernel(h100, kv_format="int8_v32", q_rows=q_rows) == cuda_mla_kernel(
            h100, kv_format="fp8_v32", q_rows=q_rows)


@pytest.fixture(params=["planned", "mma", "wgmma", "wgmma_t", "wgmma_seesaw"])
def kernel(request, monkeypatch):
    """Runs a test with the planned kernel, and again with each CUDA kernel forced (all of them
    stay tested for every cache format; wgmma_t only where it applies: calls with at most
    MLA_CUDA_WGMMA_T_ROWS q rows, wgmma_seesaw 16-bit caches; others skip the test)."""
    if request.param != "planned":
        def pick(device, *, kv_format, q_rows, page_block_size=64, sparse=False):
            if request.param == "wgmma_t" and q_rows > MLA_CUDA_WGMMA_T_ROWS:
                pytest.skip(f"wgmma_t takes at most {MLA_CUDA_WGMMA_T_ROWS} q rows, the call has {q_rows}")
            if request.param == "wgmma_seesaw" and kv_format != "bf16":
                pytest.skip("wgmma_seesaw takes 16-bit caches")
            return request.param

        force_kernel(monkeypatch, pick)
    return request.param


def force_kernel(monkeypatch, pick):
    """cuda_mla_kernel replaced by `pick` for the test, with an empty cache of prepared eager
    launches (a launch keeps the kernel chosen when it was made)."""
    monkeypatch.setattr(cuda_mla, "cuda_mla_kernel", pick)
    monkeypatch.setattr(ops, "_PREPARED", {})


def _skip_duplicate(kernel, fmt):
    if kernel == "planned" and fmt != "bf16":
        pytest.skip("FP8 / int8 caches: each kernel is forced in turn (the planned one among them)")


# ----------------------------------------------------------------------------- builders


def make_inputs(g, *, B=None, lens, h_q, s_q=1, pbs=64, kv_format="bf16", d_qk=None, dtype=BF16,
                causal=False, sink=False):
    """CPU inputs of one dense call: paged latent cache with poisoned unused slots and a permuted
    block table (dualops.parity.builders)."""
    d = d_qk or D_QK[kv_format]
    B = len(lens)
    q = bld.randn(g, B, s_q, h_q, d, dtype=dtype)
    logical = bld.randn(g, B, max(max(lens), 1), 1, d)
    (pool,), table = bld.page([logical], lens, pbs, g)
    cache = pool.to(dtype) if kv_format == "bf16" else quant.pack_mla_kv(pool.to(BF16), kv_format)
    a = dict(q=q, kv_cache=cache, block_table=table, cache_seqlens=torch.tensor(lens, dtype=torch.int32),
             causal=causal, kv_format=kv_format)
    if sink:
        s = bld.randn(g, h_q)
        s[0] = float("inf")
        s[-1] = float("-inf")
        a["attn_sink"] = s
    return a


def to_cuda(a):
    return {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in a.items()}


def check(a, plan="host", q_view=None):
    """Run the CUDA op on inputs `a` (CPU) and compare with the reference."""
    d = to_cuda(a)
    if q_view is not None:
        d["q"] = q_view(d["q"])
    B, S_q, H_q, _ = d["q"].shape
    if plan == "host":
        d["plan"] = dualops.get_mla_metadata(d["cache_seqlens"], num_heads_q=H_q, s_q=S_q,
                                             kv_format=d["kv_format"], page_block_size=d["kv_cache"].shape[1])
    elif plan == "device":
        d["plan"] = dualops.get_mla_metadata(d["cache_seqlens"], num_heads_q=H_q, s_q=S_q,
                                             kv_format=d["kv_format"], page_block_size=d["kv_cache"].shape[1],
                                             on_device=True)
    out, lse = dualops.mla_decode(**d)
    torch.cuda.synchronize()
    want, budget = exp.expected_with_budget("mla_decode", a)
    assert out.dtype == a["q"].dtype and out.shape == (B, S_q, H_q, 512)
    assert_close_parity(out.cpu(), want["out"].to(out.dtype), budget=budget["out"], name="out")
    assert_close_parity(lse.cpu(), want["lse"], *LSE_TOLERANCE, budget=budget["lse"], name="lse")
    return out, lse


# ----------------------------------------------------------------------------- parity matrix

FORMATS = [("bf16", 576, BF16), ("bf16", 512, FP16), ("bf16", 576, FP16), ("fp8_v32", 576, BF16),
           ("fp8_model1", 512, BF16), ("fp8_v32", 576, FP16), ("fp8_model1", 512, FP16), ("int8_v32", 576, BF16),
           ("int8_v32", 576, FP16)]
VARLEN = (0, 1, 63, 64, 65, 700)


@needs_cuda
@pytest.mark.parametrize("fmt,d,dtype", FORMATS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("h_q", [1, 5, 16, 64, 128])
def test_parity_decode(fmt, d, dtype, h_q, kernel):
    _skip_duplicate(kernel, fmt)
    g = bld.generator(h_q, "mla_decode", f"cuda/{fmt}/{d}/{dtype}")
    a = make_inputs(g, lens=VARLEN, h_q=h_q, kv_format=fmt, d_qk=d, dtype=dtype)
    check(a, plan="host" if h_q % 2 else "device")


@needs_cuda
@pytest.mark.parametrize("fmt,d,dtype", FORMATS[:1] + FORMATS[3:5] + FORMATS[7:8],
                         ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("s_q,h_q", [(2, 16), (4, 5), (2, 128), (4, 64), (8, 16)])
@pytest.mark.parametrize("pbs", [16, 64, 256])
def test_parity_causal_mtp(fmt, d, dtype, s_q, h_q, pbs, kernel):
    _skip_duplicate(kernel, fmt)
    g = bld.generator(s_q * 1000 + h_q, "mla_decode", f"cuda/causal/{fmt}/{pbs}")
    a = make_inputs(g, lens=(0, 1, 2, 3, 130, 333), h_q=h_q, s_q=s_q, pbs=pbs, kv_format=fmt, d_qk=d,
                    dtype=dtype, causal=True)
    check(a, plan="host" if pbs == 64 else None)


@needs_cuda
@pytest.mark.parametrize("kernel_name", ["wgmma", "wgmma_seesaw"])
@pytest.mark.parametrize("d,pbs", [(576, 32), (576, 128), (576, 256), (512, 16), (512, 64)])
def test_parity_wgmma_16bit_pages(d, pbs, kernel_name, monkeypatch):
    """bf16 q with a 16-bit cache in the wgmma kernel's loops (pipelined, seesaw): page sizes
    other than 64, d_qk 512, tiles cut by the range end, split requests; host and device plans."""
    force_kernel(monkeypatch, lambda device, **kw: kernel_name)
    g = bld.generator(d + pbs, "mla_decode", "cuda/wgmma16")
    a = make_inputs(g, lens=(1500, 1, 63, 65, 700), h_q=64, pbs=pbs, d_qk=d)
    check(a, plan="host")
    check(a, plan="device")


@needs_cuda
@pytest.mark.parametrize("fmt", ["bf16", "fp8_v32", "fp8_model1", "int8_v32"])
@pytest.mark.parametrize("pbs", [16, 32, 128])
def test_parity_pages_long_split(fmt, pbs):
    """Few long requests: every request is split across many SM parts (split merge)."""
    g = bld.generator(pbs, "mla_decode", f"cuda/long/{fmt}")
    a = make_inputs(g, lens=(4099, 1, 2500), h_q=16, pbs=pbs, kv_format=fmt)
    plan = dualops.get_mla_metadata(a["cache_seqlens"], num_heads_q=16, kv_format=fmt, page_block_size=pbs,
                                    device=dualops.devices.profile("h100"))
    assert plan.total_splits > plan.batch
    check(a, plan="host")
    check(a, plan="device")


@needs_cuda
def test_parity_many_short_requests_no_split():
    g = bld.generator(0, "mla_decode", "cuda/many")
    lens = [int(x) for x in torch.randint(0, 300, (300,), generator=g)]
    lens[0], lens[1] = 0, 1
    a = make_inputs(g, lens=lens, h_q=64, s_q=2, kv_format="bf16", causal=True)
    check(a, plan="host")


@needs_cuda
@pytest.mark.parametrize("fmt,pbs", [("bf16", 64), ("bf16", 16), ("fp8_v32", 64), ("int8_v32", 16)])
def test_parity_many_short_requests_few_rows(fmt, pbs, kernel):
    """Hundreds of short requests with few q rows: every SM part holds several request pieces,
    empty and one-token requests among them (each kernel's hand-over from one request to the
    next, e.g. wgmma_t's copies of the next piece's first blocks during the merge)."""
    _skip_duplicate(kernel, fmt)
    g = bld.generator(pbs, "mla_decode", f"cuda/many-few/{fmt}")
    lens = [int(x) for x in torch.randint(0, 400, (300,), generator=g)]
    lens[0], lens[1], lens[2], lens[3] = 0, 1, 64, 65
    a = make_inputs(g, lens=lens, h_q=16, pbs=pbs, kv_format=fmt)
    check(a, plan="host")
    check(a, plan="device")


@needs_cuda
@pytest.mark.parametrize("fmt", ["bf16", "fp8_model1"])
def test_attn_sink_and_noncontiguous_q(fmt):
    g = bld.generator(1, "mla_decode", f"cuda/sink/{fmt}")
    a = make_inputs(g, lens=(5, 0, 2000), h_q=16, s_q=2, kv_format=fmt, causal=True, sink=True)
    check(a, plan="host", q_view=bld.strided_view)
    check(a, plan=None, q_view=lambda q: q.transpose(1, 2).contiguous().transpose(1, 2))


@needs_cuda
def test_eager_calls_reuse_one_prepared_launch(monkeypatch):
    """Eager calls with one signature (the layers of a decode step) run through one prepared
    launch (ops._PREPARED), each with its own tensors and plan: a host plan, a device plan, no
    plan, and a q whose start is not 16-byte aligned (copied by that call)."""
    monkeypatch.setattr(ops, "_PREPARED", {})
    g = bld.generator(7, "mla_decode", "cuda/eager")

    def misaligned(q):
        buf = torch.empty(q.numel() + 1, dtype=q.dtype, device=q.device)
        view = buf[1:].view(q.shape)
        view.copy_(q)
        assert view.data_ptr() % 16
        return view

    for plan, q_view in (("host", None), ("device", None), (None, None), ("host", misaligned)):
        check(make_inputs(g, lens=(700, 1, 0, 130), h_q=16, s_q=1, kv_format="bf16", sink=True), plan=plan,
              q_view=q_view)
    assert len(ops._PREPARED) == 1
    assert isinstance(next(iter(ops._PREPARED.values())).launch, cuda_mla.MlaLaunch)


# ----------------------------------------------------------------------------- NaN semantics


@needs_cuda
@pytest.mark.parametrize("fmt", ["bf16", "fp8_v32", "int8_v32"])
def test_nan_in_attended_key_and_q_propagates(fmt):
    """A NaN in an attended key of a split request and in one q head: the reference's NaN rows
    must come out NaN (also through the split merge), the others must not."""
    g = bld.generator(2, "mla_decode", f"cuda/nan/{fmt}")
    a = make_inputs(g, lens=(3000, 40), h_q=16, s_q=2, kv_format=fmt, causal=True)
    blk = int(a["block_table"][0, 1000 // 64])
    if fmt == "bf16":
        a["kv_cache"][blk, 1000 % 64, 0, 3] = float("nan")  # NoPE dim: all rows see it in S and V
        a["kv_cache"][int(a["block_table"][1, 0]), 39, 0, 600 - 64] = float("nan")  # last key, RoPE dim: only query 1 sees it
    elif fmt == "fp8_v32":
        a["kv_cache"][blk, 1000 % 64, 0, 3] = 0x7F  # e4m3 NaN
    else:
        _set_key(a, 0, 1000, 3, float("nan"))  # int8 has no NaN: a NaN scale (NoPE values 0 .. 127)
    a["q"][1, 0, 5, 7] = float("nan")
    out, lse = check(a, plan="host")
    assert torch.isnan(out[0]).all()
    assert torch.isnan(out[1, 0, 5]).all() and not torch.isnan(out[1, 0, 4]).any()


def _set_key(a, b, pos, d, value):
    """Element d of request b's token pos in the cache (FP8 formats: byte d, an e4m3 NoPE value
    for d < 448; model1 blocks are one byte run of 576-byte token rows, then the scales; int8_v32:
    the fp32 scale of the 128-value tile holding NoPE dim d)."""
    pbs = a["kv_cache"].shape[1]
    blk, off = int(a["block_table"][b, pos // pbs]), pos % pbs
    if a["kv_format"] == "int8_v32":
        assert 0 <= d < 512, "int8_v32 keys are poisoned through the scale of a NoPE tile"
        s = 512 + 4 * (d // 128)
        a["kv_cache"][blk, off, 0, s:s + 4] = torch.tensor([value], dtype=torch.float32).view(torch.uint8)
    elif a["kv_format"] == "fp8_model1":
        a["kv_cache"].view(a["kv_cache"].shape[0], -1)[blk, off * 576 + d] = value
    else:
        a["kv_cache"][blk, off, 0, d] = value


def _split_plan(a):
    """The host plan of `a` on an H100 profile: its long request must be split (split merge)."""
    plan = dualops.get_mla_metadata(a["cache_seqlens"], num_heads_q=a["q"].shape[2], s_q=a["q"].shape[1],
                                    kv_format=a["kv_format"], page_block_size=a["kv_cache"].shape[1],
                                    device=dualops.devices.profile("h100"))
    assert plan.total_splits > plan.batch, plan


@needs_cuda
@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_inf_key_like_reference_through_split_merge(dtype, kernel):
    """A +inf in an attended key: rows scoring it +inf get lse +inf and out NaN (an infinite max
    subtracts 0, as torch.logsumexp), rows scoring it -inf keep a finite lse (out NaN only where
    0 * inf meets a value column); through the split merge (request 0) and without (request 1)."""
    g = bld.generator(3, "mla_decode", f"cuda/inf_key/{dtype}")
    a = make_inputs(g, lens=(3000, 40), h_q=16, kv_format="bf16", dtype=dtype)
    _split_plan(a)
    _set_key(a, 0, 1000, 11, float("inf"))    # value column: all rows' out NaN
    _set_key(a, 1, 7, 560, float("inf"))      # RoPE column: only the +inf rows
    out, lse = check(a, plan="host")
    out, pos = out.cpu(), torch.isposinf(lse.cpu())
    assert pos[0].any() and pos[1].any() and not pos.all() and not lse.isnan().any()
    for b in range(2):
        assert torch.isnan(out[b][pos[b].transpose(0, 1)]).all()  # +inf score: p = inf - inf
        assert torch.isfinite(out[b][~pos[b].transpose(0, 1)][:, :11]).all()
    assert torch.isnan(out[0, ..., 11]).all()                  # weight 0 times the inf value


@needs_cuda
@pytest.mark.parametrize("fmt,h_q", [("bf16", 5), ("bf16", 16), ("fp8_v32", 5), ("fp8_model1", 16), ("int8_v32", 5)])
def test_causal_hidden_nonfinite_keys_do_not_reach_out(fmt, h_q, kernel):
    """Causal s_q = 3: NaN / inf in keys hidden from the early query rows (the last tile of a
    split request and of a short one) reach only the rows that attend them: masked keys are left
    out of P V, not multiplied by 0. h_q 5 mixes query positions inside one MMA row group."""
    g = bld.generator(h_q, "mla_decode", f"cuda/causal_hidden/{fmt}")
    a = make_inputs(g, lens=(3000, 70), h_q=h_q, s_q=3, kv_format=fmt, causal=True)
    _split_plan(a)
    bf16 = fmt == "bf16"
    bad = 0x7F if fmt.startswith("fp8") else float("nan")  # e4m3 NaN (e4m3 has no inf); int8_v32: a NaN scale
    _set_key(a, 0, 2999, 5, bad)                          # seen by query 2 only
    _set_key(a, 0, 2998, 300, float("inf") if not fmt.startswith("fp8") else bad)  # seen by queries 1, 2
    _set_key(a, 1, 69, 100, bad)                          # seen by query 2 only
    _set_key(a, 1, 68, 400, float("-inf") if bf16 else bad)
    _skip_duplicate(kernel, fmt)
    out, lse = check(a, plan="host")
    out, lse = out.cpu(), lse.cpu()
    assert torch.isfinite(out[:, 0]).all() and torch.isfinite(lse[:, :, 0]).all()
    assert torch.isnan(out[:, 2]).all() and torch.isnan(lse[:, :, 2]).all()


@needs_cuda
@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_model1_zero_and_nan_scales_like_reference(dtype, kernel):
    """fp8_model1 e8m0 scale bytes 0 (2^-127) and 255 (NaN) dequantize as the reference does (the
    kernels read the other codes as the floats with bits e << 23): a NaN scale in an attended
    token makes every row NaN; 2^-127 scales leave the rest of the request finite."""
    g = bld.generator(4, "mla_decode", f"cuda/model1_scales/{dtype}")
    a = make_inputs(g, lens=(300, 70), h_q=16, kv_format="fp8_model1", dtype=dtype)
    pbs = a["kv_cache"].shape[1]
    flat = a["kv_cache"].view(a["kv_cache"].shape[0], -1)

    def set_scale(b, pos, j, code):  # e8m0 scale of 64-dim block j of request b's token pos
        blk, off = int(a["block_table"][b, pos // pbs]), pos % pbs
        flat[blk, pbs * 576 + off * 8 + j] = code

    set_scale(0, 123, 2, 255)
    set_scale(1, 7, 5, 0)
    set_scale(1, 69, 0, 0)
    set_scale(1, 69, 6, 0)
    out, _ = check(a, plan="host")
    out = out.cpu()
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1]).all()


# ----------------------------------------------------------------------------- planners, graphs


@needs_cuda
@pytest.mark.parametrize("lens,h_q,s_q", [
    ((0,), 128, 1), ((1, 0, 5000, 64, 65), 16, 2), (tuple(range(0, 4000, 37)), 128, 1),
    ((4096,) * 128, 128, 2), ((7, 100000, 3), 1, 1), ((0,) * 20, 64, 4),
    # more requests than the planner stages in shared memory: the same fill on global memory
    (tuple((i * 7919) % 3001 for i in range(30000)), 16, 1)])
def test_device_planner_matches_host_planner(lens, h_q, s_q):
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    host = dualops.get_mla_metadata(seq, num_heads_q=h_q, s_q=s_q, kv_format="fp8_v32", page_block_size=32)
    dev = dualops.get_mla_metadata(seq, num_heads_q=h_q, s_q=s_q, kv_format="fp8_v32", page_block_size=32,
                                   on_device=True)
    assert torch.equal(dev.packed.cpu(), host.pack())
    assert MlaPlan.from_packed(dev.packed.cpu()) == host


@needs_cuda
def test_cuda_graph_capture_and_replay_with_changing_lengths():
    g = bld.generator(3, "mla_decode", "cuda/graph")
    B, H, S_q, pbs, max_len = 4, 32, 2, 64, 1500
    a = make_inputs(g, lens=(max_len,) * B, h_q=H, s_q=S_q, pbs=pbs, causal=True)
    d = to_cuda(a)
    seq = d["cache_seqlens"]

    def step():
        plan = dualops.get_mla_metadata(seq, num_heads_q=H, s_q=S_q, page_block_size=pbs, on_device=True)
        return dualops.mla_decode(d["q"], d["kv_cache"], d["block_table"], seq, plan=plan, causal=True)

    graph, (out, lse) = capture(step)
    for lens in ((max_len, 1, 0, 700), (3, 1499, 64, 65), (0, 0, 0, 1), (1500, 1500, 1500, 1500)):
        seq.copy_(torch.tensor(lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want, budget = exp.expected_with_budget("mla_decode", {**a, "cache_seqlens": torch.tensor(lens, dtype=torch.int32)})
        assert_close_parity(out.cpu(), want["out"].to(out.dtype), budget=budget["out"], name=f"out {lens}")
        assert_close_parity(lse.cpu(), want["lse"], *LSE_TOLERANCE, budget=budget["lse"], name=f"lse {lens}")


@needs_cuda
@pytest.mark.parametrize("fmt", ["bf16", "fp8_model1"])
def test_in_kernel_merge_graph_replays_with_changing_lengths(fmt, monkeypatch):
    """wgmma_t merges a split request in the split kernel (its last piece to finish, behind an
    arrival counter): a graph captured on a stream that has no counters yet (they are made and
    zeroed inside the capture), with two calls sharing them, replayed with new lengths (many
    splits, 0- and 1-token requests): both calls match the reference every time and the counters
    are back at zero after each replay."""
    force_kernel(monkeypatch, lambda device, **kw: "wgmma_t")
    g = bld.generator(5, "mla_decode", f"cuda/merge_graph/{fmt}")
    B, H, pbs, max_len = 5, 16, 64, 3000
    a = make_inputs(g, lens=(max_len,) * B, h_q=H, pbs=pbs, kv_format=fmt)
    d = to_cuda(a)
    seq = d["cache_seqlens"]

    def step():
        plan = dualops.get_mla_metadata(seq, num_heads_q=H, kv_format=fmt, page_block_size=pbs, on_device=True)
        return dualops.mla_decode(d["q"], d["kv_cache"], d["block_table"], seq, plan=plan, kv_format=fmt)

    step()  # eager warm-up on the current stream
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        outs = [step(), step()]
    ctr = cuda_mla._MERGE_COUNTERS.buffers[(seq.device.index, s.cuda_stream)]
    for lens in ((max_len, 1, 0, 700, 2999), (3, 1499, 64, 65, 0), (0, 0, 0, 1, 2000), (max_len,) * B):
        lens_t = torch.tensor(lens, dtype=torch.int32)
        _split_plan({**a, "cache_seqlens": lens_t})
        seq.copy_(lens_t)
        graph.replay()
        torch.cuda.synchronize()
        want, budget = exp.expected_with_budget("mla_decode", {**a, "cache_seqlens": lens_t})
        for out, lse in outs:
            assert_close_parity(out.cpu(), want["out"].to(out.dtype), budget=budget["out"], name=f"out {lens}")
            assert_close_parity(lse.cpu(), want["lse"], *LSE_TOLERANCE, budget=budget["lse"], name=f"lse {lens}")
        assert not ctr.any(), "arrival counters must be back at zero"


@needs_cuda
def test_compat_flash_mla_runs_the_cuda_kernels():
    from dualops.compat import flash_mla

    g = bld.generator(4, "mla_decode", "cuda/compat")
    a = to_cuda(make_inputs(g, lens=(100, 2000, 1), h_q=64, s_q=2, causal=True))
    meta, num_splits = flash_mla.get_mla_metadata(a["cache_seqlens"], 2 * 64, 1)
    assert isinstance(meta, flash_mla.FlashMLASchedMeta) and num_splits is None
    out, lse = flash_mla.flash_mla_with_kvcache(a["q"], a["kv_cache"], a["block_table"], a["cache_seqlens"], 512,
                                                meta, num_splits, causal=True)
    assert meta.tile_scheduler_metadata.is_cuda  # the device plan, kept for the next calls
    ref_out, ref_lse = dualops.mla_decode(a["q"], a["kv_cache"], a["block_table"], a["cache_seqlens"], causal=True)
    torch.testing.assert_close(out, ref_out, atol=0, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=0, rtol=0)


# ----------------------------------------------------------------------------- bad inputs


@needs_cuda
def test_bad_inputs_raise_clear_errors():
    g = bld.generator(5, "mla_decode", "cuda/bad")
    d = to_cuda(make_inputs(g, lens=(10, 20), h_q=16))
    plan = dualops.get_mla_metadata(d["cache_seqlens"], num_heads_q=8)
    with pytest.raises(ValueError, match=r"plan was made for another call: plan.h_q = 8"):
        dualops.mla_decode(**d, plan=plan)
    plan = dualops.get_mla_metadata(d["cache_seqlens"], num_heads_q=16, page_block_size=32)
    with pytest.raises(ValueError, match="page_block_size"):
        dualops.mla_decode(**d, plan=plan)
    with pytest.raises(NotImplementedError, match="cuda"):
        dualops.mla_decode(d["q"].half(), d["kv_cache"], d["block_table"], d["cache_seqlens"])
    with pytest.raises((ValueError, TypeError)):
        dualops.mla_decode(d["q"][..., :512], d["kv_cache"], d["block_table"], d["cache_seqlens"])
    bt = d["block_table"].clone()
    bt[0, 0] = 10 ** 6
    with pytest.raises(ValueError, match="block"):
        dualops.mla_decode(d["q"], d["kv_cache"], bt, d["cache_seqlens"], validate="full")
    # out-of-range block ids without the full check: no crash (those tokens read as zeros)
    dualops.mla_decode(d["q"], d["kv_cache"], bt, d["cache_seqlens"])
    torch.cuda.synchronize()

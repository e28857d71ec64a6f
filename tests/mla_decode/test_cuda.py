"""CUDA MLA decode against dualops.reference (on the dequantized cache for the FP8 / int8 formats),
by the parity method of docs/parity.md: NaN in every unused cache slot, randomly permuted block
tables, varlen batches with 0- and 1-token requests, non-contiguous q, fresh random inputs per case;
plus the device planner against the host planner, CUDA-graph capture and replay with changing
lengths, the flash_mla compat layer, and argument errors (non-finite values:
test_cuda_nonfinite.py).

GPU tests skip on a machine without an sm_90 GPU (the CPU-side checks still run)."""
from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest
import torch

import dualops
from dualops import ops, schema
from dualops.backends.cuda import mla_decode as cuda_mla
from dualops.parity import builders as bld
from dualops.parity import expected as exp
from cuda_graphs import capture
from dualops.testing import LSE_TOLERANCE, assert_close_parity
from dualops.heuristics.cuda import (MLA_CUDA_WGMMA_SMEM_BYTES, MLA_CUDA_WGMMA_T_MAX_Q_ROWS, MLA_CUDA_WGMMA_T_ROWS,
                                     cuda_mla_kernel)
from dualops.tiling.mla_decode import MlaPlan
from mla_cuda_cases import (BF16, FP16, check, force_kernel, kernel, make_inputs, needs_cuda,  # noqa: F401
                            skip_duplicate, split_plan, to_cuda)


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
        assert 1 <= top <= MLA_CUDA_WGMMA_T_ROWS
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=128) == ("wgmma_seesaw" if fmt == "bf16" else "wgmma")
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=128, page_block_size=16) == "wgmma"
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=64) == "wgmma"
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=1) == "wgmma_t"
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=top) == "wgmma_t"
        assert cuda_mla_kernel(h100, kv_format=fmt, q_rows=top + 1) == "wgmma"
    # a GPU whose blocks cannot opt into the kernels' shared memory has none: a clear error
    small = dataclasses.replace(h100, smem_per_core_bytes=100 * 1024)
    for fmt in ("bf16", "fp8_v32"):
        with pytest.raises(ValueError, match="shared memory"):
            cuda_mla_kernel(small, kv_format=fmt, q_rows=16)
    with pytest.raises(ValueError, match="not a CUDA GPU"):
        cuda_mla_kernel(dualops.devices.profile("ascend910b2"), kv_format="bf16", q_rows=16)
    for q_rows in (1, 16, 32, 33, 64, 128):  # int8_v32 runs where fp8_v32 runs
        assert cuda_mla_kernel(h100, kv_format="int8_v32", q_rows=q_rows) == cuda_mla_kernel(
            h100, kv_format="fp8_v32", q_rows=q_rows)


def test_shared_memory_guard_is_the_kernels_largest_layout():
    """The planner's guard is the constant the kernels' compile-time checks hold every layout to
    (backends/cuda/mla_decode/mla_launch.cuh kMaxSmemBytes), and an H100 block can opt into it."""
    src = pathlib.Path(__file__).parents[2] / "backends" / "cuda" / "mla_decode" / "mla_launch.cuh"
    found = re.findall(r"constexpr int kMaxSmemBytes = (\d+);", src.read_text())
    assert found == [str(MLA_CUDA_WGMMA_SMEM_BYTES)]
    assert dualops.devices.profile("h100").smem_per_core_bytes >= MLA_CUDA_WGMMA_SMEM_BYTES


# ----------------------------------------------------------------------------- parity matrix

FORMATS = [("bf16", 576, BF16), ("bf16", 512, FP16), ("bf16", 576, FP16), ("fp8_v32", 576, BF16),
           ("fp8_model1", 512, BF16), ("fp8_v32", 576, FP16), ("fp8_model1", 512, FP16), ("int8_v32", 576, BF16),
           ("int8_v32", 576, FP16)]
VARLEN = (0, 1, 63, 64, 65, 700)


@needs_cuda
@pytest.mark.parametrize("fmt,d,dtype", FORMATS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("h_q", [1, 5, 16, 64, 128])
def test_parity_decode(fmt, d, dtype, h_q, kernel):
    skip_duplicate(kernel, fmt)
    g = bld.generator(h_q, "mla_decode", f"cuda/{fmt}/{d}/{dtype}")
    a = make_inputs(g, lens=VARLEN, h_q=h_q, kv_format=fmt, d_qk=d, dtype=dtype)
    check(a, plan="host" if h_q % 2 else "device")


@needs_cuda
@pytest.mark.parametrize("fmt,d,dtype", FORMATS[:1] + FORMATS[3:5] + FORMATS[7:8],
                         ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("s_q,h_q", [(2, 16), (4, 5), (2, 128), (4, 64), (8, 16)])
@pytest.mark.parametrize("pbs", [16, 64, 256])
def test_parity_causal_mtp(fmt, d, dtype, s_q, h_q, pbs, kernel):
    skip_duplicate(kernel, fmt)
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
    skip_duplicate(kernel, fmt)
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
        split_plan({**a, "cache_seqlens": lens_t})
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

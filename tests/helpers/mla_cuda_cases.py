"""Shared pieces of the CUDA MLA decode tests (tests/mla_decode/test_cuda*.py): the GPU marker, the
`kernel` fixture that forces each split kernel in turn, the input builder (NaN-poisoned unused
cache slots, permuted block tables), and the check against dualops.reference by the parity
method (docs/parity.md)."""
from __future__ import annotations

import pytest
import torch

import dualops
from dualops import ops, quant
from dualops.backends.cuda import mla_decode as cuda_mla
from dualops.heuristics.cuda import MLA_CUDA_WGMMA_T_ROWS
from dualops.parity import builders as bld
from dualops.parity import expected as exp
from dualops.testing import LSE_TOLERANCE, assert_close_parity

HAS_CUDA = torch.cuda.is_available() and cuda_mla.status()[0] and "mla_decode" in __import__(
    "dualops.backends.cuda", fromlist=["built_ops"]).built_ops()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs an sm_90 GPU and dualops._C built with the CUDA MLA kernels")

BF16, FP16 = torch.bfloat16, torch.float16
D_QK = {"bf16": 576, "fp8_v32": 576, "fp8_model1": 512, "int8_v32": 576}


@pytest.fixture(params=["planned", "wgmma", "wgmma_t", "wgmma_seesaw"])
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


def skip_duplicate(kernel, fmt):
    if kernel == "planned" and fmt != "bf16":
        pytest.skip("FP8 / int8 caches: each kernel is forced in turn (the planned one among them)")


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


def set_key(a, b, pos, d, value):
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


def split_plan(a):
    """The host plan of `a` on an H100 profile: its long request must be split (split merge)."""
    plan = dualops.get_mla_metadata(a["cache_seqlens"], num_heads_q=a["q"].shape[2], s_q=a["q"].shape[1],
                                    kv_format=a["kv_format"], page_block_size=a["kv_cache"].shape[1],
                                    device=dualops.devices.profile("h100"))
    assert plan.total_splits > plan.batch, plan

"""The ops on an Ascend NPU (torch_npu + a CANN build of dualops), against the reference on the
CPU: each op dispatched by the tensors' device, eagerly and through torch.ops.dualops (the
PrivateUse1 implementation), on the current stream and on a side stream. Skipped on any machine
without an NPU; scripts/npu_job.sh runs it on an Atlas A2."""
from __future__ import annotations

import math

import pytest
import torch

import dualops
from dualops import quant, reference, testing
from dualops.backends import npu

OK, WHY = npu.status()
pytestmark = pytest.mark.skipif(not OK, reason=f"needs an Ascend NPU with torch_npu and a CANN build: {WHY}")


def _npu(kw: dict) -> dict:
    return {n: (t.to("npu") if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}


def _paged(k, v, page, gen):
    """[B, S, H, D] caches as shuffled pages of `page` keys and their block table."""
    B, S, H, D = k.shape
    per = S // page
    table = torch.randperm(B * per, generator=gen).view(B, per).int()
    kp = torch.empty(B * per, page, H, D, dtype=k.dtype)
    vp = torch.empty_like(kp)
    kp[table.flatten().long()] = k.reshape(B * per, page, H, D)
    vp[table.flatten().long()] = v.reshape(B * per, page, H, D)
    return kp, vp, table


@pytest.mark.parametrize("kv_dtype", ["bf16", "int8"])
@pytest.mark.parametrize("paged", [False, True])
def test_ifa_on_npu(kv_dtype, paged, gen):
    q = torch.randn(3, 1, 16, 128, generator=gen).bfloat16()
    k = torch.randn(3, 320, 2, 128, generator=gen).bfloat16()
    v = torch.randn(3, 320, 2, 128, generator=gen).bfloat16()
    kw = dict(kv_lens=torch.tensor([320, 1, 77], dtype=torch.int32))
    if kv_dtype == "int8":
        k, kw["k_scale"], kw["k_offset"] = quant.quantize_kv_int8(k)
        v, kw["v_scale"], kw["v_offset"] = quant.quantize_kv_int8(v)
    if paged:
        k, v, kw["block_table"] = _paged(k, v, 64, gen)
    ref, _, budget = reference.incre_flash_attention(q, k, v, **kw, return_budget=True)
    args = _npu(dict(q=q, k_cache=k, v_cache=v, **kw))
    testing.assert_close_parity(dualops.incre_flash_attention(**args).cpu(), ref, budget=budget.out)
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        out = dualops.incre_flash_attention(**args)
    side.synchronize()
    testing.assert_close_parity(out.cpu(), ref, budget=budget.out)


@pytest.mark.parametrize("kv_format", ["bf16", "fp8_v32", "int8_v32"])
def test_mla_on_npu(kv_format, gen):
    q = torch.randn(2, 1, 16, 576, generator=gen).bfloat16()
    kv = torch.randn(16, 64, 1, 576, generator=gen).bfloat16()
    cache = kv if kv_format == "bf16" else quant.pack_mla_kv(kv, kv_format=kv_format)
    kw = dict(block_table=torch.arange(16, dtype=torch.int32).view(2, 8),
              cache_seqlens=torch.tensor([500, 3], dtype=torch.int32), softmax_scale=1 / math.sqrt(576),
              kv_format=kv_format)
    ref, _, budget = reference.mla_decode(q, cache, kw["block_table"], kw["cache_seqlens"],
                                          softmax_scale=kw["softmax_scale"], kv_format=kv_format, return_budget=True)
    out, _ = dualops.mla_decode(**_npu(dict(q=q, kv_cache=cache, **kw)))
    testing.assert_close_parity(out.cpu(), ref, budget=budget.out)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_grouped_gemm_on_npu(dtype, gen):
    x = torch.randn(40, 256, generator=gen).to(dtype)
    w = torch.randn(4, 128, 256, generator=gen).to(dtype)
    offs = torch.tensor([0, 10, 10, 33, 40], dtype=torch.int32)
    ref, budget = reference.grouped_gemm(x, w, group_offsets=offs, out_dtype=dtype, return_budget=True)
    args = _npu(dict(x=x, w=w, group_offsets=offs, out_dtype=dtype))
    testing.assert_close_parity(dualops.grouped_gemm(**args).cpu(), ref, budget=budget)
    # The custom op with NPU tensors: torch's dispatcher picks the PrivateUse1 implementation.
    compiled = torch.compile(lambda a, b, o: dualops.grouped_gemm(a, b, group_offsets=o, out_dtype=dtype),
                             fullgraph=True)
    testing.assert_close_parity(compiled(args["x"], args["w"], args["group_offsets"]).cpu(), ref, budget=budget)


def test_backends_report_the_device():
    info = dualops.backends()["npu"]
    assert info["available"] and "CANN" in info["reason"] and "AI cores" in info["reason"], info

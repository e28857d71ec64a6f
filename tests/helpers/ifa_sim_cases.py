"""Cases of the Ascend C incremental flash attention kernel on the simulator (tests/incre_flash_attention/
test_ascend_sim*.py): the case builder (NaN-poisoned unused slots, permuted block tables), the
simulator call and its check against the reference, and forced plans."""
from __future__ import annotations

import dataclasses

import torch

import dualops
from dualops import devices, quant, schema
from dualops import ops as dualops_ops
from dualops.backends import ascend_sim
from dualops.backends.ascend_sim import incre_flash_attention as ascend_sim_ifa
from dualops.reference import incre_flash_attention as ref_ifa
from dualops.parity import builders
from dualops.testing import LSE_TOLERANCE, assert_close_parity
from dualops.tiling import plan_incre_flash_attention

FP16, BF16 = torch.float16, torch.bfloat16


# ----------------------------------------------------------------------------- case builder


def make_case(gen, *, B=2, S_q=1, H_q=8, H_kv=2, D=64, lens=(37, 0), S_max=None, dtype=FP16,
              kv_dtype=None, int8_offset=True, block_size=0, causal=False, mask=None, pse=None,
              noncontig_q=False, q_bias=0.0):
    """Inputs of one call (public-API keyword arguments) with unused cache slots poisoned.
    mask / pse: None, "full" ([B,H_q,S_q,S_kv]), "bcast" (broadcast dims), "row" (key dim 1).
    q_bias: added to every channel of q (a one-signed bias)."""
    lens = list(lens)
    assert len(lens) == B
    S = S_max or max(max(lens), 1)
    if block_size:
        S = -(-S // block_size) * block_size
    kv_dtype = kv_dtype or dtype
    if noncontig_q:
        q = torch.randn(B, H_q, S_q, D, generator=gen).to(dtype).transpose(1, 2)
    else:
        q = torch.randn(B, S_q, H_q, D, generator=gen).to(dtype)
    if q_bias:
        q = (q.float() + q_bias).to(dtype)
    k = torch.randn(B, S, H_kv, D, generator=gen)
    v = torch.randn(B, S, H_kv, D, generator=gen)
    kw = {}
    if kv_dtype == torch.int8:
        k, ks, ko = quant.quantize_kv_int8(k, symmetric=not int8_offset)
        v, vs, vo = quant.quantize_kv_int8(v, symmetric=not int8_offset)
        kw.update(k_scale=ks, v_scale=vs)
        if int8_offset:
            kw.update(k_offset=ko, v_offset=vo)
    elif kv_dtype == torch.float8_e4m3fn:
        k, ks = quant.quantize_kv_fp8(k)
        v, vs = quant.quantize_kv_fp8(v)
        kw.update(k_scale=ks, v_scale=vs)
    else:
        k, v = k.to(kv_dtype), v.to(kv_dtype)
    kv_lens = torch.tensor(lens, dtype=torch.int32)
    if block_size:
        (k, v), table = builders.page((k, v), lens, block_size, gen, spare_blocks=3, unused_id=-1)
        kw.update(block_table=table)
        S_kv = table.shape[1] * block_size
    else:
        k, v = builders.nan_tail(k, lens), builders.nan_tail(v, lens)
        S_kv = S
    shapes = {"full": (B, H_q, S_q, S_kv), "bcast": (B, 1, 1, S_kv), "row": (B, H_q, S_q, 1),
              "heads": (1, H_q, 1, S_kv)}
    if mask is not None:
        kw["atten_mask"] = torch.rand(shapes[mask], generator=gen) < 0.3
    if pse is not None:
        kw["pse_shift"] = torch.randn(shapes[pse], generator=gen)
    return dict(q=q, k_cache=k, v_cache=v, kv_lens=kv_lens, causal=causal, **kw)


def run_sim(case, cores=2, profile="ascend910b2"):
    with ascend_sim.use_profile(profile, cores=cores):
        return dualops.incre_flash_attention(**case, return_lse=True, backend="ascend_sim")


def check(case, out, lse):
    """The parity contract (docs/parity.md) against the fp32 reference on the dequantized cache,
    with the reference's rounding budget (P, and a converted cache, rounded once to q's dtype)."""
    assert out.dtype == case["q"].dtype and lse.dtype == torch.float32
    ref_out, ref_lse, budget = ref_ifa(**case, return_budget=True)
    assert_close_parity(out, ref_out, budget=budget.out, name="out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name="lse")


def run_and_check(case, cores=2, profile="ascend910b2"):
    out, lse = run_sim(case, cores, profile)
    check(case, out, lse)
    return out, lse


def _backend_call(case, plan, cores=4):
    """Call the backend directly with a chosen plan (the public API always plans itself)."""
    values = dict(case)
    v = schema.validate("incre_flash_attention", values)
    kw = dualops_ops.ifa_backend_kwargs(v)
    with ascend_sim.use_profile("ascend910b2", cores=cores):
        return ascend_sim_ifa.incre_flash_attention(plan=plan, **kw)


def _forced_plan(case, *, kv_tile, num_splits, split_len, q_tile_rows=None, cores=4, whole_groups=0):
    q, k = case["q"], case["k_cache"]
    paged = case.get("block_table") is not None
    bs = int(k.shape[1]) if paged else 0
    max_kv = int(case["block_table"].shape[1]) * bs if paged else int(k.shape[1])
    base = plan_incre_flash_attention(batch=q.shape[0], s_q=q.shape[1], h_q=q.shape[2], h_kv=int(k.shape[2]),
                                      head_dim=q.shape[3], max_kv_len=max_kv, block_size=bs,
                                      kv_dtype_bytes=k.element_size(),
                                      device=devices.with_cores(devices.profile("ascend910b2"), cores))
    plan = base.with_splits(num_splits, split_len=split_len, whole_groups=whole_groups, kv_tile=kv_tile,
                            q_tile_rows=q_tile_rows or base.q_tile_rows)
    return dataclasses.replace(plan, num_cores=min(cores, plan.num_units))

"""Cases of the Ascend C incremental flash attention kernel on the simulator (tests/incre_flash_attention/
test_ascend_sim*.py): their inputs (dualops.parity.ifa_inputs, the one IFA input builder, with
these tests' defaults), the simulator call and its check against the reference, and forced plans."""
from __future__ import annotations

import dataclasses

import torch

import dualops
from dualops import devices, schema
from dualops import ops as dualops_ops
from dualops.backends import ascend_sim
from dualops.backends.ascend_sim import incre_flash_attention as ascend_sim_ifa
from dualops.reference import incre_flash_attention as ref_ifa
from dualops.parity.ifa_inputs import ifa_inputs
from dualops.testing import LSE_TOLERANCE, assert_close_parity
from dualops.tiling import plan_incre_flash_attention

FP16, BF16 = torch.float16, torch.bfloat16


# ----------------------------------------------------------------------------- inputs


# These tests' defaults: two requests of 37 and 0 keys, D 64, fp16.
DEFAULTS = dict(B=2, lens=(37, 0), d=64, dtype=FP16)


def make_case(gen, **kw):
    """Inputs of one call (public-API keyword arguments) from the one IFA input builder
    (dualops.parity.ifa_inputs, its keywords), with DEFAULTS; paged caches get unused table
    entries -1 (a kernel that reads one faults on the simulator's GM bounds)."""
    return ifa_inputs(gen, **{**DEFAULTS, **kw}, spare_blocks=3, unused_id=-1)


def run_sim(case, cores=2, profile="ascend910b2"):
    with ascend_sim.use_profile(profile, cores=cores):
        return dualops.incre_flash_attention(**case, return_lse=True, backend="ascend_sim")


def check(case, out, lse):
    """The §5 budgets of q's dtype, against the fp32 reference on the dequantized cache. (The
    kernel hands P and converted K/V to the cube as hi + lo parts, so no extra budget is needed
    for bf16 probabilities or for antiquant to q's dtype.)"""
    assert out.dtype == case["q"].dtype and lse.dtype == torch.float32
    ref_out, ref_lse = ref_ifa(**case)
    assert_close_parity(out, ref_out, name="out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, name="lse")


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

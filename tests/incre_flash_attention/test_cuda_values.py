"""CUDA incremental flash attention: non-finite values (docs/values.md) against dualops.reference
(helpers: tests/helpers/ifa_cuda_cases.py)."""
from __future__ import annotations

import zlib

import pytest
import torch

from dualops.testing import LSE_TOLERANCE, assert_close_parity

# (pytest_generate_tests, forced_launch and _forced_launch_override: every test runs under the forced
# launches that name it, ifa_cuda_cases.FORCED_LAUNCHES)
from ifa_cuda_cases import (  # noqa: F401
    BF16, FP16, _backend_kwargs, _id, _poison_case, check, cuda_backend, make_case, needs_cuda, ref_ifa,
    _forced_launch_override, forced_launch, pytest_generate_tests)


# ----------------------------------------------------------------------------- non-finite values

# NaN in q, in an attended key, in an attended pse_shift entry or in a key scale makes that row's
# out and lse NaN, as in the reference; a NaN value (or value scale) makes out NaN and leaves lse
# finite. Every merge of split-KV partials must pass a NaN split on (FORCED_LAUNCHES runs these
# under each merge), without splits, with forced splits of 4k keys and the planner's at 128k.
NAN_CASES = [dict(where=w, kv=kv, s=s, splits=n)
             for w, kvs in (("q", ("same", "int8")), ("key", ("same", "fp8")), ("pse", ("same",)),
                            ("value", ("same",)), ("k_scale", ("int8", "fp8")), ("v_scale", ("int8",)))
             for kv in kvs for s, n in ((4096, 1), (4096, 8), (131072, 0))]



@needs_cuda
@pytest.mark.parametrize("case", NAN_CASES, ids=[_id(c) for c in NAN_CASES])
def test_non_finite_inputs_reach_the_row(case):
    q, k, v, kw = _poison_case(case["where"], case["kv"], case["s"], zlib.crc32(_id(case).encode()) % 1000)
    ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
    bk = dict(_backend_kwargs(q, k, kw), atten_mask=kw.get("atten_mask"), pse_shift=kw.get("pse_shift"))
    plan = cuda_backend.make_ifa_plan(q, k, None)
    if case["splits"]:
        plan = plan.with_splits(case["splits"])
    else:
        assert plan.num_splits > 1, plan.describe()
    out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **bk)
    torch.cuda.synchronize()
    # the reference's NaN rows (lse [B, H_q, S_q]) are the ones poisoned above
    nan_lse = {"q": [(0, 3)], "key": [(0, h) for h in range(8)], "pse": [(0, 2)], "value": [],
               "k_scale": [(b, h) for b in range(2) for h in range(8)], "v_scale": []}[case["where"]]
    want = torch.zeros(2, 8, dtype=torch.bool)
    for bh in nan_lse:
        want[bh] = True
    assert torch.equal(torch.isnan(ref_lse[..., 0]).cpu(), want)
    assert torch.isnan(ref_out).any()
    assert_close_parity(out, ref_out, budget=budget.out, name=f"{plan.describe()} out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"{plan.describe()} lse")


@needs_cuda
@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
def test_minus_inf_value_gives_minus_inf(dtype):
    q, k, v, kw = make_case(B=1, h_q=8, h_kv=1, dtype=dtype, lens=[512], s_max=512, seed=5)
    v[0, 100, 0, 7] = float("-inf")
    out, _ = check(q, k, v, kw, name="-inf value")
    assert (out[0, 0, :, 7] == float("-inf")).all()


# inf / NaN values at keys a row does not attend (masked by atten_mask, hidden by the causal
# mask) have no effect; at keys it attends they reach that row's channel (+inf, -inf, NaN; two
# infinities of both signs: NaN) -- in chunks of the 16-bit kernels' p.v that mix both, paged and
# contiguous, every head dim, with and without split-KV.
UNATTENDED = [dict(dtype=dt, D=D, page=pg, splits=ns)
              for dt in (BF16, FP16) for D in (64, 128, 256) for pg in (0, 64) for ns in (0, 3)]


@needs_cuda
@pytest.mark.parametrize("case", UNATTENDED, ids=[_id(c) for c in UNATTENDED])
def test_non_finite_values_at_unattended_keys(case):
    vals = (float("inf"), float("-inf"), float("nan"))

    def poison(v, slot, masked, attended):
        for i, j in enumerate(masked):
            v[slot(j)][0, (5 * i) % case["D"]] = vals[i % 3]
        if attended:  # +inf and -inf in one channel of KV head 1 (NaN), -inf in another
            v[slot(4)][1, 9] = float("inf")
            v[slot(5)][1, 9] = float("-inf")
            v[slot(6)][1, 11] = float("-inf")

    out, lse, ref_out, ref_lse, budget = _unattended_call(case, dict(dtype=case["dtype"]), poison)
    assert torch.isnan(ref_out).any() and torch.isinf(ref_out).any()
    assert_close_parity(out, ref_out, budget=budget.out, name=f"{_id(case)} out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"{_id(case)} lse")


# The same with 8-bit caches: fp8 e4m3 holds NaN (no inf), int8 neither; NaN at keys a row does
# not attend has no effect, at an attended key it reaches the row's channel.
UNATTENDED_FP8 = [dict(kv="fp8", D=D, page=pg, splits=ns) for D in (64, 128) for pg in (0, 64) for ns in (0, 3)]


@needs_cuda
@pytest.mark.parametrize("case", UNATTENDED_FP8, ids=[_id(c) for c in UNATTENDED_FP8])
def test_nan_values_at_unattended_keys_of_an_fp8_cache(case):
    def poison(v, slot, masked, attended):
        bits = v.view(torch.uint8)
        for i, j in enumerate(masked):
            bits[slot(j)][0, (5 * i) % case["D"]] = 0x7F  # e4m3 NaN
        if attended:
            bits[slot(5)][1, 9] = 0x7F

    out, lse, ref_out, ref_lse, budget = _unattended_call(case, dict(kv="fp8"), poison)
    assert torch.isnan(ref_out).any()
    assert_close_parity(out, ref_out, budget=budget.out, name=f"{_id(case)} out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"{_id(case)} lse")


def _unattended_call(case, cache, poison):
    """Three causal s_q 3 requests under a per-request mask: poison(v, slot, masked, attended)
    writes non-finite values at masked keys and the last key (hidden from every q row but the
    last), and, when attended, at keys 4-6 after unmasking them. Returns out, lse of the CUDA
    kernel under the case's plan and of the reference, and the reference's budget."""
    S_q, lens = 3, [300, 41, 2]
    q, k, v, kw = make_case(B=3, S_q=S_q, h_q=8, h_kv=2, D=case["D"], page=case["page"], lens=lens, s_max=320,
                            causal=True, mask="per_batch", seed=zlib.crc32(_id(case).encode()) % 1000, **cache)
    mask = kw["atten_mask"]  # [B, 1, 1, s_kv]
    table = kw.get("block_table")
    for b, n in enumerate(lens):
        def slot(j):  # (tensor index of key j of request b)
            return (int(table[b, j // case["page"]]), j % case["page"]) if case["page"] else (b, j)
        masked = [j for j in range(n) if bool(mask[b, 0, 0, j])][:3] + [n - 1]
        if n > 8:
            mask[b, 0, 0, 4:7] = False
        poison(v, slot, masked, n > 8)
    plan = cuda_backend.make_ifa_plan(q, k, table)
    if case["splits"]:
        plan = plan.with_splits(case["splits"])
    # the backend takes the mask broadcast to [B, H_q, S_q, S_kv] (stride 0 over the broadcast
    # dims), as the op's argument conversion hands it over
    full = (q.shape[0], q.shape[2], q.shape[1], mask.shape[-1])
    bk = dict(_backend_kwargs(q, k, kw), atten_mask=mask.expand(full), pse_shift=None)
    out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **bk)
    torch.cuda.synchronize()
    ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
    return out, lse, ref_out, ref_lse, budget


@needs_cuda
@pytest.mark.parametrize("splits", [0, 3, 70])
@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
def test_plus_inf_bias_gives_inf_lse(dtype, splits):
    """A +inf score: the row's lse is +inf and its out NaN, also through every split merge."""
    q, k, v, kw = make_case(B=2, h_q=8, h_kv=2, dtype=dtype, lens=[300, 40], pse="full", seed=9)
    kw["pse_shift"][0, 3, 0, 17] = float("inf")
    plan = cuda_backend.make_ifa_plan(q, k, None)
    if splits:
        plan = plan.with_splits(splits)
    bk = dict(_backend_kwargs(q, k, kw), pse_shift=kw["pse_shift"])
    out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **bk)
    torch.cuda.synchronize()
    ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
    assert_close_parity(out, ref_out, budget=budget.out, name="+inf pse out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name="+inf pse lse")
    assert torch.isinf(lse[0, 3]).all() and torch.isnan(out[0, 0, 3]).all()

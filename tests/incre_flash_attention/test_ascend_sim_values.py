"""The Ascend C incremental flash attention kernel on the simulator: non-finite values follow the
reference (docs/values.md) -- NaN / inf in q, keys, values and pse_shift, keys a row never attends,
splits that hold NaN."""
from __future__ import annotations

import pytest
import torch

from dualops import schema
from dualops import ops as dualops_ops
from dualops.backends import ascend_sim
from dualops.backends.ascend_sim import incre_flash_attention as ascend_sim_ifa
from dualops.reference import incre_flash_attention as ref_ifa
from ifa_sim_cases import (BF16, FP16, _backend_call, _forced_plan, check, make_case, run_and_check,
                           run_sim)

pytestmark = pytest.mark.skipif(not ascend_sim.status()[0], reason=f"ascend_sim unavailable: {ascend_sim.status()[1]}")


# ----------------------------------------------------------------------------- NaN / inf semantics
# The kernel follows the reference on bad values: NaN in q, a key or pse_shift makes (the API
# rejects a non-finite softmax_scale before any backend runs)
# that row's out and lse NaN (never "saw no key"); a row whose max score is +inf gets lse +inf and
# NaN out; a split that holds NaN poisons the merged row; +-inf in V gives +-inf where p . v does.

def _nan_inf_case(gen, what, dtype):
    case = make_case(gen, B=2, h_q=4, h_kv=2, lens=(70, 0), pse="full" if what.startswith("pse") else None,
                     dtype=dtype, mask="full" if what == "pse_inf" else None)
    q, k, v = case["q"], case["k_cache"], case["v_cache"]
    if what == "q_nan":
        q[0, 0, 1, 5] = float("nan")                 # one query row
    elif what == "k_nan":
        k[0, 33, 1, 7] = float("nan")                # a key every head of kv head 1 sees
    elif what == "pse_nan":
        case["pse_shift"][0, 2, 0, 12] = float("nan")
    elif what == "pse_inf":
        case["atten_mask"][0, 3, 0, 40] = False
        case["pse_shift"][0, 3, 0, 40] = float("inf")   # that row's max is +inf
    elif what == "v_inf":
        v[0, 20, 0, 3] = float("inf")
        v[0, 50, 1, 9] = float("-inf")
        v[0, 61, 1, 10] = float("inf")
    return case


@pytest.mark.parametrize("what", ["q_nan", "k_nan", "pse_nan", "pse_inf", "v_inf"])
@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_nan_and_inf_follow_the_reference(gen, what, dtype):
    case = _nan_inf_case(gen, what, dtype)
    out, lse = run_sim(case)
    ref_out, ref_lse = ref_ifa(**case)
    assert bool(torch.isnan(ref_out).any() or torch.isinf(ref_out).any()), "the case must hit a bad value"
    check(case, out, lse)


def test_inf_in_a_converted_cache(gen):
    # A bf16 cache under fp16 q goes to the cube as hi + lo parts: +-inf stays +-inf (lo 0), not
    # inf + NaN, in keys (scores +-inf) and values.
    case = make_case(gen, B=2, h_q=4, h_kv=2, lens=(50, 9), dtype=FP16, kv=BF16)
    case["v_cache"][0, 10, 0, 3] = float("inf")
    case["v_cache"][1, 2, 1, 4] = -float("inf")
    case["k_cache"][0, 11, 1, 5] = float("inf")
    ref_out, ref_lse = ref_ifa(**case)
    assert ref_out.isinf().any() and ref_lse.isinf().any()
    run_and_check(case)


@pytest.mark.parametrize("what", ["k_nan", "pse_inf", "v_inf"])
def test_nan_and_inf_survive_the_split_merge(gen, what):
    # Split-KV: the split that holds the bad value must poison (or inf) the merged row, not vanish.
    case = _nan_inf_case(gen, what, BF16)
    plan = _forced_plan(case, kv_tile=16, num_splits=3, split_len=32)
    check(case, *_backend_call(case, plan))


def _never_attended_case(gen, hide, kv):
    """NaN / inf at keys some rows never attend (ifa_hidden.h): values of keys hidden from some
    rows and seen by others, or hidden from every row; keys and pse_shift there too."""
    dtype, kv_dtype = {"same": (BF16, None), "other16": (FP16, BF16), "fp8": (BF16, torch.float8_e4m3fn)}[kv]
    L = (200, 41)
    if hide == "causal":
        case = make_case(gen, B=2, s_q=3, h_q=8, h_kv=1, lens=L, causal=True, dtype=dtype, kv=kv_dtype,
                         block_size=32 if kv == "same" else 0)
    else:
        case = make_case(gen, B=2, s_q=2, h_q=8, h_kv=2, lens=L, dtype=dtype, kv=kv_dtype, mask="full",
                         pse="full", block_size=32 if kv != "same" else 0)
    k, v = case["k_cache"], case["v_cache"]
    table = case.get("block_table")

    def at(b, pos):   # cache index of request b's key pos
        if table is None:
            return b, pos
        return int(table[b, pos // k.shape[1]]), pos % k.shape[1]

    nan = float("nan")
    bad = [(0, L[0] - 1, 0), (0, L[0] - 2, 1), (1, L[1] - 1, 2)] if hide == "causal" else \
        [(0, 7, 0), (0, 150, 3), (1, 3, 1), (1, 40, 5)]
    for n, (b, pos, ch) in enumerate(bad):
        kb, slot = at(b, pos)
        if kv != "fp8":
            v[kb, slot, :, ch] = (nan, float("inf"), -float("inf"))[n % 3]
            k[kb, slot, :, ch + 1] = float("inf") if n % 2 else nan
        else:   # (e4m3 has no inf)
            v[kb, slot, :, ch] = nan
            k[kb, slot, :, ch + 1] = nan
    if hide == "mask":
        b, pos = 0, 150                              # hidden from every row
        case["atten_mask"][b, :, :, pos] = True
        case["pse_shift"][b, :, :, pos] = nan
    return case


@pytest.mark.parametrize("kv", ["same", "other16", "fp8"])
@pytest.mark.parametrize("hide", ["causal", "mask"])
def test_never_attended_keys_have_no_effect(gen, hide, kv):
    case = _never_attended_case(gen, hide, kv)
    ref_out, _ = ref_ifa(**case)
    assert torch.isfinite(ref_out).sum() > 0 and not torch.isfinite(ref_out).all(), "mixed rows expected"
    run_and_check(case)
    # Several tiles per unit, both slots, several q passes and a split merge.
    check(case, *_backend_call(case, _forced_plan(case, kv_tile=32, num_splits=3, split_len=96, q_tile_rows=5)))


def test_plan_with_more_blocks_than_ai_cores_is_rejected(gen):
    # A plan made for a 24-core 910B2 run on a 20-core 910B3: SyncAll needs every block resident.
    case = make_case(gen, B=8, h_q=8, h_kv=4, lens=(300,) * 8, dtype=BF16)
    plan = _forced_plan(case, kv_tile=64, num_splits=2, split_len=192, cores=24)
    assert plan.num_cores == 24
    values = dict(case)
    kw = dualops_ops.ifa_backend_kwargs(schema.validate("incre_flash_attention", values))
    with ascend_sim.use_profile("ascend910b3"):
        with pytest.raises(ValueError, match=r"plan.num_cores = 24 exceeds the 20 AI cores of ascend910b3"):
            ascend_sim_ifa.incre_flash_attention(plan=plan, **kw)


@pytest.mark.parametrize("kv", ["same", "int8_asym"])
def test_parity_with_hardware_like_vector_numerics(gen, monkeypatch, kv):
    # Exp / Ln / Div off by up to 4 ulp (deterministically, simulator profile vec_ulp) instead of
    # fp32 libm: the kernel still meets the budgets, split-KV merge included.
    monkeypatch.setenv("DUALOPS_ASCEND_SIM_VEC_ULP", "4")
    case = make_case(gen, B=2, h_q=8, h_kv=2, lens=(200, 65), block_size=32, dtype=BF16,
                     kv=torch.int8 if kv == "int8_asym" else None, mask="full", pse="heads")
    run_and_check(case)
    check(case, *_backend_call(case, _forced_plan(case, kv_tile=32, num_splits=3, split_len=96)))

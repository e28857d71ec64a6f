"""Shared pieces of the CUDA incremental flash attention tests (tests/incre_flash_attention/test_cuda*.py):
their inputs (dualops.parity.ifa_inputs, the one IFA input builder), the reference check, the forced
launches every module runs its tests under,
and the split-KV, graph, multi-wave and poisoning helpers."""
from __future__ import annotations

import math

import pytest
import torch

import dualops
from dualops import tuning
from dualops.backends.cuda import incre_flash_attention as cuda_backend
from dualops.reference import incre_flash_attention as ref_ifa
from dualops.parity.ifa_inputs import ifa_inputs
from dualops.testing import LSE_TOLERANCE, assert_close_parity

HAS_CUDA = torch.cuda.is_available() and cuda_backend.status()[0]
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs an sm_90 GPU and dualops._C built with CUDA")

BF16, FP16 = torch.bfloat16, torch.float16



# ----------------------------------------------------------------------------- forced launches

# By default the planner picks one launch per call and GPU (kernel variant, merge, prefetches:
# python/dualops/heuristics/cuda.py), so a path that this GPU's rules pick only for some
# shapes -- or never -- would be covered by few tests or none. The tests named in each entry run
# again under that entry's tuning.override (in this process: plans are cached per override):
#  - merge-*: one merge of the split-KV partials forced (the combine kernel, the last-CTA merge
#    behind arrival counters, the cluster merge through distributed shared memory);
#  - narrow / wide (-prefetch): one CTA shape forced, 8-bit caches without / with the first-fill
#    L2 prefetch (by default on only on GPUs with little DRAM bandwidth per SM, the H100, and
#    there the wide one only for single-wave grids), and the staggered first wave of narrow
#    multi-wave grids of 16-bit caches;
#  - fill2-*: the second-fill L2 prefetch after the grid-dependency wait on for splits of >= 512
#    keys, and off (by default the H100's splits of >= 4096 keys);
#  - lockstep-*: the lockstep pipeline (one step's chunks in flight per warp, the CTA's warps
#    stepping together; 8-bit kernels also prefetch their first fill) for every unit of >= 16 keys
#    in its barrier-first and its burst order, and off (by default the H100's long units only).
_MERGE_TESTS = ("forced_split_plans", "split_merge_repeats", "concurrent_streams", "graph_decode_step",
                "whole_groups_then_splits", "non_finite_inputs", "non_finite_values", "plus_inf_bias")
_SHAPE_TESTS = ("dtypes_head_dims_layouts", "multi_token_queries", "masks_and_bias", "8bit_query_rows",
                "forced_split_plans", "one_chunk_units", "split_kv_long_context", "multi_wave_grids",
                "graph_decode_step", "whole_groups_then_splits", "biased_q_short_requests", "smoke")
_FILL2_TESTS = ("first_fill_prefetch", "split_kv_long_context", "multi_wave_grids", "graph_decode_step")
_LOCKSTEP_TESTS = ("dtypes_head_dims_layouts", "page_sizes", "multi_token_queries", "masks_and_bias",
                   "forced_split_plans", "one_chunk_units", "climbing_scores", "split_kv_long_context",
                   "first_fill_prefetch", "multi_wave_grids", "whole_groups_then_splits", "graph_decode_step",
                   "8bit_query_rows", "biased_q_short_requests", "smoke")
FORCED_LAUNCHES = {  # (ids launch_<name>: names are no prefixes of each other, for -k)
    **{f"merge_{m}": (dict(ifa_merge=m), _MERGE_TESTS) for m in ("kernel", "counter", "cluster")},
    **{f"{shape}_{'pf' if pf else 'plain'}": (dict(ifa_cta_shape=shape, ifa_narrow_prefetch=pf,
                                                    ifa_wide_prefetch=pf), _SHAPE_TESTS)
       for shape in ("narrow", "wide") for pf in (False, True)},
    "fill2_512": (dict(ifa_second_fill_keys=512), _FILL2_TESTS),
    "fill2_off": (dict(ifa_second_fill_keys=0), _FILL2_TESTS),
    "lockstep16_barrier": (dict(ifa_lockstep_keys=16, ifa_lockstep_burst_keys=0), _LOCKSTEP_TESTS),
    "lockstep16_burst": (dict(ifa_lockstep_keys=16, ifa_lockstep_burst_keys=16), _LOCKSTEP_TESTS),
    "lockstep_off": (dict(ifa_lockstep_keys=0, ifa_lockstep_burst_keys=0),
                     ("split_kv_long_context", "first_fill_prefetch", "whole_groups_then_splits", "graph_decode_step")),
}


def pytest_generate_tests(metafunc):
    """Every test named in FORCED_LAUNCHES runs once more per entry that names it (ids: the entry)."""
    if "forced_launch" not in metafunc.fixturenames:
        return
    name = metafunc.function.__name__
    ids = ["default"] + [k for k, (_, tests) in FORCED_LAUNCHES.items() if any(t in name for t in tests)]
    if len(ids) > 1:
        metafunc.parametrize("forced_launch", ids, ids=[f"launch_{i}" for i in ids])


@pytest.fixture
def forced_launch():
    return "default"


@pytest.fixture(autouse=True)
def _forced_launch_override(forced_launch):
    knobs = FORCED_LAUNCHES[forced_launch][0] if forced_launch != "default" else {}
    with tuning.override(**knobs):
        yield


# ----------------------------------------------------------------------------- inputs


def make_case(*, D=128, S_q=1, page=0, int8_offset=True, seed=0, device="cuda", **kw):
    """(q, k, v, the other keyword arguments) of one dualops.incre_flash_attention call, from the
    one IFA input builder (dualops.parity.ifa_inputs: every other keyword is its own). D, S_q,
    page (block size, 0: contiguous) and int8_offset (both caches with offsets, else both
    symmetric) keep the names these tests' ids use. Paged caches get a spare table column and
    unused table entries -1: a kernel that reads one reads out of bounds (the sanitizer says)."""
    a = ifa_inputs(seed, d=D, s_q=S_q, block_size=page, int8_offsets="kv" if int8_offset else "",
                   spare_blocks=3, unused_id=-1, spare_table_cols=1, device=device, **kw)
    return a.pop("q"), a.pop("k_cache"), a.pop("v_cache"), a


def check(q, k, v, kw, *, name=""):
    out, lse = dualops.incre_flash_attention(q, k, v, backend="cuda", return_lse=True, **kw)
    torch.cuda.synchronize()
    ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert_close_parity(out, ref_out, budget=budget.out, name=f"{name} out")
    assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"{name} lse")
    return out, lse


def _id(d):
    return "-".join(f"{k}={v}" for k, v in d.items())


def _backend_kwargs(q, k, kw):
    full = dict(kv_lens=kw["kv_lens"], block_table=kw.get("block_table"), softmax_scale=q.shape[-1] ** -0.5,
                causal=kw.get("causal", False), atten_mask=None, pse_shift=None, k_scale=kw.get("k_scale"),
                v_scale=kw.get("v_scale"), k_offset=kw.get("k_offset"), v_offset=kw.get("v_offset"))
    return full


def _capture_and_check_replays(q, k, v, kw, plan, bk, step_lens):
    """Capture one call in a CUDA graph (on a side stream), then per step write fresh q (and the
    step's kv_lens, when given) in place, replay, and check against the reference."""
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            out, lse = cuda_backend.incre_flash_attention(q, k, v, plan=plan, **bk)
    torch.cuda.current_stream().wait_stream(s)
    for step, lens in enumerate(step_lens):
        q.copy_(torch.randn_like(q, dtype=torch.float32).to(q.dtype))
        if lens is not None:
            kw["kv_lens"].copy_(torch.tensor(lens, dtype=torch.int32))
        g.replay()
        torch.cuda.synchronize()
        ref_out, ref_lse, budget = ref_ifa(q, k, v, **kw, return_budget=True)
        assert_close_parity(out, ref_out, budget=budget.out, name=f"replay {step} out")
        assert_close_parity(lse, ref_lse, *LSE_TOLERANCE, budget=budget.lse, name=f"replay {step} lse")

def _poison_case(where, kv, s, seed, device="cuda"):
    q, k, v, kw = make_case(B=2, h_q=8, h_kv=1, kv=kv, lens=[s, s // 3], s_max=s,
                            pse="full" if where == "pse" else None, seed=seed, device=device)
    j = s // 2  # an attended key of request 0 (request 1 sees s // 3 < j keys)
    nan = float("nan")
    if where == "q":
        q[0, 0, 3, 5] = nan
    elif where == "key":
        k[0, j, 0, 5] = nan  # (fp8 e4m3fn has a NaN, int8 none)
    elif where == "pse":
        kw["pse_shift"][0, 2, 0, j] = nan
    elif where == "value":
        v[0, j, 0, 7] = nan
    else:
        kw[where][0, 5] = nan
    return q, k, v, kw

def multi_wave_case(seed, **case):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    B = math.ceil((2 * sms + 8) / 4)  # 4 KV heads per request: more than two units per SM
    return make_case(B=B, h_q=8, h_kv=4, s_max=300, seed=seed, **case), 2 * sms

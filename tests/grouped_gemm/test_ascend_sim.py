"""The Ascend C grouped GEMM on the simulator against dualops.reference (the parity method,
docs/parity.md): NaN in every x row outside the groups (and in masked rows past masked_m), varlen
groups with 0- and 1-row groups, M, N, K not multiples of the tiles, fresh random inputs; bf16 /
fp16, int8 rowwise and the fp8 recipes; host-side rejection of bad offsets / scales, and offsets
past x that skip the host checks clamped in the kernel. Runs on 2 simulated AI cores (real per-core
capacities) to stay fast."""
from __future__ import annotations

import pytest
import torch

import dualops
from dualops.backends import ascend_sim
from dualops.backends.ascend_sim import grouped_gemm as gg_sim
from dualops.reference.grouped_gemm import grouped_gemm as ref_grouped_gemm
from dualops.testing import assert_close_parity
from dualops.tiling.grouped_gemm import plan_grouped_gemm, plan_grouped_gemm_masked

pytestmark = pytest.mark.skipif(not ascend_sim.status()[0], reason=f"ascend_sim unavailable: {ascend_sim.status()[1]}")

FP8, BF16, FP16 = torch.float8_e4m3fn, torch.bfloat16, torch.float16
RECIPES = [(BF16, "none"), (FP16, "none"), (torch.int8, "rowwise"), (FP8, "per_tensor"), (FP8, "rowwise"),
           (FP8, "blockwise")]


def values(gen, dtype, *shape):
    t = torch.randn(*shape, generator=gen)
    if dtype == torch.int8:
        return (t * 40).round().clamp(-127, 127).to(torch.int8)
    return t.to(dtype)


def poison_rows(x, rows):
    x = x.clone()
    x[rows] = 127 if x.dtype == torch.int8 else float("nan")
    return x


def scales(gen, mode, lead, G, N, K, with_x=True):
    kb, nb = -(-K // 128), -(-N // 128)
    r = lambda *s: torch.rand(*s, generator=gen) + 0.5   # noqa: E731
    if mode == "none":
        return None, None
    if mode == "per_tensor":
        return (r(1) if with_x else None), r(G)
    if mode == "rowwise":
        return r(*lead) * 0.02, r(G, N) * 0.02
    return r(*lead, kb), r(G, nb, kb)


def contiguous_case(gen, dtype, mode, rows, N, K, tail=3, with_x=True):
    G = len(rows)
    offs = torch.tensor([0] + torch.tensor(rows).cumsum(0).tolist(), dtype=torch.int32)
    M = int(offs[-1]) + tail
    x = poison_rows(values(gen, dtype, M, K), slice(int(offs[-1]), M))
    w = values(gen, dtype, G, N, K)
    xs, ws = scales(gen, mode, (M,), G, N, K, with_x)
    return dict(x=x, w=w, group_offsets=offs, scale_mode=mode, x_scale=xs, w_scale=ws)


def masked_case(gen, dtype, mode, counts, m_max, N, K):
    G = len(counts)
    x = values(gen, dtype, G, m_max, K)
    for g, c in enumerate(counts):
        x[g] = poison_rows(x[g], slice(c, m_max))
    w = values(gen, dtype, G, N, K)
    xs, ws = scales(gen, mode, (G, m_max), G, N, K)
    return dict(x=x, w=w, masked_m=torch.tensor(counts, dtype=torch.int32), scale_mode=mode, x_scale=xs, w_scale=ws)


def check(case, out_dtype=BF16, plan=None, cores=2):
    with ascend_sim.use_profile("ascend910b2", cores=cores):
        if plan is None:
            y = dualops.grouped_gemm(**case, out_dtype=out_dtype, backend="ascend_sim")
        else:
            y = gg_sim.grouped_gemm(**case, out_dtype=out_dtype, plan=plan)
    expect, budget = ref_grouped_gemm(**case, return_budget=True)
    assert y.dtype == out_dtype and y.shape == expect.shape
    assert_close_parity(y, expect.to(out_dtype) if out_dtype != torch.float32 else expect, budget=budget)
    return y


@pytest.mark.parametrize("dtype, mode", RECIPES, ids=lambda v: str(v).removeprefix("torch."))
def test_contiguous_varlen(dtype, mode):
    gen = torch.Generator().manual_seed(11)
    # 0- and 1-row groups, a group over two m tiles, N and K off every tile size
    case = contiguous_case(gen, dtype, mode, [5, 0, 1, 37], N=200, K=300 if mode == "blockwise" else 72)
    y = check(case)
    assert torch.all(y[43:] == 0)   # rows outside every group


@pytest.mark.parametrize("dtype, mode", RECIPES, ids=lambda v: str(v).removeprefix("torch."))
def test_masked(dtype, mode):
    gen = torch.Generator().manual_seed(12)
    case = masked_case(gen, dtype, mode, [3, 0, 20], m_max=20, N=144, K=160)
    y = check(case, out_dtype=FP16)
    assert torch.all(y[0, 3:] == 0) and torch.all(y[1] == 0)


@pytest.mark.parametrize("out_dtype", [BF16, FP16, torch.float32], ids=str)
def test_out_dtypes(out_dtype):
    gen = torch.Generator().manual_seed(13)
    check(contiguous_case(gen, BF16, "none", [9, 17], N=48, K=40), out_dtype=out_dtype)
    check(contiguous_case(gen, torch.int8, "rowwise", [9, 17], N=48, K=40), out_dtype=out_dtype)


def test_blockwise_hands_over_k_blocks_in_sets():
    """11 K blocks: a set of 8 partial products from L0C, then the remaining 3."""
    gen = torch.Generator().manual_seed(22)
    check(contiguous_case(gen, FP8, "blockwise", [3, 20], N=130, K=128 * 10 + 5))


def test_per_tensor_without_x_scale():
    gen = torch.Generator().manual_seed(14)
    check(contiguous_case(gen, FP8, "per_tensor", [4, 6], N=32, K=64, with_x=False))


def test_shape_only_masked_plan_skips_rows_past_masked_m():
    gen = torch.Generator().manual_seed(15)
    case = masked_case(gen, BF16, "none", [0, 17, 40], m_max=40, N=64, K=48)
    plan = plan_grouped_gemm_masked(3, 40, n=64, k=48, device="ascend910b2", expected_m=16)
    assert plan.shape_only and plan.tile_m == 16
    check(case, plan=plan)


def test_large_tiles_and_k_loop():
    """Groups of >= 256 rows take 128 x 256 tiles; K runs over several double-buffered steps."""
    gen = torch.Generator().manual_seed(16)
    case = contiguous_case(gen, BF16, "none", [260], N=300, K=200, tail=0)
    with ascend_sim.use_profile("ascend910b2", cores=2) as prof:
        plan = plan_grouped_gemm([260], n=300, k=200, device=prof)
    assert (plan.tile_m, plan.tile_n) == (128, 256) and plan.num_k_tiles > 2
    assert "K step" in plan.describe() and "L0C 128/128 KB" in plan.describe()
    check(case, plan=plan)


def test_blockwise_large_tiles():
    """128-row blockwise tiles: each vector core accumulates 64 rows; two K blocks per hand-off."""
    gen = torch.Generator().manual_seed(23)
    case = contiguous_case(gen, FP8, "blockwise", [260], N=130, K=300, tail=0)
    with ascend_sim.use_profile("ascend910b2", cores=2) as prof:
        plan = plan_grouped_gemm([260], n=130, k=300, dtype=FP8, scale_mode="blockwise", device=prof)
    assert (plan.tile_m, plan.tile_n, plan.tile_k) == (128, 128, 128)
    check(case, plan=plan)


def test_empty_groups_cost_nothing():
    gen = torch.Generator().manual_seed(17)
    case = contiguous_case(gen, BF16, "none", [0, 16, 0, 0], N=64, K=64, tail=0)
    check(case)
    rep = ascend_sim.last_counters()["report"]
    macs = sum(c["cube_macs"] for c in rep["cores"])
    assert macs == 16 * 64 * 64   # one group's tiles, nothing for the empty ones
    w_read = next(r["read"] for r in rep["regions"] if r["name"] == "w")
    assert w_read == 64 * 64 * 2   # only group 1's weights


def test_all_groups_empty():
    gen = torch.Generator().manual_seed(18)
    for dtype, mode in ((BF16, "none"), (FP8, "blockwise")):
        case = contiguous_case(gen, dtype, mode, [0, 0], N=32, K=128, tail=2)
        y = check(case)
        assert torch.all(y == 0)


@pytest.mark.parametrize("bad, match", [
    (dict(group_offsets=torch.tensor([0, 5, 3], dtype=torch.int32)), "must be non-decreasing"),
    (dict(group_offsets=torch.tensor([0, 5, 9], dtype=torch.int32)), "exceeds x rows M = 8"),
    (dict(group_offsets=torch.tensor([1, 5, 8], dtype=torch.int32)), r"group_offsets\[0\] must be 0"),
])
def test_bad_offsets_rejected_before_launch(bad, match):
    """The simulator's calls run the value checks (its kernels trust the offsets), validate=True too."""
    x, w = torch.randn(8, 32).bfloat16(), torch.randn(2, 16, 32).bfloat16()
    with pytest.raises(ValueError, match=match):
        dualops.grouped_gemm(x, w, backend="ascend_sim", **bad)


def test_bad_masked_m_and_scales_rejected():
    x, w = torch.randn(2, 8, 32).to(FP8), torch.randn(2, 16, 32).to(FP8)
    ok = dict(masked_m=torch.tensor([8, 1], dtype=torch.int32), out_dtype=BF16, backend="ascend_sim")
    with pytest.raises(ValueError, match=r"masked_m\[0\] = 9"):
        dualops.grouped_gemm(x, w, **{**ok, "masked_m": torch.tensor([9, 1], dtype=torch.int32)}, scale_mode="rowwise",
                             x_scale=torch.ones(2, 8), w_scale=torch.ones(2, 16))
    with pytest.raises(ValueError, match="w_scale"):
        dualops.grouped_gemm(x, w, **ok, scale_mode="rowwise", x_scale=torch.ones(2, 8), w_scale=torch.ones(2, 15))
    with pytest.raises(ValueError, match="x_scale"):
        dualops.grouped_gemm(x, w, **ok, scale_mode="blockwise", x_scale=torch.ones(2, 8, 2), w_scale=torch.ones(2, 1, 1))
    with pytest.raises(ValueError, match="x_scale"):
        dualops.grouped_gemm(x, w, **ok, scale_mode="per_tensor", x_scale=torch.ones(2), w_scale=torch.ones(2))
    ok = dict(masked_m=torch.tensor([8, 1], dtype=torch.int32), group_offsets=None, out_dtype=BF16)
    with pytest.raises(ValueError, match="plan was made for"):
        gg_sim.grouped_gemm(x, w, **ok, scale_mode="rowwise", x_scale=torch.ones(2, 8), w_scale=torch.ones(2, 16),
                            plan=plan_grouped_gemm(masked_m=[8, 1], m_max=8, layout="masked", n=16, k=64,
                                                   dtype=FP8, scale_mode="rowwise", device="ascend910b2"))


@pytest.mark.parametrize("dtype, mode", [(BF16, "none"), (FP8, "rowwise")], ids=["bf16", "fp8"])
def test_kernel_clamps_offsets_past_x(dtype, mode):
    """Offsets past x's rows that got past the host checks (the launch with none, a plan made for
    them): the kernel clamps each group to x's rows, so nothing is read outside x / x_scale / y
    (the simulator faults on any such access) and the rows inside x come out as with offsets
    clamped by hand."""
    gen = torch.Generator().manual_seed(19)
    case = contiguous_case(gen, dtype, mode, [4, 4], N=32, K=64, tail=0)
    bad = torch.tensor([0, 4, 24], dtype=torch.int32)   # x holds 8 rows
    with ascend_sim.use_profile("ascend910b2", cores=2) as prof:
        plan = plan_grouped_gemm(group_offsets=bad, n=32, k=64, dtype=dtype, scale_mode=mode, device=prof)
        y = gg_sim.run_kernel(case["x"], case["w"], group_offsets=bad, masked_m=None, rows=[4, 20],
                              x_scale=case["x_scale"], w_scale=case["w_scale"], out_dtype=BF16, plan=plan,
                              profile=prof)
    expect = ref_grouped_gemm(**case)   # offsets [0, 4, 8]
    assert y.shape == expect.shape
    assert_close_parity(y, expect.to(BF16))


@pytest.mark.parametrize("dtype, mode", [(BF16, "none"), (torch.int8, "rowwise"), (FP8, "blockwise")],
                         ids=["bf16", "int8", "fp8-blockwise"])
def test_estimate_extrapolates_like_a_full_run(dtype, mode):
    """The sliced estimate's slowest-core time matches the cost model on the whole simulated call."""
    G, m, N, K = 6, 32, 512, 256
    gen = torch.Generator().manual_seed(20)
    case = contiguous_case(gen, dtype, mode, [m] * G, N=N, K=K, tail=0)
    with ascend_sim.use_profile("ascend910b2", cores=4) as prof:
        est = gg_sim.estimate_shape([m] * G, n=N, k=K, dtype=dtype, scale_mode=mode, profile=prof)
        dualops.grouped_gemm(**case, backend="ascend_sim")
        full = ascend_sim.last_estimate()
    assert est["method"].startswith("estimate") and "slices" in est["method"]
    for term in ("core_s", "cube_s", "vector_s", "mte_s"):
        assert est["terms"][term] == pytest.approx(full["terms"][term], rel=0.02, abs=1e-8), term


def test_estimate_through_the_backend_hook():
    gen = torch.Generator().manual_seed(21)
    case = contiguous_case(gen, BF16, "none", [16] * 4, N=256, K=128, tail=0)
    est = ascend_sim.estimate("grouped_gemm", case, profile="ascend910b2")
    assert est["seconds"] > 0 and est["bound"] in ("cube", "mte", "hbm", "l2", "launch", "sync", "vector")


def test_bench_sim_estimate_needs_no_full_tensors():
    from dualops.bench import grouped_gemm as bench_gg

    s = bench_gg.normalize({"g": 4, "m": 16, "n": 256, "k": 256, "recipe": "int8_rowwise", "layout": "masked"})
    est = bench_gg.sim_estimate(s, "ascend910b2")
    assert est["seconds"] > 0 and "extrapolated" in est["label"] and "slices" in est["method"]

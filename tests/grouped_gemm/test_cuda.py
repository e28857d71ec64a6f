"""CUDA grouped GEMM against dualops.reference (fp32 accumulation on the same quantized inputs):
empty, one-row and ragged groups, rows past offsets[G] and masked slots past masked_m poisoned
(never read, written as zeros), K and N not multiples of the tile (and K whose rows are not whole
16-byte pieces), masked layouts with masked_m 0 and M_max, every recipe, output dtype and tile M;
argument errors, bad device values (no crash), CUDA-graph capture.

GPU tests skip without an sm_90 GPU and a CUDA build (the packing test runs everywhere)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import dualops
from dualops import native, schema
from dualops.backends.cuda import grouped_gemm as cuda_gg
from dualops.devices import detect
from dualops.parity.builders import nan_tail, poison_value
from dualops.reference import grouped_gemm as ref_gg  # the reference function
from dualops.testing import assert_close_parity
from dualops.tiling.grouped_gemm import plan_grouped_gemm

HAS_CUDA = torch.cuda.is_available() and cuda_gg.status()[0]
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs an sm_90 GPU and dualops._C built with CUDA")

FP8, BF16, FP16, F32 = torch.float8_e4m3fn, torch.bfloat16, torch.float16, torch.float32
RECIPES = [("bf16", BF16, "none"), ("fp16", FP16, "none"), ("fp8_per_tensor", FP8, "per_tensor"),
           ("fp8_rowwise", FP8, "rowwise"), ("fp8_blockwise", FP8, "blockwise"), ("int8_rowwise", torch.int8, "rowwise")]


def test_params_packing_matches_schema():
    vals = dict(x=0x1000, w=0x2000, y=0x3000, masked_m=9, m=1 << 33, n=7, k=9, num_groups=3, m_max=4,
                scale_mode=2, in_dtype=4, out_dtype=2)
    assert cuda_gg.pack_gg_params(**vals) == schema.pack_params("grouped_gemm", **vals)


def _values(dt, *shape, g):
    t = torch.randn(*shape, generator=g)
    if dt == torch.int8:
        return (t * 40).round().clamp(-127, 127).to(torch.int8)
    return (t / 2).to(dt)


def _inputs(recipe, *, sizes=None, masked_m=None, m_max=0, n, k, tail=0, seed=0):
    _, dt, mode = next(r for r in RECIPES if r[0] == recipe)
    g = torch.Generator().manual_seed(seed)
    if masked_m is None:
        G = len(sizes)
        M = sum(sizes) + tail
        lead = (M,)
        x = _values(dt, M, k, g=g)
        if tail:
            x[M - tail:] = poison_value(dt)
        offs = torch.zeros(G + 1, dtype=torch.int32)
        offs[1:] = torch.cumsum(torch.tensor(sizes, dtype=torch.int32), 0)
        kw = dict(group_offsets=offs)
    else:
        G = len(masked_m)
        lead = (G, m_max)
        x = nan_tail(_values(dt, G, m_max, k, g=g), masked_m)
        kw = dict(masked_m=torch.tensor(masked_m, dtype=torch.int32))
    w = _values(dt, G, n, k, g=g)
    kb, nb = -(-k // 128), -(-n // 128)
    if mode == "per_tensor":
        kw.update(x_scale=torch.rand(1, generator=g) + 0.5, w_scale=torch.rand(G, generator=g) + 0.5)
    elif mode == "rowwise":
        s = 1e-3 if dt == torch.int8 else 1.0
        kw.update(x_scale=(torch.rand(*lead, generator=g) + 0.5) * s, w_scale=torch.rand(G, n, generator=g) + 0.5)
    elif mode == "blockwise":
        kw.update(x_scale=torch.rand(*lead, kb, generator=g) + 0.5, w_scale=torch.rand(G, nb, kb, generator=g) + 0.5)
    return dict(x=x, w=w, scale_mode=mode, **kw)


def _cuda(inp):
    return {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}


def _check(inp, out_dtype=BF16, plan=None):
    want = ref_gg(**inp, out_dtype=out_dtype)
    ci = _cuda(inp)
    if plan is None:
        got = dualops.grouped_gemm(**ci, out_dtype=out_dtype, backend="cuda")
    else:
        got = cuda_gg.grouped_gemm(**ci, out_dtype=out_dtype, plan=plan)
    assert got.dtype == out_dtype and got.shape == want.shape
    tol = {}
    if out_dtype == F32:  # fp32 sums in another order: bound by the output's magnitude
        tol = dict(atol=2e-5 * max(1.0, float(want.abs().max())), rtol=1e-4)
    tol = _cutlass_fp8_tolerance(ci, want, out_dtype, plan) or tol
    # the budget of the output dtype (got's dtype) against the unrounded fp32 reference
    assert_close_parity(got.cpu(), want, name=f"y ({inp['scale_mode']})", **tol)
    assert torch.isfinite(got.float()).all()
    return got


def _cutlass_fp8_tolerance(ci, want, out_dtype=BF16, plan=None):
    """The budget of an fp8 call that runs a CUTLASS kernel ({} otherwise): wgmma fp8 sums each
    32-wide K step on the tensor cores with ~14 bits (CUTLASS adds them into fp32 every 128 of K;
    sm90_fast never), so the budget scales with the output."""
    fill = dict(masked_m=None, group_offsets=None, x_scale=None, w_scale=None)
    kernel = cuda_gg.prepare_grouped_gemm(**{**fill, **ci}, out_dtype=out_dtype, plan=plan).kernel
    if kernel == "mma" or ci["x"].dtype != FP8:
        return {}
    return dict(atol=2 ** -6 * max(1.0, float(want.abs().max())), rtol=2 ** -6)


SIZES = [[0, 1, 37, 5, 0, 130], [64], [1, 1, 1], [0, 300, 0]]


@needs_cuda
@pytest.mark.parametrize("recipe", [r[0] for r in RECIPES])
@pytest.mark.parametrize("sizes", SIZES, ids=str)
@pytest.mark.parametrize("nk", [(200, 384), (128, 1000), (72, 48)], ids=str)
def test_contiguous(recipe, sizes, nk):
    n, k = nk
    if recipe == "fp8_blockwise" and k < 128:
        k = 200
    _check(_inputs(recipe, sizes=sizes, n=n, k=k, seed=len(sizes) + n))


@needs_cuda
@pytest.mark.parametrize("recipe", [r[0] for r in RECIPES])
@pytest.mark.parametrize("out_dtype", [BF16, FP16, F32], ids=str)
def test_out_dtypes_and_tail_rows(recipe, out_dtype):
    got = _check(_inputs(recipe, sizes=[3, 0, 20], n=136, k=256, tail=5), out_dtype=out_dtype)
    assert (got[-5:] == 0).all()


@needs_cuda
@pytest.mark.parametrize("recipe", [r[0] for r in RECIPES])
@pytest.mark.parametrize("masked_m", [[0, 40, 17], [40, 40], [0, 0]], ids=str)
def test_masked(recipe, masked_m):
    got = _check(_inputs(recipe, masked_m=masked_m, m_max=40, n=200, k=256))
    for g, c in enumerate(masked_m):
        assert (got[g, c:] == 0).all()


@needs_cuda
@pytest.mark.parametrize("recipe", ["bf16", "fp8_blockwise", "int8_rowwise"])
@pytest.mark.parametrize("avg", [1, 16, 32, 48, 64, 500])
def test_every_tile_m(recipe, avg):
    inp = _inputs(recipe, sizes=[0, 70, 3, 129], n=256, k=512)
    _, dt, mode = next(r for r in RECIPES if r[0] == recipe)
    plan = plan_grouped_gemm([0, 70, 3, 129], n=256, k=512, device=detect(torch.device("cuda")),
                             dtype=dt, scale_mode=mode, expected_m=avg, kernel="mma")  # the own kernel's tile Ms
    _check(inp, plan=plan)


@needs_cuda
def test_odd_k_rows_are_padded():
    _check(_inputs("fp8_rowwise", sizes=[5, 9], n=64, k=136))   # 136 B rows: not whole 16 B pieces
    _check(_inputs("bf16", sizes=[5, 9], n=64, k=60))


@needs_cuda
def test_deepseek_sized_shapes():
    _check(_inputs("fp8_blockwise", sizes=[8] * 4 + [0, 300], n=512, k=7168))
    _check(_inputs("bf16", sizes=[16] * 3, n=4096, k=256))


@needs_cuda
def test_bad_inputs():
    inp = _cuda(_inputs("bf16", sizes=[4, 4], n=64, k=64))
    bad = inp["group_offsets"].clone()
    bad[1] = 6
    bad[2] = 3
    with pytest.raises(ValueError, match="non-decreasing"):
        dualops.grouped_gemm(**{**inp, "group_offsets": bad}, backend="cuda", validate="full")
    with pytest.raises(ValueError, match="exceeds"):
        dualops.grouped_gemm(**{**inp, "group_offsets": torch.tensor([0, 4, 9], dtype=torch.int32, device="cuda")},
                             backend="cuda", validate="full")
    # the same bad values under the default validation (no device read): the kernel clamps them
    # (no fault, finite out); offsets past x's 8 rows compute the rows inside x
    for offs in ([0, 6, 3], [-5, 100, 2], [0, 1 << 30, -7], [0, 4, 9], [0, 4, 1 << 30]):
        y = dualops.grouped_gemm(**{**inp, "group_offsets": torch.tensor(offs, dtype=torch.int32, device="cuda")},
                                 backend="cuda")
        torch.cuda.synchronize()
        assert torch.isfinite(y.float()).all()
        if offs[:2] == [0, 4]:
            torch.testing.assert_close(y, dualops.grouped_gemm(**inp, backend="cuda"))
    m = _cuda(_inputs("fp8_rowwise", masked_m=[3, 4], m_max=8, n=64, k=128))
    with pytest.raises(ValueError, match="masked_m"):
        dualops.grouped_gemm(**{**m, "masked_m": torch.tensor([3, 9], dtype=torch.int32, device="cuda")},
                             backend="cuda", validate="full")
    y = dualops.grouped_gemm(**{**m, "masked_m": torch.tensor([-3, 1 << 30], dtype=torch.int32, device="cuda")},
                             backend="cuda")
    torch.cuda.synchronize()
    assert (y[0] == 0).all()
    with pytest.raises(ValueError, match="w_scale"):
        dualops.grouped_gemm(**{**m, "w_scale": m["w_scale"][:, :32]}, backend="cuda")
    with pytest.raises(ValueError, match="x_scale"):
        dualops.grouped_gemm(**{**m, "x_scale": m["x_scale"][:1]}, backend="cuda")


@needs_cuda
def test_cuda_graph_capture():
    inp = _cuda(_inputs("fp8_blockwise", masked_m=[5, 0, 32], m_max=32, n=256, k=256))
    want = dualops.grouped_gemm(**inp, backend="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        dualops.grouped_gemm(**inp, backend="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = dualops.grouped_gemm(**inp, backend="cuda")
    inp["masked_m"].copy_(torch.tensor([3, 0, 20], dtype=torch.int32))  # no new row is poisoned
    graph.replay()
    torch.cuda.synchronize()
    assert (y[0, 3:] == 0).all() and (y[2, 20:] == 0).all()
    assert torch.equal(y[0, :3], want[0, :3])
    ref = ref_gg(**{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()})
    assert_close_parity(y.cpu(), ref, **_cutlass_fp8_tolerance(inp, ref))


# ---- the CUTLASS sm90 kernels (forced through the plan; the planner sends large groups there)
SM90_OUT = {"bf16": BF16, "fp16": FP16, "fp8_per_tensor": BF16, "fp8_rowwise": BF16, "fp8_blockwise": BF16}
SM90_PAIRS = [("bf16", "sm90"), ("bf16", "sm90_small"), ("fp16", "sm90"), ("fp8_per_tensor", "sm90"),
              ("fp8_per_tensor", "sm90_small"), ("fp8_per_tensor", "sm90_fast"), ("fp8_rowwise", "sm90"),
              ("fp8_rowwise", "sm90_small"), ("fp8_rowwise", "sm90_fast"), ("fp8_blockwise", "sm90"),
              ("bf16", "sm90_mid"), ("fp8_per_tensor", "sm90_mid"), ("fp8_rowwise", "sm90_mid"),
              ("bf16", "sm90:n"), ("fp8_rowwise", "sm90_mid:n"), ("fp8_blockwise", "sm90:n")]
SM90_BUILT = bool(HAS_CUDA and getattr(native.require(), "cuda_gg_sm90_built", False))
needs_sm90 = pytest.mark.skipif(not SM90_BUILT, reason="needs the CUDA build with the CUTLASS headers")


def _sm90_plan(inp, out_dtype, kernel="sm90"):
    """kernel: a CUDA_KERNELS name, `name:n` with the tile scheduler rasterizing along N."""
    kernel, _, raster = kernel.partition(":")
    w = inp["w"]
    kw = dict(group_offsets=inp["group_offsets"]) if "group_offsets" in inp else \
        dict(layout="masked", masked_m=inp["masked_m"], m_max=inp["x"].shape[1])
    plan = plan_grouped_gemm(**kw, n=w.shape[1], k=w.shape[2], device=detect(torch.device("cuda")),
                             dtype=w.dtype, scale_mode=inp["scale_mode"], out_dtype=out_dtype, kernel=kernel)
    return dataclasses.replace(plan, cuda_raster=raster) if raster else plan


def _check_sm90(recipe, inp, kernel):
    out = SM90_OUT[recipe]
    return _check(inp, out_dtype=out, plan=_sm90_plan(inp, out, kernel))


@needs_sm90
@pytest.mark.parametrize("recipe,kernel", SM90_PAIRS, ids=str)
@pytest.mark.parametrize("sizes", SIZES + [[300, 0, 129, 256]], ids=str)
@pytest.mark.parametrize("nk", [(200, 384), (256, 1000), (72, 48)], ids=str)
def test_sm90_contiguous(recipe, kernel, sizes, nk):
    n, k = nk
    if recipe == "fp8_blockwise" and k < 128:
        k = 200
    _check_sm90(recipe, _inputs(recipe, sizes=sizes, n=n, k=k, seed=len(sizes) + n), kernel)


@needs_sm90
@pytest.mark.parametrize("recipe,kernel", SM90_PAIRS, ids=str)
def test_sm90_tail_rows_and_masked(recipe, kernel):
    got = _check_sm90(recipe, _inputs(recipe, sizes=[3, 0, 200], n=136, k=256, tail=5), kernel)
    assert (got[-5:] == 0).all()
    for masked_m in ([0, 40, 17], [40, 40], [0, 0]):
        got = _check_sm90(recipe, _inputs(recipe, masked_m=masked_m, m_max=40, n=200, k=256), kernel)
        for g, c in enumerate(masked_m):
            assert (got[g, c:] == 0).all()


@needs_sm90
def test_sm90_is_the_default_for_large_groups_and_clamps_bad_values():
    inp = _cuda(_inputs("fp8_rowwise", sizes=[512, 512], n=256, k=256))
    launch = cuda_gg.prepare_grouped_gemm(**inp, masked_m=None, out_dtype=BF16, plan=None)
    assert launch.kernel == "sm90"
    _check(_inputs("bf16", sizes=[512, 384, 0], n=256, k=512))
    _check(_inputs("fp8_blockwise", sizes=[512, 384, 0], n=256, k=512))
    plan = _sm90_plan(_inputs("bf16", sizes=[4, 4], n=64, k=64), BF16)
    for offs in ([0, 6, 3], [-5, 100, 2], [0, 1 << 30, -7]):
        inp = _cuda(_inputs("bf16", sizes=[4, 4], n=64, k=64))
        y = cuda_gg.grouped_gemm(**{**inp, "group_offsets": torch.tensor(offs, dtype=torch.int32, device="cuda")},
                                 plan=plan)
        torch.cuda.synchronize()
        assert torch.isfinite(y.float()).all()
    for recipe in ("fp8_rowwise", "fp8_blockwise"):
        m = _inputs(recipe, masked_m=[3, 4], m_max=8, n=64, k=128)
        y = cuda_gg.grouped_gemm(**{**_cuda(m), "masked_m": torch.tensor([-3, 1 << 30], dtype=torch.int32,
                                                                         device="cuda")},
                                 plan=_sm90_plan(m, BF16))
        torch.cuda.synchronize()   # group 1 clamped to M_max rows: its poisoned tail is computed
        assert (y[0] == 0).all() and torch.isfinite(y[1, :4].float()).all()


@needs_sm90
@pytest.mark.parametrize("recipe", ["fp8_rowwise", "fp8_blockwise"])
def test_sm90_cuda_graph_capture(recipe):
    inp = _cuda(_inputs(recipe, masked_m=[5, 0, 32], m_max=32, n=256, k=256))
    plan = _sm90_plan(inp, BF16)
    want = cuda_gg.grouped_gemm(**inp, plan=plan)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        cuda_gg.grouped_gemm(**inp, plan=plan)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = cuda_gg.grouped_gemm(**inp, plan=plan)
    inp["masked_m"].copy_(torch.tensor([3, 0, 20], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    assert (y[0, 3:] == 0).all() and (y[2, 20:] == 0).all()
    assert torch.equal(y[0, :3], want[0, :3])
    ref = ref_gg(**{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()})
    assert_close_parity(y.cpu(), ref, atol=2 ** -6 * max(1.0, float(ref.abs().max())), rtol=2 ** -6)


def test_plan_tile_order_is_checked():
    """A plan's cuda_raster is "m" or "n" (checked before anything runs: no GPU needed)."""
    from dualops import devices

    plan = plan_grouped_gemm([4, 4], n=64, k=64, device=devices.profile("h100"), kernel="sm90")
    x, w = torch.zeros(8, 64, dtype=BF16), torch.zeros(2, 64, 64, dtype=BF16)
    with pytest.raises(ValueError, match="cuda_raster"):
        cuda_gg.GroupedGemmLaunch(x, w, group_offsets=torch.tensor([0, 4, 8], dtype=torch.int32), masked_m=None,
                                  scale_mode="none", x_scale=None, w_scale=None, out_dtype=BF16,
                                  plan=dataclasses.replace(plan, cuda_raster="x"))

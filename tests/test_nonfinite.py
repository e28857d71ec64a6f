"""Non-finite values (docs/values.md) on every op and every backend here that has its kernel.

The reference is the law: each case runs on the backend and on the reference with the same
inputs and must match by the parity method (inf / NaN positions included), and each case's own
check states the semantics directly:
- a NaN in q, in a key a row attends, in pse_shift at an attended key or in a dequant scale
  makes that row's out and lse NaN (a NaN value makes that channel of the row's out NaN);
- +inf / -inf in scores and values act as the reference computes them;
- non-finite values a call never attends (past the length, unused pages, masked keys, invalid
  or cut-off sparse indices, rows past a group's end, weights of empty groups) have no effect;
- split-KV never drops a split that holds a NaN, even one whose merge weight is 0.
A backend without a kernel for the op (or for the variant) is skipped with the reason.
"""
from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

import dualops
from dualops import devices, schema, testing
from dualops.parity.expected import expected_with_budget
from nonfinite_cases import CASES, OUTPUTS, ifa_inputs, mla_inputs

NAN, INF = float("nan"), float("inf")
BACKENDS = ("reference", "ascend_sim", "cuda")

# Kernels that do not follow the semantics in some cases: (op, backend) -> why. An entry marks its cases xfail (KNOWN_ONLY: only the named
# cases; else the propagating ones and KNOWN_NO_EFFECT's).
KNOWN: dict = {}
KNOWN_NO_EFFECT = {"masked_keys"}
KNOWN_ONLY: dict = {}




@functools.lru_cache(maxsize=None)
def _built(op):
    return {c.name: c for c in CASES[op](torch.Generator().manual_seed(7))}


def _case_names(op):
    return list(_built(op))


def _build(op, name):
    return _built(op)[name]


# ----------------------------------------------------------------------------- running


def _skip_reason(op, backend, values):
    st = dualops.backends()[backend]
    if not st["available"]:
        return f"{backend} is not available here: {st['reason']}"
    if dualops.backends.op_module(backend, op) is None:
        return f"{backend} has no {op} kernel yet"
    if backend == "cuda":
        from dualops.backends import cuda

        if op not in cuda.built_ops():
            return f"dualops._C was built without the CUDA {op} kernels (DUALOPS_CUDA_OPS)"
    features = schema.validate(op, dict(values)).features
    return schema.support_reason(op, backend, **features)


def _device(backend):
    return "cuda" if backend == "cuda" else "cpu"


def _to(values, device):
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def _call(op, backend, values):
    vals = _to(values, _device(backend))
    if op == "incre_flash_attention":
        out, lse = dualops.incre_flash_attention(**vals, backend=backend, return_lse=True)
        return {"out": out.cpu(), "lse": lse.cpu()}
    if op == "mla_decode":
        out, lse = dualops.mla_decode(**vals, backend=backend)
        return {"out": out.cpu(), "lse": lse.cpu()}
    return {"y": dualops.grouped_gemm(**vals, backend=backend).cpu()}


def _forced_split_call(op, backend, values, splits):
    """IFA with a plan forced to ``splits`` KV splits, through the backend module (the public API
    always plans itself). MLA plans split long requests by themselves (split_nan_key)."""
    from dualops import ops
    from dualops.tiling.incre_flash_attention import plan_for_tensors

    vals = _to(values, _device(backend))
    kw = ops.ifa_backend_kwargs(schema.validate(op, dict(vals)))
    fn = dualops.backends.implementation(backend, op)[0]
    if backend == "ascend_sim":
        from dualops.backends import ascend_sim

        prof = devices.with_cores(devices.profile("ascend910b2"), 4)
        plan = plan_for_tensors(kw["q"], kw["k_cache"], kw["block_table"], prof)
        # The Ascend kernel splits at kv_tile multiples: the planner's tile, or the largest
        # smaller power-of-two one that gives `splits` splits.
        tile = plan.kv_tile
        while tile > 16 and plan.with_splits(splits, granule=tile).num_splits < splits:
            tile //= 2
        plan = plan.with_splits(splits, granule=tile, kv_tile=tile)
        plan = dataclasses.replace(plan, num_cores=min(4, plan.num_units))
        with ascend_sim.use_profile(prof):
            out, lse = fn(plan=plan, **kw)
    else:
        plan = plan_for_tensors(kw["q"], kw["k_cache"], kw["block_table"], devices.detect(kw["q"].device))
        out, lse = fn(plan=plan.with_splits(splits), **kw)
    assert plan.num_splits > 1, plan.describe()
    return {"out": out.cpu(), "lse": lse.cpu()}


def _check(op, case, got, backend=None):
    expected = _call(op, "reference", case.values)
    budgets = expected_with_budget(op, case.values)[1]
    for name in OUTPUTS[op]:
        tol = testing.LSE_TOLERANCE if name == "lse" else testing.tolerance_for(got[name].dtype)
        if op == "grouped_gemm" and backend == "cuda" and case.values["x"].dtype == torch.float8_e4m3fn:
            # fp8 on the CUDA tensor cores sums with about 14 bits between fp32 promotions
            # (docs/grouped_gemm_cuda.md): bound by 2^-6 of the largest finite output
            ref = expected[name].float()
            peak = float(ref[torch.isfinite(ref)].abs().max()) if torch.isfinite(ref).any() else 1.0
            tol = (2 ** -6 * max(1.0, peak), 2 ** -6, tol[2])
        c = testing.compare(got[name], expected[name], atol=tol[0], rtol=tol[1], cos_eps=tol[2],
                            budget=budgets[name])
        assert c.ok, f"{op}/{case.name} {name} differs from the reference: {c}"
    if case.expect is not None:
        case.expect(got)


def _params():
    out = []
    for op in CASES:
        for name in _case_names(op):
            for backend in BACKENDS:
                marks = []
                case = _build(op, name)
                only = KNOWN_ONLY.get((op, backend))
                if only is not None:
                    if name in only:
                        marks.append(pytest.mark.xfail(reason=KNOWN[(op, backend)], strict=False))
                elif (case.propagates or name in KNOWN_NO_EFFECT) and (op, backend) in KNOWN:
                    marks.append(pytest.mark.xfail(reason=KNOWN[(op, backend)], strict=False))
                out.append(pytest.param(op, name, backend, id=f"{op}-{name}-{backend}", marks=marks))
    return out


@pytest.mark.parametrize("op,name,backend", _params())
def test_nonfinite(op, name, backend):
    case = _build(op, name)
    why = _skip_reason(op, backend, case.values)
    if why:
        pytest.skip(why)
    _check(op, case, _call(op, backend, case.values), backend)


def _split_params():
    out = []
    for name in _case_names("incre_flash_attention"):
        if _build("incre_flash_attention", name).splits:
            for backend in ("ascend_sim", "cuda"):
                out.append(pytest.param(name, backend, id=f"{name}-{backend}"))
    return out


@pytest.mark.parametrize("name,backend", _split_params())
def test_nonfinite_forced_splits(name, backend):
    op = "incre_flash_attention"
    case = _build(op, name)
    why = _skip_reason(op, backend, case.values)
    if why:
        pytest.skip(why)
    _check(op, case, _forced_split_call(op, backend, case.values, case.splits))


@pytest.mark.parametrize("op", ["incre_flash_attention", "mla_decode"])
@pytest.mark.parametrize("scale", [NAN, INF, -1.0, 0.0])
def test_non_finite_softmax_scale_is_refused(op, scale):
    g = torch.Generator().manual_seed(1)
    values = ifa_inputs(g) if op == "incre_flash_attention" else mla_inputs(g)
    with pytest.raises(ValueError, match="softmax_scale"):
        getattr(dualops, op)(**values, softmax_scale=scale, backend="reference")


def test_reference_semantics_hold_on_the_cases():
    """The documented semantics are what the reference computes (the checks above on the
    reference backend); this also keeps every case's expectation honest."""
    for op in CASES:
        for case in CASES[op](torch.Generator().manual_seed(3)):
            got = _call(op, "reference", case.values)
            if case.expect is not None:
                case.expect(got)
            if not case.propagates:
                assert not any(t.isnan().any() for t in got.values()), (op, case.name)

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
from dualops.parity import builders
from dualops.parity.expected import expected_with_budget

NAN, INF = float("nan"), float("inf")
BACKENDS = ("reference", "ascend_sim", "cuda")
BF16 = torch.bfloat16

# Kernels that do not follow the semantics in some cases: (op, backend) -> why. An entry marks its cases xfail (KNOWN_ONLY: only the named
# cases; else the propagating ones and KNOWN_NO_EFFECT's).
KNOWN: dict = {}
KNOWN_NO_EFFECT = {"masked_keys"}
KNOWN_ONLY: dict = {}


@dataclasses.dataclass
class Case:
    name: str
    values: dict
    expect: object = None          # callable(outputs dict) -> None, asserting the semantics
    splits: int = 0                # > 0: also run with a plan forced to this many KV splits
    propagates: bool = True        # the case needs non-finite values to propagate (else: no effect)


# ----------------------------------------------------------------------------- helpers


def _only_nan_rows(out, lse, nan_rows):
    """out [B, S_q, H, D], lse [B, H, S_q]; nan_rows: set of (b, i, h) whose out and lse are NaN;
    every other row finite."""
    B, S_q, H, _ = out.shape
    for b in range(B):
        for i in range(S_q):
            for h in range(H):
                if (b, i, h) in nan_rows:
                    assert out[b, i, h].isnan().all(), f"out row {(b, i, h)} should be NaN"
                    assert lse[b, h, i].isnan(), f"lse row {(b, i, h)} should be NaN"
                else:
                    assert torch.isfinite(out[b, i, h].float()).all(), f"out row {(b, i, h)} should be finite"
                    assert not lse[b, h, i].isnan(), f"lse row {(b, i, h)} should not be NaN"


def _all_finite(outs):
    for name, t in outs.items():
        assert torch.isfinite(t.float()).all(), f"{name} holds non-finite values"


def _randn(g, *shape, dtype=BF16):
    return builders.randn(g, *shape, dtype=dtype)


# ----------------------------------------------------------------------------- IFA cases

B, HQ, HKV, D, S = 2, 4, 2, 64, 128
LENS = (37, 100)


def _ifa(g, *, s_q=1, lens=LENS, s_max=S, h_q=HQ, h_kv=HKV, b=B):
    return dict(q=_randn(g, b, s_q, h_q, D), k_cache=_randn(g, b, s_max, h_kv, D),
                v_cache=_randn(g, b, s_max, h_kv, D), kv_lens=torch.tensor(lens, dtype=torch.int32))


def _heads_of(kvh, h_q=HQ, h_kv=HKV):
    grp = h_q // h_kv
    return range(kvh * grp, (kvh + 1) * grp)


def ifa_cases(g):
    cs = []
    v = _ifa(g)
    v["q"][0, 0, 1, 3] = NAN
    cs.append(Case("nan_q", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, 1)})))

    v = _ifa(g)
    v["k_cache"][1, 20, 0, 5] = NAN                      # attended by b=1's kv head 0
    cs.append(Case("nan_key", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(1, 0, h) for h in _heads_of(0)})))

    v = _ifa(g)
    v["v_cache"][1, 20, 1, 7] = NAN

    def nan_value(o):
        nan = o["out"].isnan()
        assert nan[1, 0, list(_heads_of(1)), 7].all() and int(nan.sum()) == len(_heads_of(1))
        assert not o["lse"].isnan().any()
    cs.append(Case("nan_value", v, nan_value))

    v = _ifa(g)
    v["pse_shift"] = torch.randn(B, HQ, 1, S, generator=g)
    v["pse_shift"][0, 2, 0, 10] = NAN
    cs.append(Case("nan_pse", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, 2)})))

    for which in ("k", "v"):
        v = _ifa(g)
        from dualops import quant
        k8, ks, ko = quant.quantize_kv_int8(v["k_cache"])
        v8, vs, vo = quant.quantize_kv_int8(v["v_cache"])
        v.update(k_cache=k8, v_cache=v8, k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo)
        v[f"{which}_scale"] = v[f"{which}_scale"].clone()
        v[f"{which}_scale"][1, 4] = NAN
        if which == "k":
            exp = (lambda o: _only_nan_rows(o["out"], o["lse"], {(b, 0, h) for b in range(B) for h in _heads_of(1)}))
        else:
            def exp(o):
                assert o["out"][:, 0, list(_heads_of(1)), 4].isnan().all()
                assert not o["lse"].isnan().any()
        cs.append(Case(f"nan_{which}_scale_int8", v, exp))

    v = _ifa(g)
    v["k_cache"][0, 5, 0, :] = INF                       # scores +-inf (q has both signs)
    cs.append(Case("inf_key", v))

    v = _ifa(g)
    v["v_cache"][0, 5, 0, 2] = -INF

    def neg_inf_value(o):
        assert (o["out"][0, 0, list(_heads_of(0)), 2] == -INF).all()
        assert int((~torch.isfinite(o["out"].float())).sum()) == len(_heads_of(0))
    cs.append(Case("neg_inf_value", v, neg_inf_value))

    for sign in (1, -1):
        v = _ifa(g)
        v["pse_shift"] = torch.randn(B, HQ, 1, S, generator=g)
        v["pse_shift"][0, 1, 0, 7] = sign * INF
        cs.append(Case(f"{'pos' if sign > 0 else 'neg'}_inf_pse", v))

    # ---- values a call never attends
    v = _ifa(g)
    for t in ("k_cache", "v_cache"):
        v[t] = builders.nan_tail(v[t], LENS)
        v[t][0, LENS[0] + 3] = INF
    cs.append(Case("past_kv_len", v, _all_finite, propagates=False))

    v = _ifa(g)
    (k, vv), table = builders.page([v["k_cache"], v["v_cache"]], LENS, 16, g)
    v.update(k_cache=k, v_cache=vv, block_table=table)
    cs.append(Case("unused_pages", v, _all_finite, propagates=False))

    v = _ifa(g)
    mask = torch.zeros(B, 1, 1, S, dtype=torch.bool)
    mask[0, ..., [3, 30]] = True
    mask[1, ..., [0, 64, 99]] = True
    for b, keys in ((0, [3, 30]), (1, [0, 64, 99])):
        v["k_cache"][b, keys] = NAN
        v["v_cache"][b, keys] = INF
    v["atten_mask"] = mask
    v["pse_shift"] = torch.randn(B, 1, 1, S, generator=g).masked_fill(mask, NAN)
    cs.append(Case("masked_keys", v, _all_finite, propagates=False))

    v = _ifa(g, s_q=2)
    v["causal"] = True
    v["k_cache"][0, LENS[0] - 1] = NAN                 # only query 1 of request 0 sees the last key
    v["v_cache"][0, LENS[0] - 1] = NAN
    cs.append(Case("causal_hidden_key", v,
                   lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 1, h) for h in range(HQ)})))

    # ---- split-KV: long requests, and plans forced to several splits
    v = _ifa(g, b=1, h_q=4, h_kv=1, s_max=3000, lens=(3000,))
    v["k_cache"][0, 2500, 0, 3] = NAN
    cs.append(Case("split_nan_key", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, h) for h in range(4)}),
                   splits=4))

    v = _ifa(g, b=1, h_q=4, h_kv=1, s_max=3000, lens=(3000,))
    v["q"][0, 0, 2, 0] = NAN
    cs.append(Case("split_nan_q", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, 2)}), splits=4))

    # A split whose keys all sit 1e4 below the others: its merge weight is exactly 0, and one of
    # its values is NaN. 0 * NaN is NaN: the merge must not skip it.
    v = _ifa(g, b=1, h_q=4, h_kv=1, s_max=2048, lens=(2048,))
    pse = torch.zeros(1, 1, 1, 2048)
    pse[..., 1024:1536] = -1e4
    v["pse_shift"] = pse
    v["v_cache"][0, 1100, 0, 9] = NAN

    def zero_weight_split(o):
        nan = o["out"].isnan()
        assert nan[0, 0, :, 9].all() and int(nan.sum()) == 4
        assert not o["lse"].isnan().any()
    cs.append(Case("split_zero_weight_nan_value", v, zero_weight_split, splits=4))
    return cs


# ----------------------------------------------------------------------------- MLA cases

MH, PBS, MLENS = 16, 64, (100, 37)


def _mla(g, *, lens=MLENS, s_q=1, poison=True):
    b = len(lens)
    width = max(-(-max(lens) // PBS), 1)
    logical = _randn(g, b, width * PBS, 1, 576)
    (kv,), table = builders.page([logical], lens, PBS, g) if poison else ((logical.view(-1, PBS, 1, 576),),
                                                                       torch.arange(b * width, dtype=torch.int32).view(b, width))
    return dict(q=_randn(g, b, s_q, MH, 576), kv_cache=kv, block_table=table,
                cache_seqlens=torch.tensor(lens, dtype=torch.int32))


def _token(values, b, pos):
    """(block, slot) of request b's token pos."""
    blk = int(values["block_table"][b, pos // PBS])
    return blk, pos % PBS


def mla_cases(g):
    cs = []
    v = _mla(g)
    v["q"][1, 0, 3, 100] = NAN
    cs.append(Case("nan_q", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(1, 0, 3)})))

    for name, d in (("nan_key_value_part", 7), ("nan_key_rope_part", 540)):
        v = _mla(g)
        blk, slot = _token(v, 0, 70)
        v["kv_cache"][blk, slot, 0, d] = NAN
        cs.append(Case(name, v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, h) for h in range(MH)})))

    v = _mla(g)
    blk, slot = _token(v, 1, 3)
    v["kv_cache"][blk, slot, 0, 11] = INF
    cs.append(Case("inf_key", v))

    v = _mla(g)
    v["attn_sink"] = torch.randn(MH, generator=g)
    v["attn_sink"][5] = NAN

    def nan_sink(o):
        nan = o["out"].isnan()
        assert nan[:, :, 5].all() and int(nan.sum()) == nan[:, :, 5].numel()
        assert not o["lse"].isnan().any()       # the sink scales out; lse is the keys' own
    cs.append(Case("nan_attn_sink", v, nan_sink))

    v = _mla(g)                                         # tail of the last page and unused pages: NaN
    cs.append(Case("past_seqlen_and_unused_pages", v, _all_finite, propagates=False))

    v = _mla(g, s_q=2)
    v["causal"] = True
    blk, slot = _token(v, 1, MLENS[1] - 1)
    v["kv_cache"][blk, slot] = NAN
    cs.append(Case("causal_hidden_key", v,
                   lambda o: _only_nan_rows(o["out"], o["lse"], {(1, 1, h) for h in range(MH)})))

    # sparse: NaN tokens reached only through invalid indices or entries past topk_length
    v = _mla(g, poison=False)
    cap = v["kv_cache"].shape[0] * PBS
    idx = torch.randperm(cap // 2, generator=g)[:2 * 32].view(2, 1, 32).to(torch.int32)
    idx[0, 0, 5] = -1
    idx[1, 0, 9] = builders.INT32_MIN
    idx[0, 0, 30:] = torch.tensor([cap // 2 + 1, cap // 2 + 2], dtype=torch.int32)   # past topk_length
    flat = v["kv_cache"].view(-1, 576)
    flat[cap // 2:] = NAN                                       # only cut-off entries point here
    v.update(indices=idx, topk_length=torch.tensor([30, 32], dtype=torch.int32))
    cs.append(Case("sparse_invalid_and_cut_off", v, _all_finite, propagates=False))

    v = _mla(g, poison=False)
    idx = torch.randperm(cap, generator=g)[:2 * 32].view(2, 1, 32).to(torch.int32)
    v["kv_cache"].view(-1, 576)[int(idx[1, 0, 4])] = NAN
    v["indices"] = idx
    cs.append(Case("sparse_nan_key", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(1, 0, h) for h in range(MH)})))

    v = _mla(g, lens=(4096,))
    blk, slot = _token(v, 0, 3000)
    v["kv_cache"][blk, slot, 0, 300] = NAN
    cs.append(Case("split_nan_key", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, h) for h in range(MH)})))
    return cs


# ----------------------------------------------------------------------------- grouped GEMM cases

OFFS = (0, 5, 5, 12)                 # group 1 empty; rows 12, 13 belong to no group
GN, GK = 128, 128


def _gg(g):
    return dict(x=_randn(g, 14, GK), w=_randn(g, 3, GN, GK), group_offsets=torch.tensor(OFFS, dtype=torch.int32))


def gg_cases(g):
    cs = []
    v = _gg(g)
    v["x"][7, 3] = NAN

    def nan_x(o):
        y = o["y"]
        assert y[7].isnan().all() and int(y.isnan().sum()) == GN
    cs.append(Case("nan_x", v, nan_x))

    v = _gg(g)
    v["w"][2, 9, 100] = NAN

    def nan_w(o):
        y = o["y"]
        assert y[5:12, 9].isnan().all() and int(y.isnan().sum()) == 7
    cs.append(Case("nan_w", v, nan_w))

    v = _gg(g)
    v["x"][0, 1] = INF
    cs.append(Case("inf_x", v))

    v = _gg(g)
    v["x"][12:] = NAN                                # rows of no group
    v["w"][1] = NAN                                  # the empty group's weights

    def unused(o):
        assert torch.isfinite(o["y"][:12].float()).all() and (o["y"][12:] == 0).all()
    cs.append(Case("unused_rows_and_empty_group", v, unused, propagates=False))

    v = dict(x=_randn(g, 3, 8, GK), w=_randn(g, 3, GN, GK), masked_m=torch.tensor([3, 0, 8], dtype=torch.int32))
    v["x"][0, 3:] = NAN
    v["x"][1] = INF
    v["w"][1] = NAN

    def masked(o):
        y = o["y"]
        assert torch.isfinite(y[0, :3].float()).all() and torch.isfinite(y[2].float()).all()
        assert (y[0, 3:] == 0).all() and (y[1] == 0).all()
    cs.append(Case("masked_rows_past_masked_m", v, masked, propagates=False))

    v = _gg(g)
    x8 = v["x"].float().clamp(-4, 4).to(torch.float8_e4m3fn)
    w8 = v["w"].float().clamp(-4, 4).to(torch.float8_e4m3fn)
    xs = torch.rand(14, generator=g) + 0.5
    xs[2] = NAN
    v.update(x=x8, w=w8, scale_mode="rowwise", x_scale=xs, w_scale=torch.rand(3, GN, generator=g) + 0.5)

    def nan_row_scale(o):
        assert o["y"][2].isnan().all() and int(o["y"].isnan().sum()) == GN
    cs.append(Case("nan_x_scale_fp8_rowwise", v, nan_row_scale))
    return cs


CASES = {"incre_flash_attention": ifa_cases, "mla_decode": mla_cases, "grouped_gemm": gg_cases}
OUTPUTS = {"incre_flash_attention": ("out", "lse"), "mla_decode": ("out", "lse"), "grouped_gemm": ("y",)}


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
    values = _ifa(g) if op == "incre_flash_attention" else _mla(g)
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

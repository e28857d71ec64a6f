"""The public ops as ``torch.library`` custom ops (``torch.ops.dualops.*``), registered from the
schema by one generic path. Every call goes through them -- eager calls from ``api.py`` too -- so
the torch profiler shows ``dualops::<op>``, dispatch modes (``TorchDispatchMode``,
``FakeTensorMode``) see the op, and ``torch.compile(fullgraph=True)`` and CUDA-graph capture work.

Each op's argument list is written once, in ``ops/<op>.yaml``: the custom-op schema string, the
eager kernel and the fake implementation are derived from it. The eager kernel (``run``) is the
API layer's one check of a call: schema validation, the given plan against the call, the value
checks (``validate="full"``, or always for a backend whose kernels trust device values), then
dispatch and the backend's prepare / launch (docs/internals.md "What each layer checks"). The
fake implementation validates too (a compiled graph fails early with the same message) and
returns outputs of the right shape.

Eager calls with a signature seen before (same shapes, dtypes, devices, strides and scalars, as
every layer of a decode loop makes) skip validation, dispatch and preparing: the first call's
work is kept per (signature, backend) -- the defaults it filled, the dims and the backend's
prepared launch -- and later calls only check their plan, convert their tensors and launch.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional

import torch

from . import backends, dispatch, schema, tuning

LIB = "dualops"

# The object-kind argument of an op (MLA's plan) travels through the custom op as its packed
# int32 tensor; the plan object it was packed from rides on that tensor (``plan_memo``).
_PLAN_ARG = "plan"


# ----------------------------------------------------------------------------- per-op glue


def _ifa_backend_kwargs(a: dict, d: dict) -> dict:
    """IFA: kv_lens filled, mask / pse_shift broadcast to [B, H_q, S_q, S_kv], scales fp32."""
    q = a["q"]
    B, S_q, H_q = d["B"], d["S_q"], d["H_q"]
    full = (B, H_q, S_q, d["S_kv"])
    kv_lens = a["kv_lens"]
    if kv_lens is None:
        kv_lens = torch.full((B,), d["S_max"], dtype=torch.int32, device=q.device)
    mask = a["atten_mask"]
    if mask is not None:
        mask = mask.expand(full)
    pse = a["pse_shift"]
    if pse is not None:
        pse = pse.to(torch.float32).expand(full)

    def f32(t):
        return None if t is None else t.to(torch.float32).contiguous()

    return dict(q=q, k_cache=a["k_cache"], v_cache=a["v_cache"], kv_lens=kv_lens,
                block_table=a["block_table"], softmax_scale=float(a["softmax_scale"]),
                causal=bool(a["causal"]), atten_mask=mask, pse_shift=pse,
                k_scale=f32(a["k_scale"]), v_scale=f32(a["v_scale"]),
                k_offset=f32(a["k_offset"]), v_offset=f32(a["v_offset"]))


def _plain_kwargs(a: dict, d: dict) -> dict:
    return dict(a)


def plan_memo(packed: torch.Tensor, plan) -> None:
    """Keep ``plan`` on its packed tensor, so a call handed the tensor gets the object back (no
    unpacking per call); an in-place change of the tensor (its ``_version``) drops it."""
    packed._dualops_plan = (packed._version, plan)


def _mla_plan(packed):
    memo = getattr(packed, "_dualops_plan", None)
    if memo is not None and memo[0] == packed._version:
        return memo[1]
    if packed.device.type != "cpu":
        # A packed plan on the GPU that no plan object rides on: the backend reads it there
        # with the call's shapes; reading it here would be a host sync (and break capture).
        return packed
    from .tiling.mla_decode import MlaPlan

    plan = MlaPlan.from_packed(packed)
    plan_memo(packed, plan)
    return plan


def _mla_check_plan(plan, a: dict, d: dict, full: bool) -> None:
    if isinstance(plan, torch.Tensor):
        return  # a bare packed device plan: the backend reads it with the call's own shapes
    from .tiling.mla_decode import check_plan_for_call

    check_plan_for_call(plan, a, d, full=full)


@dataclasses.dataclass(frozen=True)
class OpGlue:
    """What differs between ops on the way from the public call to a backend: how validated
    arguments become the backend's keywords, how a packed plan becomes a plan object and how a
    given plan is checked against the call."""

    backend_kwargs: Callable[[dict, dict], dict] = _plain_kwargs
    plan_from_packed: Optional[Callable] = None
    check_plan: Optional[Callable] = None


GLUE = {
    "incre_flash_attention": OpGlue(backend_kwargs=_ifa_backend_kwargs),
    "mla_decode": OpGlue(plan_from_packed=_mla_plan, check_plan=_mla_check_plan),
    "grouped_gemm": OpGlue(),
}


def ifa_backend_kwargs(v: schema.Validated) -> dict:
    """Validated IFA arguments as the backend interface takes them (docs/internals.md)."""
    return _ifa_backend_kwargs(v.args, v.dims)


# ----------------------------------------------------------------------------- the eager path


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What the first call of a signature on a backend found: the defaults validation filled,
    the dims, modes and features, whether every call runs the value checks, and the launch."""

    filled: dict
    dims: dict
    modes: dict
    features: dict
    value_checks: bool
    launch: Callable


# (signature, backend) -> Prepared
_PREPARED: dict = {}
_PREPARED_MAX = 512
tuning.on_change(_PREPARED.clear)  # prepared launches hold plans made under the overrides in force

_VALIDATE_MODES = ("none", "basic", "full")


def run(op: str, args: tuple, backend: str = "", validate: str = "basic"):
    """The eager kernel of ``torch.ops.dualops.<op>``: ``args`` are the op's schema arguments in
    order (an object argument such as MLA's plan as its packed tensor). ``validate``: "basic"
    (shapes, dtypes, layouts, the plan's shape fields: checked once per signature), "full" (also
    device values: lengths and block ids against the cache, the plan's schedule) or "none" (as
    basic: its checks keep every kernel in bounds and cost nothing after the first call)."""
    key = None
    if validate != "full":
        key = (schema.signature(args, _PLAN_AT.get(op)), backend)
        hit = _PREPARED.get(key) if key[0] is not None else None
        if hit is not None:
            return _launch(op, hit, args)
    if validate not in _VALIDATE_MODES:
        raise ValueError(f"{op}: validate must be 'none', 'basic' or 'full', got {validate!r}")
    values = dict(zip(ARG_NAMES[op], args))
    glue = GLUE[op]
    plan = values.pop(_PLAN_ARG, None) if glue.plan_from_packed is not None else None
    v = schema.validate(op, values)
    name = dispatch.select(op, backend, _device_of(op, v.args), v.features)
    value_checks = validate == "full" or backends.checks_values(name)
    if value_checks:
        schema.check_values(v)
    if plan is not None:
        plan = glue.plan_from_packed(plan)
        glue.check_plan(plan, v.args, v.dims, value_checks)
    kw = glue.backend_kwargs(v.args, v.dims)
    kw.pop(_PLAN_ARG, None)
    launch = backends.prepare(name, op, kw)
    if key is not None and key[0] is not None:
        if len(_PREPARED) >= _PREPARED_MAX:
            _PREPARED.clear()
        _PREPARED[key] = Prepared(schema.filled_defaults(values, v), v.dims, v.modes, v.features,
                                  value_checks, launch)
    return launch(plan=plan, **kw)


def _launch(op: str, hit: Prepared, args: tuple):
    """A call whose signature was prepared: its plan checked against it, its value checks run
    where the backend needs them, then the prepared launch."""
    glue = GLUE[op]
    values = dict(zip(ARG_NAMES[op], args))
    plan = values.pop(_PLAN_ARG, None) if glue.plan_from_packed is not None else None
    if hit.filled:
        values.update(hit.filled)
    if hit.value_checks:
        schema.check_values(schema.Validated(op, values, hit.dims, hit.modes, hit.features))
    if plan is not None:
        plan = glue.plan_from_packed(plan)
        glue.check_plan(plan, values, hit.dims, hit.value_checks)
    return hit.launch(plan=plan, **glue.backend_kwargs(values, hit.dims))


def _device_of(op: str, args: dict):
    first = schema.load(op).args[0].name
    return args[first].device


# ----------------------------------------------------------------------------- custom ops

_TORCH_TYPES = {"tensor": "Tensor", "int": "int", "float": "float", "bool": "bool", "str": "str",
                "dtype": "ScalarType", "object": "Tensor"}


def _schema_string(op: str) -> str:
    parts = []
    for spec in schema.load(op).args:
        typ = _TORCH_TYPES[spec.kind]
        if spec.optional and not (spec.kind in ("bool", "str", "dtype") and "default" in spec.raw):
            typ += "?"
        parts.append(f"{typ} {spec.name}")
    parts += ["str backend", "str validate"]
    outs = schema.load(op).raw["outputs"]
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return f"{op}({', '.join(parts)}) -> {ret}"


def _eager_impl(op: str, n: int, *args):
    return run(op, args[:n], args[n], args[n + 1])


def _output_shape(spec: dict, v: schema.Validated) -> tuple:
    shape = schema.select_by_mode(spec["shape"], v.modes)
    return tuple(d if isinstance(d, int) else v.dims[d] for d in shape)


def _fake_impl(op: str, *args):
    names = ARG_NAMES[op]
    values = dict(zip(names, args[:len(names)]))
    values.pop(_PLAN_ARG, None) if GLUE[op].plan_from_packed is not None else None
    v = schema.validate(op, values)
    first = values[names[0]]
    outs = []
    for spec in schema.load(op).raw["outputs"]:
        dt = spec["dtype"]
        given = v.args.get(dt)
        dtype = (given.dtype if isinstance(given, torch.Tensor) else given
                 if isinstance(given, torch.dtype) else getattr(torch, dt))
        outs.append(first.new_empty(_output_shape(spec, v), dtype=dtype))
    return outs[0] if len(outs) == 1 else tuple(outs)


# Each op's schema arguments in order (read once: torch.compile traces the public wrappers), and
# the position of its plan argument (left out of the call signature: a plan travels per call).
ARG_NAMES = {op: tuple(a.name for a in schema.load(op).args) for op in schema.OPS}
_PLAN_AT = {op: names.index(_PLAN_ARG) for op, names in ARG_NAMES.items() if _PLAN_ARG in names}

_LIBRARY = torch.library.Library(LIB, "DEF")


def _register(op: str) -> None:
    _LIBRARY.define(_schema_string(op))
    kernel = functools.partial(_eager_impl, op, len(ARG_NAMES[op]))
    _LIBRARY.impl(op, kernel, "CompositeExplicitAutograd")
    # NPU tensors (torch_npu's PrivateUse1 key) get the same eager kernel, which picks the npu
    # backend by the tensors' device.
    _LIBRARY.impl(op, kernel, "PrivateUse1")
    torch.library.register_fake(f"{LIB}::{op}", functools.partial(_fake_impl, op), lib=_LIBRARY)


for _op in schema.OPS:
    _register(_op)

# Each op's overload, as api.py calls it (resolved once: an attribute walk per call is ~0.3 us).
OPS = {op: getattr(getattr(torch.ops, LIB), op).default for op in schema.OPS}

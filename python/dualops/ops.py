"""The public ops as ``torch.library`` custom ops (``torch.ops.dualops.*``), registered from the
schema by one generic path, so they work under ``torch.compile(fullgraph=True)`` and CUDA-graph
capture.

Each op's argument list is written once, in ``ops/<op>.yaml``: the custom-op schema string, the
eager implementation and the fake implementation are derived from it. ``run`` is the eager
implementation: it validates against the schema, picks the backend and calls it; the fake
implementation validates too (a compiled graph fails early with the same message) and returns
outputs of the right shape. The public wrappers in ``api.py`` call ``run`` directly in eager mode
(no dispatcher overhead, which matters next to a 10 us decode kernel) and the custom op when
torch.compile traces them.

Eager calls with a signature seen before (same shapes, dtypes, devices, strides and scalars, as
every layer of a decode loop makes) skip validation, dispatch and planning on every backend: the
first call's work is kept per (signature, backend) -- the defaults it filled, the dims and the
backend's prepared launch (``prepare_<op>`` where the backend module has one, else its op
function) -- and later calls only convert their tensors and launch.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional

import torch

from . import backends, dispatch, schema, tuning

LIB = "dualops"

# The object-kind argument of an op (MLA's plan) travels through the custom op as its packed
# int32 tensor; eager calls pass the plan object itself.
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


def _mla_plan(packed):
    if packed.device.type != "cpu":
        # A packed plan on the GPU (made there by the device planner): the backend reads it
        # there; reading it here would be a host sync (and break CUDA-graph capture).
        return packed
    hit = _MLA_PLANS.get(id(packed))
    if hit is not None and hit[0] is packed and hit[1] == packed._version:
        return hit[2]
    from .tiling.mla_decode import MlaPlan

    plan = MlaPlan.from_packed(packed)
    if len(_MLA_PLANS) >= 64:
        _MLA_PLANS.clear()
    _MLA_PLANS[id(packed)] = (packed, packed._version, plan)
    return plan


# Host plans by packed tensor (torch.compile hands every layer's call the same tensor): unpacked
# once per step, not once per call.
_MLA_PLANS: dict = {}


def _mla_check_plan(plan, a: dict, d: dict, full: bool) -> None:
    from .tiling import mla_decode as t

    if not isinstance(plan, t.MlaPlan):
        return  # a plan made on the device: its backend checks it against the call
    check = getattr(t, "check_plan_for_call", None)
    if check is not None:
        check(plan, a, d, full=full)


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

# (signature, backend) -> (filled defaults, dims, launch callable)
_PREPARED: dict = {}
_PREPARED_MAX = 512
tuning.on_change(_PREPARED.clear)  # prepared launches hold plans made under the overrides in force


def _validated(op: str, values: dict, validate: str) -> schema.Validated:
    if validate not in ("none", "basic", "full"):
        raise ValueError(f"{op}: validate must be 'none', 'basic' or 'full', got {validate!r}")
    return schema.validate(op, values, full=(validate == "full"))


def run(op: str, values: dict, backend: str = "", validate: str = "basic"):
    """Validate ``values`` (the op's schema arguments by name, a dict this call may modify; an
    object argument such as MLA's plan may be the plan object or its packed tensor), pick the
    backend and run the op. ``validate``: "basic" (shapes, dtypes, layouts; cached per
    signature), "full" (also device values: lengths and block ids against the cache) or "none"
    (as basic: its checks keep every kernel in bounds and cost nothing after the first call)."""
    glue = GLUE[op]
    plan = values.pop(_PLAN_ARG, None) if glue.plan_from_packed is not None else None
    if validate != "full":
        key = (schema.signature(op, values), backend)
        hit = _PREPARED.get(key)
        if hit is not None:
            filled, dims, launch = hit
            if filled:
                values.update(filled)
            if plan is None:
                return launch(**glue.backend_kwargs(values, dims))
            if isinstance(plan, torch.Tensor):
                plan = glue.plan_from_packed(plan)
            glue.check_plan(plan, values, dims, False)
            return launch(plan=plan, **glue.backend_kwargs(values, dims))
    else:
        key = (None, backend)
    if isinstance(plan, torch.Tensor):
        plan = glue.plan_from_packed(plan)
    v = _validated(op, values, validate)
    name = dispatch.select(op, backend, _device_of(op, v.args), v.features)
    _, prepare = backends.implementation(name, op)
    if plan is not None:
        glue.check_plan(plan, v.args, v.dims, validate == "full")
    kw = glue.backend_kwargs(v.args, v.dims)
    kw.pop(_PLAN_ARG, None)
    # A prepared launch takes the call's plan (an op whose plan travels with the call, MLA) or
    # holds the plan it made (IFA); otherwise the op function takes the call's plan.
    launch = prepare(plan=None, **kw) if prepare is not None else functools.partial(_plain_launch, name, op)
    if key[0] is not None:
        if len(_PREPARED) >= _PREPARED_MAX:
            _PREPARED.clear()
        _PREPARED[key] = (schema.filled_defaults(values, v), v.dims, launch)
    return launch(**kw) if plan is None else launch(plan=plan, **kw)


def _plain_launch(name, op, plan=None, **kw):
    return backends.implementation(name, op)[0](plan=plan, **kw)


def _device_of(op: str, args: dict):
    first = schema.load(op).args[0].name
    return args[first].device


# ----------------------------------------------------------------------------- custom ops

_TORCH_TYPES = {"tensor": "Tensor", "int": "int", "float": "float", "bool": "bool", "str": "str",
                "dtype": "ScalarType", "object": "Tensor"}


def _arg_names(op: str) -> tuple[str, ...]:
    return ARG_NAMES[op]


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


def _eager_impl(op: str, *args):
    names = _arg_names(op)
    values = dict(zip(names, args[:len(names)]))
    backend, validate = args[len(names)], args[len(names) + 1]
    return run(op, values, backend, validate)


def _output_shape(spec: dict, v: schema.Validated) -> tuple:
    shape = schema.select_by_mode(spec["shape"], v.modes)
    return tuple(d if isinstance(d, int) else v.dims[d] for d in shape)


def _fake_impl(op: str, *args):
    names = _arg_names(op)
    values = dict(zip(names, args[:len(names)]))
    values.pop(_PLAN_ARG, None) if GLUE[op].plan_from_packed is not None else None
    v = _validated(op, values, "basic")
    first = values[names[0]]
    outs = []
    for spec in schema.load(op).raw["outputs"]:
        dt = spec["dtype"]
        given = v.args.get(dt)
        dtype = (given.dtype if isinstance(given, torch.Tensor) else given
                 if isinstance(given, torch.dtype) else getattr(torch, dt))
        outs.append(first.new_empty(_output_shape(spec, v), dtype=dtype))
    return outs[0] if len(outs) == 1 else tuple(outs)


# Each op's schema arguments in order (read once: torch.compile traces the public wrappers).
ARG_NAMES = {op: tuple(a.name for a in schema.load(op).args) for op in schema.OPS}

_LIBRARY = torch.library.Library(LIB, "DEF")


def _register(op: str) -> None:
    _LIBRARY.define(_schema_string(op))
    _LIBRARY.impl(op, functools.partial(_eager_impl, op), "CompositeExplicitAutograd")
    # NPU tensors (torch_npu's PrivateUse1 key) get the same eager implementation, which picks
    # the npu backend by the tensors' device.
    _LIBRARY.impl(op, functools.partial(_eager_impl, op), "PrivateUse1")
    torch.library.register_fake(f"{LIB}::{op}", functools.partial(_fake_impl, op), lib=_LIBRARY)


for _op in schema.OPS:
    _register(_op)

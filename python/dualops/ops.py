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
work is kept per (signature, backend) once its launch went through -- the defaults it filled, the
dims and the backend's prepared launch -- and later calls only check their plan, convert their
tensors and launch.
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


def _f32(t):
    return None if t is None else t.to(torch.float32).contiguous()


def _ifa_backend_kwargs(a: dict, d: dict) -> dict:
    """IFA: kv_lens filled, mask / pse_shift broadcast to [B, H_q, S_q, S_kv], scales fp32."""
    kv_lens, mask, pse, k_scale = a["kv_lens"], a["atten_mask"], a["pse_shift"], a["k_scale"]
    if kv_lens is None:
        kv_lens = torch.full((d["B"],), d["S_max"], dtype=torch.int32, device=a["q"].device)
    if mask is not None:
        mask = mask.expand(d["B"], d["H_q"], d["S_q"], d["S_kv"])
    if pse is not None:
        pse = pse.to(torch.float32).expand(d["B"], d["H_q"], d["S_q"], d["S_kv"])
    kw = dict(q=a["q"], k_cache=a["k_cache"], v_cache=a["v_cache"], kv_lens=kv_lens,
              block_table=a["block_table"], softmax_scale=float(a["softmax_scale"]),
              causal=bool(a["causal"]), atten_mask=mask, pse_shift=pse,
              k_scale=None, v_scale=None, k_offset=None, v_offset=None)
    if k_scale is not None:     # a quantized cache
        kw.update(k_scale=_f32(k_scale), v_scale=_f32(a["v_scale"]), k_offset=_f32(a["k_offset"]),
                  v_offset=_f32(a["v_offset"]))
    return kw


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


@dataclasses.dataclass
class Prepared:
    """What the first call of a signature on a backend found: the defaults validation filled,
    the dims, modes and features, whether every call runs the value checks, and the launch.
    ``plan``: the last plan object found to fit this signature (a decode step hands every layer
    the same one: checked once); never set where the value checks run, which read each call's
    lengths."""

    filled: dict
    dims: dict
    modes: dict
    features: dict
    value_checks: bool
    launch: Optional[Callable]      # None: the backend module's op function (``module``)
    module: object
    plan: object = None


# (signature, backend) -> Prepared
_PREPARED: dict = {}
_PREPARED_MAX = 512
tuning.on_change(_PREPARED.clear)  # prepared launches hold plans made under the overrides in force

_VALIDATE_MODES = ("none", "basic", "full")


def _kernel(op: str):
    """The eager kernel of ``torch.ops.dualops.<op>``. A call of a prepared signature has its plan
    checked against the call (once per plan object), its value checks run where the backend needs
    them, and launches; any other goes through ``run``."""
    names, skip, glue = ARG_NAMES[op], _PLAN_AT.get(op), GLUE[op]
    n = len(names)

    def kernel(*args):
        args, backend, validate = args[:n], args[n], args[n + 1]
        if validate == "full":
            return run(op, args, backend, validate)
        key = _key(args, skip, backend)
        hit = _PREPARED.get(key)
        if hit is None:
            return run(op, args, backend, validate, key)
        values = dict(zip(names, args))
        plan = values.pop(_PLAN_ARG) if skip is not None else None
        if hit.filled:
            values.update(hit.filled)
        if hit.value_checks:
            schema.check_values(schema.Validated(op, values, hit.dims, hit.modes, hit.features))
        if plan is not None:
            plan = glue.plan_from_packed(plan)
            if plan is not hit.plan:
                glue.check_plan(plan, values, hit.dims, hit.value_checks)
                if not hit.value_checks:
                    hit.plan = plan
        return (hit.launch or getattr(hit.module, op))(plan=plan, **glue.backend_kwargs(values, hit.dims))

    return kernel


_SCALARS = frozenset((type(None), bool, int, float, str, torch.dtype))


def _key(args: tuple, skip, backend: str) -> tuple:
    """The (signature, backend) key of a call that came through the dispatcher, which fixed each
    argument's type: the shapes, dtypes, devices and strides of its tensors, the values of its
    scalars, whether the plan (at ``skip``) was given. (``schema.signature`` is the general form.)"""
    sig = []
    add = sig.append
    for v in args:
        if v.__class__ in _SCALARS:
            add(v)
        else:
            add((v.shape, v.dtype, v.device, v.stride()))
    if skip is not None:
        sig[skip] = args[skip] is None
    add(backend)
    return tuple(sig)


def run(op: str, args: tuple, backend: str = "", validate: str = "basic", key=None):
    """Validate, dispatch, prepare and launch one call: ``args`` are the op's schema arguments in
    order (an object argument such as MLA's plan as its packed tensor). ``validate``: "basic"
    (shapes, dtypes, layouts, the plan's shape fields: checked once per signature), "full" (also
    device values: lengths and block ids against the cache, the plan's schedule) or "none" (as
    basic: its checks keep every kernel in bounds and cost nothing after the first call).
    ``key``: the call's signature key, under which its prepared launch is kept (None: not kept)."""
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
    module = backends.op_module(name, op)
    result = (launch or getattr(module, op))(plan=plan, **kw)
    if key is not None and validate != "full":  # (kept once the launch went through: a refused call keeps nothing)
        if len(_PREPARED) >= _PREPARED_MAX:
            _PREPARED.clear()
        _PREPARED[key] = Prepared(schema.filled_defaults(values, v), v.dims, v.modes, v.features,
                                  value_checks, launch, module)
    return result


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
    kernel = _kernel(op)
    _LIBRARY.impl(op, kernel, "CompositeExplicitAutograd")
    # NPU tensors (torch_npu's PrivateUse1 key) get the same eager kernel, which picks the npu
    # backend by the tensors' device.
    _LIBRARY.impl(op, kernel, "PrivateUse1")
    torch.library.register_fake(f"{LIB}::{op}", functools.partial(_fake_impl, op), lib=_LIBRARY)


for _op in schema.OPS:
    _register(_op)

# Each op's overload, as api.py calls it (resolved once: an attribute walk per call is ~0.3 us).
OPS = {op: getattr(getattr(torch.ops, LIB), op).default for op in schema.OPS}

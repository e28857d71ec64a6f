"""The op schema: loads ``ops/<op>.yaml`` and derives validation, capability checks, docs and
the packed kernel-params structs from it (one source of truth).

The YAML vocabulary (see ``ops/incre_flash_attention.yaml`` for a full example):

- ``dims``: symbolic dims; ``derived``: dims computed from others (may depend on a mode);
  ``zero_ok``: dims that may be 0 (all others must be >= 1).
- ``modes``: axes of layout variants, each value chosen by a Python expression over the args
  (``block_table is not None``, ``kv_format == 'fp8_v32'``).
- ``args``: in signature order; ``kind`` tensor|float|int|bool|str|dtype|object;
  tensors have ``shape`` (symbols bind, expressions are checked; a dict selects by mode value,
  nested dicts by further axes), ``dtypes`` (list, or dict by mode value), ``same_dtype_as``,
  ``broadcast_to``, ``contiguous`` / ``last_dim_contiguous``; any arg may have ``optional``,
  ``default`` (an expression for floats), ``choices``, ``check`` (expression over ``value``),
  ``required_when`` / ``forbidden_when`` (expressions).
- ``constraints``: expressions over dims, modes and scalar args, with a message template.
- ``features`` + ``capabilities``: variant features computed from the call, and per backend the
  allowed values (list), ranges (``{min, max, multiple_of}``) of each feature.
- ``kernel_params``: the C params struct fields (``ptr``, ``i64``, ``i32``, ``f32``) every backend
  reads; ``backend_kernel_params``: per backend, the fields its kernels alone read, which follow
  the shared ones in that backend's struct (``MlaDecodeCudaParams``).
- ``plan``: the plan contract, shared header, per-backend structs and named codes
  (``dualops.plan_contract``).
"""
from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

OPS = ("incre_flash_attention", "mla_decode", "grouped_gemm")

# DType codes shared with the kernels (ops/include/dualops/enums.h: DType).
DTYPE_CODES = {
    "float32": 0, "float16": 1, "bfloat16": 2, "int8": 3, "float8_e4m3fn": 4,
    "uint8": 5, "int32": 6, "float8_e5m2": 7, "bool": 8,
}

# C type of each kernel-param kind: (struct format char, size, C spelling).
PARAM_TYPES = {
    "ptr": ("Q", 8, "uint64_t"),
    "i64": ("q", 8, "int64_t"),
    "i32": ("i", 4, "int32_t"),
    "f32": ("f", 4, "float"),
}

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _ops_dir() -> Path:
    """The schema files: shipped inside the package when installed, else the repo's ops/."""
    here = Path(__file__).resolve().parent
    for cand in (here / "ops", here.parent.parent / "ops"):
        if (cand / "incre_flash_attention.yaml").exists():
            return cand
    env = os.environ.get("DUALOPS_OPS_DIR")
    if env:
        return Path(env)
    raise FileNotFoundError("dualops: cannot find the op schema files (ops/*.yaml)")


@dataclass(frozen=True)
class ArgSpec:
    name: str
    kind: str
    raw: dict

    @property
    def optional(self) -> bool:
        return bool(self.raw.get("optional", False)) or "default" in self.raw


@dataclass
class OpSchema:
    name: str
    raw: dict
    args: list[ArgSpec] = field(default_factory=list)

    @property
    def doc(self) -> str:
        return self.raw.get("doc", "")

    @property
    def summary(self) -> str:
        return self.raw.get("summary", "")

    def arg(self, name: str) -> ArgSpec:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def kernel_params(self) -> list[tuple[str, str]]:
        return [(p["name"], p["type"]) for p in self.raw.get("kernel_params", [])]

    @property
    def backend_kernel_params(self) -> dict[str, list[tuple[str, str]]]:
        """Per backend, the params fields its kernels alone read (after the shared ones)."""
        return {b: [(p["name"], p["type"]) for p in fields]
                for b, fields in (self.raw.get("backend_kernel_params") or {}).items()}

    @property
    def capabilities(self) -> dict:
        return self.raw.get("capabilities", {})


@functools.lru_cache(maxsize=None)
def load(op: str) -> OpSchema:
    if op not in OPS:
        raise ValueError(f"op: expected one of {OPS}, got {op!r}")
    with open(_ops_dir() / f"{op}.yaml") as f:
        raw = yaml.safe_load(f)
    if raw.get("op") != op:
        raise RuntimeError(f"ops/{op}.yaml declares op {raw.get('op')!r}")
    args = [ArgSpec(a["name"], a["kind"], a) for a in raw["args"]]
    return OpSchema(op, raw, args)


# ----------------------------------------------------------------------------- evaluation


class _TensorView:
    """What schema expressions see of a tensor: its dtype name and shape."""

    def __init__(self, t):
        self.dtype = dtype_name(t.dtype)
        self.shape = tuple(t.shape)


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


_EVAL_ENV = {"__builtins__": {}, "cdiv": lambda a, b: -(-a // b), "isfinite": math.isfinite,
             "min": min, "max": max, "abs": abs, "len": len}


@functools.lru_cache(maxsize=None)
def _compiled(expr: str):
    return compile(expr, f"<schema expr {expr!r}>", "eval")


def _safe_eval(expr, ns: dict):
    if isinstance(expr, (int, float, bool)) or expr is None:
        return expr
    # Expressions come from our own schema files; compiled once, evaluated per call.
    return eval(_compiled(str(expr)), _EVAL_ENV, ns)  # noqa: S307


def select_by_mode(spec, modes: dict):
    """A shape / dtype spec that may be a dict keyed by mode values (nested by further axes)."""
    return _select(spec, modes)


def _select(spec, modes: dict):
    """Pick the entry of a mode-keyed dict (nested dicts select by further axes)."""
    while isinstance(spec, dict):
        for value in modes.values():
            if value in spec:
                spec = spec[value]
                break
        else:
            return None
    return spec


class Bindings:
    """Symbolic dims bound while checking shapes, each remembering where it came from."""

    def __init__(self, op: OpSchema):
        self.op = op
        self.values: dict[str, int] = {}
        self.source: dict[str, str] = {}

    def bind(self, sym: str, value: int, where: str):
        if sym in self.values:
            if self.values[sym] != value:
                raise ValueError(
                    f"{self.op.name}: {where} is {value}, but {sym} is {self.values[sym]} "
                    f"(from {self.source[sym]})")
        else:
            self.values[sym] = value
            self.source[sym] = where


# ----------------------------------------------------------------------------- validation


@dataclass
class Validated:
    """The result of validating one call: args with defaults filled, dims, modes, features."""

    op: str
    args: dict
    dims: dict
    modes: dict
    features: dict

    def namespace(self) -> dict:
        return _namespace(self.args, self.dims, self.modes)


def _namespace(args: dict, dims: dict, modes: dict) -> dict:
    ns = {}
    for k, v in args.items():
        ns[k] = _TensorView(v) if _is_tensor(v) else v
    ns.update(dims)
    ns.update(modes)
    return ns


def _is_tensor(v) -> bool:
    import torch

    return isinstance(v, torch.Tensor)


def _check_kind(op: str, spec: ArgSpec, value):
    import torch

    kind, name = spec.kind, spec.name
    if value is None:
        if not spec.optional:
            raise TypeError(f"{op}: {name} is required")
        return
    ok = {
        "tensor": lambda v: isinstance(v, torch.Tensor),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "dtype": lambda v: isinstance(v, torch.dtype),
        "object": lambda v: True,
    }[kind]
    if not ok(value):
        raise TypeError(f"{op}: {name} must be a {kind}, got {type(value).__name__}")
    choices = spec.raw.get("choices")
    if choices is not None:
        shown = dtype_name(value) if kind == "dtype" else value
        if shown not in choices:
            raise ValueError(f"{op}: {name} must be one of {choices}, got {shown!r}")


def check_kinds(op: str, values: dict) -> None:
    """Only the kinds (tensor / float / bool / ...) of the given arguments: what must hold before
    the values can even reach a torch.library op, whose dispatcher would reject them less clearly."""
    schema = load(op)
    for spec in schema.args:
        if spec.name in values:
            _check_kind(op, spec, values[spec.name])


def filled_defaults(values: dict, v: Validated) -> dict:
    """The arguments validation filled in (given as None or left out, set in ``v``)."""
    return {k: x for k, x in v.args.items() if values.get(k) is None and x is not None}


def validate(op: str, values: dict, *, full: bool = False) -> Validated:
    """Check one call's arguments against the schema; return them with defaults filled.

    Raises TypeError (wrong kind or dtype) or ValueError (shape, range, consistency) naming the
    argument, what was expected and what was given. ``full=True`` also runs the value checks
    (``check_values``)."""
    out = _validate(op, values)
    if full:
        check_values(out)
    return out


def check_values(v: Validated) -> None:
    """The schema's ``full_checks`` of a validated call: they read tensor values (a device sync)."""
    from . import full_checks

    for check in load(v.op).raw.get("full_checks", []):
        getattr(full_checks, check)(v)


def _validate(op: str, values: dict) -> Validated:
    schema = load(op)
    unknown = set(values) - {a.name for a in schema.args}
    if unknown:
        raise TypeError(f"{op}: unexpected argument(s) {sorted(unknown)}")
    args = {a.name: values.get(a.name) for a in schema.args}
    for spec in schema.args:
        if args[spec.name] is None and "default" in spec.raw and spec.kind != "float":
            d = spec.raw["default"]
            if spec.kind == "dtype":
                import torch

                d = getattr(torch, d)
            args[spec.name] = d
        _check_kind(op, spec, args[spec.name])

    # Modes: each axis takes the value whose condition holds.
    modes = {}
    ns0 = _namespace(args, {}, {})
    for axis, options in schema.raw.get("modes", {}).items():
        hit = [value for value, cond in options.items() if _safe_eval(cond, ns0)]
        if len(hit) != 1:
            raise ValueError(f"{op}: cannot tell the {axis} from the arguments")
        modes[axis] = hit[0]

    # Presence rules that need only the modes fail before any shape is looked at.
    ns_modes = {**ns0, **modes}
    for spec in schema.args:
        try:
            _check_presence(op, spec, args[spec.name], ns_modes)
        except (NameError, AttributeError):
            pass  # the rule needs dims or features: checked below

    # Tensors: dtype, rank, shape binding, device, layout.
    b = Bindings(schema)
    device = None
    derived = schema.raw.get("derived", {})
    for spec in schema.args:
        t = args[spec.name]
        if spec.kind != "tensor" or t is None:
            continue
        name = spec.name
        dtypes = _select(spec.raw.get("dtypes"), modes)
        if "same_dtype_as" in spec.raw:
            other = args[spec.raw["same_dtype_as"]]
            if other is not None and t.dtype != other.dtype:
                raise TypeError(f"{op}: {name} must have the dtype of {spec.raw['same_dtype_as']} "
                                f"({dtype_name(other.dtype)}), got {dtype_name(t.dtype)}")
        elif dtypes is not None and dtype_name(t.dtype) not in dtypes:
            ctx = ", ".join(f"{k}={v}" for k, v in modes.items())
            raise TypeError(f"{op}: {name} dtype must be one of {dtypes} ({ctx}), "
                            f"got {dtype_name(t.dtype)}")
        if device is None:
            device = t.device
        elif t.device != device:
            raise ValueError(f"{op}: {name} is on {t.device}, but the other tensors are on {device}")
        shape = _select(spec.raw.get("shape"), modes)
        if shape is not None:
            if t.dim() != len(shape):
                ctx = ", ".join(f"{k}={v}" for k, v in modes.items())
                raise ValueError(f"{op}: {name} must have {len(shape)} dims {list(shape)} ({ctx}), "
                                 f"got shape {list(t.shape)}")
            for i, sym in enumerate(shape):
                where = f"{name}.shape[{i}]"
                size = int(t.shape[i])
                if isinstance(sym, int):
                    if size != sym:
                        raise ValueError(f"{op}: {where} must be {sym}, got {size}")
                elif _IDENT.match(sym) and sym not in derived:
                    b.bind(sym, size, where)
                else:
                    expr = _select(derived.get(sym, sym), modes) if sym in derived else sym
                    want = _safe_eval(expr, {**b.values, **modes})
                    if size != want:
                        raise ValueError(f"{op}: {where} must be {sym} = {want}, got {size}")
        if spec.raw.get("contiguous") and not t.is_contiguous():
            raise ValueError(f"{op}: {name} must be contiguous")
        if spec.raw.get("last_dim_contiguous") and t.dim() and t.stride(-1) != 1 and t.shape[-1] > 1:
            raise ValueError(f"{op}: {name} must have a contiguous last dim (stride 1), "
                             f"got strides {list(t.stride())}")
    zero_ok = set(schema.raw.get("zero_ok", []))
    for sym, v in b.values.items():
        if v < (0 if sym in zero_ok else 1):
            raise ValueError(f"{op}: {sym} ({b.source[sym]}) must be >= "
                             f"{0 if sym in zero_ok else 1}, got {v}")
    dims = dict(b.values)
    for sym, expr in derived.items():
        expr = _select(expr, modes)
        try:
            dims[sym] = _safe_eval(expr, {**dims, **modes})
        except NameError:
            pass  # depends on a dim of an absent optional tensor

    ns = _namespace(args, dims, modes)
    features = {k: _safe_eval(expr, ns) for k, expr in schema.raw.get("features", {}).items()}
    ns.update({k: v for k, v in features.items() if k not in ns})
    for spec in schema.args:  # presence rules, defaults, scalar checks
        v = args[spec.name]
        _check_presence(op, spec, v, ns)
        if v is None and spec.kind == "float" and "default" in spec.raw:
            v = args[spec.name] = float(_safe_eval(spec.raw["default"], ns))
            ns[spec.name] = v
        if v is not None and "check" in spec.raw and spec.kind != "tensor":
            if not _safe_eval(spec.raw["check"], {**ns, "value": v}):
                raise ValueError(f"{op}: {spec.name} must satisfy {spec.raw['check']}, got {v!r}")
        target = spec.raw.get("broadcast_to")
        if v is not None and target is not None:
            full_shape = [int(_safe_eval(s, ns)) for s in target]
            if v.dim() > len(full_shape) or any(
                    s not in (1, f) for s, f in zip(reversed(v.shape), reversed(full_shape))):
                raise ValueError(f"{op}: {spec.name} of shape {list(v.shape)} does not broadcast to "
                                 f"{[str(s) for s in target]} = {full_shape}")
    for c in schema.raw.get("constraints", []) or []:
        if not _safe_eval(c["expr"], ns):
            raise ValueError(f"{op}: " + c["message"].format(**ns))
    return Validated(op, args, dims, modes, features)


def _check_presence(op, spec: ArgSpec, value, ns):
    if value is None and "required_when" in spec.raw and _safe_eval(spec.raw["required_when"], ns):
        raise ValueError(f"{op}: {spec.name} is required when {spec.raw['required_when']}")
    if value is not None and "forbidden_when" in spec.raw and _safe_eval(spec.raw["forbidden_when"], ns):
        raise ValueError(f"{op}: {spec.name} must not be given when {spec.raw['forbidden_when']}")


# ----------------------------------------------------------------------------- capabilities


def _feature_ok(rule, value) -> bool:
    if isinstance(rule, list):
        return value in rule
    if isinstance(rule, dict):
        if "min" in rule and value < rule["min"]:
            return False
        if "max" in rule and value > rule["max"]:
            return False
        if rule.get("multiple_of") and value and value % rule["multiple_of"]:
            return False
        return True
    return value == rule


def support_reason(op: str, backend: str, **variant) -> str | None:
    try:
        return _support_reason_cached(op, backend, tuple(variant.items()))
    except TypeError:  # an unhashable feature value
        return _support_reason(op, backend, **variant)


@functools.lru_cache(maxsize=4096)
def _support_reason_cached(op: str, backend: str, variant: tuple) -> str | None:
    return _support_reason(op, backend, **dict(variant))


def _support_reason(op: str, backend: str, **variant) -> str | None:
    """None when ``backend`` implements ``op`` for this variant, else the reason why not."""
    schema = load(op)
    caps = schema.capabilities
    if backend not in caps:
        return f"{op} is not implemented on backend {backend!r} (implemented on: {sorted(caps)})"
    known = set(schema.raw.get("features", {}))
    for feat, value in variant.items():
        if feat not in known:
            raise ValueError(f"supports: unknown feature {feat!r} for {op}; known: {sorted(known)}")
        rule = caps[backend].get(feat)
        if rule is not None and value is not None and not _feature_ok(rule, value):
            return f"{op} on backend {backend!r} does not support {feat}={value!r} (supported: {rule})"
    return None


def supports(op: str, backend: str, **variant) -> bool:
    """Whether ``backend`` implements ``op`` for the given variant features (schema ``features``)."""
    return support_reason(op, backend, **variant) is None


# ----------------------------------------------------------------------------- kernel params


# The kernel params structs derived from `kernel_params` (python/dualops/kernel_params.py).
from .kernel_params import (dtype_code, pack_params, params_layout, params_size,  # noqa: E402,F401
                            params_struct_name)

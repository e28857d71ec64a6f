"""The plan contract of each op: the ``plan:`` section of ``ops/<op>.yaml`` (docs/internals.md
"Plan contract").

It names, once for both backends,

- the shared plan header (``header``: shape-only fields every backend reads, in packing order;
  the planner's plan class packs them, ``codegen`` makes the C struct ``dualops::<Op>Tiling``);
- the per-backend structs (``backends``): fields one backend alone reads, either appended to the
  shared header (``placement: extends``: a C struct derived from the header struct, packed right
  after it) or in a struct of their own before the plan (``placement: before``);
- the named codes (``enums``) the plan and params fields hold, generated into
  ``ops/include/dualops/enums.h`` with the DType codes of ``schema.DTYPE_CODES``.

Python reads the same names here (``enum(op, key)``) instead of repeating the integers.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from . import schema

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
PLACEMENTS = ("extends", "before")


@dataclass(frozen=True)
class EnumSpec:
    key: str                     # the op-local name (``kv_format``)
    struct: str                  # the C name (``MlaKvFormat``)
    doc: str
    codes: dict                  # value name -> int


@dataclass(frozen=True)
class StructSpec:
    struct: str
    doc: str
    fields: dict                 # field -> doc, in packing order (all int32)
    version: int | None = None
    placement: str | None = None  # backend structs: PLACEMENTS


@dataclass(frozen=True)
class PlanSpec:
    op: str
    header: StructSpec
    enums: dict                  # key -> EnumSpec
    backends: dict               # backend -> StructSpec


def _struct(where: str, raw: dict, fields_key: str, *, backend: bool) -> StructSpec:
    fields = raw.get(fields_key) or {}
    if not isinstance(fields, dict) or not fields:
        raise RuntimeError(f"{where}: `{fields_key}` must map field names to docs")
    placement = raw.get("placement")
    if backend and placement not in PLACEMENTS:
        raise RuntimeError(f"{where}: placement must be one of {PLACEMENTS}, got {placement!r}")
    return StructSpec(raw["struct"], str(raw.get("doc", "")), {str(k): str(v or "") for k, v in fields.items()},
                      raw.get("version"), placement)


@functools.lru_cache(maxsize=None)
def spec(op: str) -> PlanSpec:
    raw = schema.load(op).raw.get("plan")
    if raw is None:
        raise RuntimeError(f"ops/{op}.yaml has no plan: section")
    enums = {}
    for key, e in (raw.get("enums") or {}).items():
        vals = e["values"]
        codes = dict(vals) if isinstance(vals, dict) else {v: i for i, v in enumerate(vals)}
        enums[key] = EnumSpec(key, e["struct"], str(e.get("doc", "")), codes)
    header = _struct(f"ops/{op}.yaml plan", raw, "header", backend=False)
    backends = {name: _struct(f"ops/{op}.yaml plan.backends.{name}", b, "fields", backend=True)
                for name, b in (raw.get("backends") or {}).items()}
    for name, b in backends.items():
        if b.placement == "extends" and set(b.fields) & set(header.fields):
            raise RuntimeError(f"ops/{op}.yaml plan.backends.{name} repeats header fields")
    return PlanSpec(op, header, enums, backends)


def enum(op: str, key: str) -> dict:
    """Codes of the op's named enum ``key`` (value name -> int)."""
    return dict(spec(op).enums[key].codes)


def header_fields(op: str) -> tuple:
    return tuple(spec(op).header.fields)


def version(op: str) -> int:
    return int(spec(op).header.version)


def backend_fields(op: str, backend: str) -> tuple:
    return tuple(spec(op).backends[backend].fields)


def pack_struct(op: str, backend: str, **values) -> list:
    """The int32 fields of the op's ``backend`` struct, in order; every field must be given (the
    struct's version is filled in when it has one). Unknown names and values that do not fit
    int32 raise ValueError."""
    st = spec(op).backends[backend]
    if st.version is not None:
        values.setdefault("version", st.version)
    names = tuple(st.fields)
    unknown, missing = set(values) - set(names), [n for n in names if n not in values]
    if unknown or missing:
        raise ValueError(f"{st.struct}: unknown field(s) {sorted(unknown)}, missing {missing}")
    out = [int(values[n]) for n in names]
    for n, v in zip(names, out):
        if not INT32_MIN <= v <= INT32_MAX:
            raise ValueError(f"{st.struct}.{n} = {v} does not fit in int32")
    return out


def all_enums() -> list:
    """(C name, doc, codes) of every generated enum: DType first, then each op's."""
    out = [("DType", "dtype codes of the params and plan fields (dualops.schema.DTYPE_CODES)",
            dict(schema.DTYPE_CODES))]
    for op in schema.OPS:
        out += [(e.struct, e.doc, dict(e.codes)) for e in spec(op).enums.values()]
    return out

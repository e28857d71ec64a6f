"""The packed kernel-params structs derived from each op's ``kernel_params`` in ``ops/<op>.yaml``
(C natural alignment, the layout of ops/include/dualops/params.h), and the dtype codes shared with
the kernels. Re-exported by ``dualops.schema``.

``backend``: a backend with fields of its own (``backend_kernel_params``: MLA decode's ``cuda``)
packs ``<Op><Backend>Params``, the shared fields then its own, laid out as one flat struct; every
other backend (and ``backend=None``) packs the shared ``<Op>Params``."""
from __future__ import annotations

import struct

from .schema import DTYPE_CODES, PARAM_TYPES, dtype_name, load


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("_"))


def backend_fields(op: str, backend: str | None) -> list[tuple[str, str]]:
    """The fields only ``backend``'s kernels read (none for a backend the schema does not name)."""
    return load(op).backend_kernel_params.get(backend, []) if backend else []


def params_struct_name(op: str, backend: str | None = None) -> str:
    """The C struct a backend's kernels take: ``MlaDecodeCudaParams``, else ``MlaDecodeParams``."""
    own = backend_fields(op, backend)
    return _camel(op) + (_camel(backend) if own else "") + "Params"


def params_layout(op: str, backend: str | None = None) -> list[tuple[str, str, int]]:
    """(name, type, byte offset) of each kernel-params field, C natural alignment."""
    out, off = [], 0
    for name, typ in load(op).kernel_params + backend_fields(op, backend):
        size = PARAM_TYPES[typ][1]
        off = (off + size - 1) // size * size
        out.append((name, typ, off))
        off += size
    return out


def params_size(op: str, backend: str | None = None) -> int:
    lay = params_layout(op, backend)
    if not lay:
        return 0
    end = lay[-1][2] + PARAM_TYPES[lay[-1][1]][1]
    return (end + 7) // 8 * 8


def pack_params(op: str, backend: str | None = None, **values) -> bytes:
    """Pack the op's kernel params struct for ``backend``; fields not given are 0. Unknown names
    (a field of another backend's struct included) raise."""
    lay = params_layout(op, backend)
    names = {n for n, _, _ in lay}
    unknown = set(values) - names
    if unknown:
        raise ValueError(f"pack_params({op}, {backend}): unknown field(s) {sorted(unknown)}")
    buf = bytearray(params_size(op, backend))
    for name, typ, off in lay:
        v = values.get(name, 0)
        if typ == "ptr" and v is None:
            v = 0
        if typ in ("i64", "i32", "ptr"):
            v = int(v)
        struct.pack_into("<" + PARAM_TYPES[typ][0], buf, off, v)
    return bytes(buf)


def dtype_code(dtype) -> int:
    return DTYPE_CODES[dtype_name(dtype)]

"""The packed kernel-params structs derived from each op's ``kernel_params`` in ``ops/<op>.yaml``
(C natural alignment, the layout of ops/include/dualops/params.h), and the dtype codes shared with
the kernels. Re-exported by ``dualops.schema``."""
from __future__ import annotations

import struct

from .schema import DTYPE_CODES, PARAM_TYPES, dtype_name, load


def params_layout(op: str) -> list[tuple[str, str, int]]:
    """(name, type, byte offset) of each kernel-params field, C natural alignment."""
    out, off = [], 0
    for name, typ in load(op).kernel_params:
        size = PARAM_TYPES[typ][1]
        off = (off + size - 1) // size * size
        out.append((name, typ, off))
        off += size
    return out


def params_size(op: str) -> int:
    lay = params_layout(op)
    if not lay:
        return 0
    end = lay[-1][2] + PARAM_TYPES[lay[-1][1]][1]
    return (end + 7) // 8 * 8


def pack_params(op: str, **values) -> bytes:
    """Pack the op's kernel params struct; fields not given are 0. Unknown names raise."""
    lay = params_layout(op)
    names = {n for n, _, _ in lay}
    unknown = set(values) - names
    if unknown:
        raise ValueError(f"pack_params({op}): unknown field(s) {sorted(unknown)}")
    buf = bytearray(params_size(op))
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

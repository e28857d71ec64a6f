"""Glue shared by the CUDA op modules: packed params structs, pointers, strides, the stream."""
from __future__ import annotations

import functools
import struct

import torch

from ... import schema


@functools.lru_cache(maxsize=None)
def params_struct(op: str) -> tuple[struct.Struct, tuple[str, ...]]:
    """One struct.Struct for the op's params (same bytes as schema.pack_params, built once:
    packing runs on every call) and the field names in order."""
    fmt, pos, names = "<", 0, []
    for name, typ, off in schema.params_layout(op):
        fmt += "x" * (off - pos) + schema.PARAM_TYPES[typ][0]
        pos = off + schema.PARAM_TYPES[typ][1]
        names.append(name)
    fmt += "x" * (schema.params_size(op) - pos)
    return struct.Struct(fmt), tuple(names)


def fields_template(op: str, **values) -> list:
    """The params struct's fields in order: ``values`` set, every other field 0."""
    names = params_struct(op)[1]
    unknown = set(values) - set(names)
    if unknown:
        raise ValueError(f"pack_params({op}): unknown field(s) {sorted(unknown)}")
    return [values.get(n, 0) or 0 for n in names]


def pack_params(op: str, **values) -> bytes:
    """Fast equivalent of ``schema.pack_params(op, **values)``."""
    return params_struct(op)[0].pack(*fields_template(op, **values))


@functools.lru_cache(maxsize=None)
def ptr_head(op: str, fields: tuple[str, ...]) -> struct.Struct:
    """The struct's leading pointer fields, packed per call (the rest is packed once); the schema
    must keep them first, in this order."""
    names = params_struct(op)[1]
    if names[:len(fields)] != fields:
        raise RuntimeError(f"{op} kernel_params must start with the pointers {fields}, got {names}")
    return struct.Struct("<" + "Q" * len(fields))


def ptr(t) -> int:
    return 0 if t is None else t.data_ptr()


def strides4(t):
    return (0, 0, 0, 0) if t is None else tuple(int(s) for s in t.stride())


def f32(t, dev):
    """t as a contiguous fp32 tensor on dev (t itself when it already is one)."""
    if t is None or (t.dtype == torch.float32 and t.is_contiguous() and t.device == dev):
        return t
    return t.to(device=dev, dtype=torch.float32).contiguous()


# The current stream as a raw cudaStream_t, without building a torch.cuda.Stream object
# (~2 us of host time per call); the public API where this torch lacks the private one.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream(dev_index: int) -> int:
    if _RAW_STREAM is not None:
        return _RAW_STREAM(dev_index)
    return torch.cuda.current_stream(dev_index).cuda_stream

"""Glue shared by the CUDA op modules: packed params structs, pointers, strides, the stream."""
from __future__ import annotations

import functools
import struct

import torch

from ... import schema


@functools.lru_cache(maxsize=None)
def params_struct(op: str) -> tuple[struct.Struct, tuple[str, ...]]:
    """One struct.Struct for the op's CUDA params (``<Op>CudaParams`` where the op has CUDA-only
    fields, else the shared struct; same bytes as ``schema.pack_params(op, "cuda")``, built once:
    packing runs on every call) and the field names in order."""
    fmt, pos, names = "<", 0, []
    for name, typ, off in schema.params_layout(op, "cuda"):
        fmt += "x" * (off - pos) + schema.PARAM_TYPES[typ][0]
        pos = off + schema.PARAM_TYPES[typ][1]
        names.append(name)
    fmt += "x" * (schema.params_size(op, "cuda") - pos)
    return struct.Struct(fmt), tuple(names)


def fields_template(op: str, **values) -> list:
    """The params struct's fields in order: ``values`` set, every other field 0."""
    names = params_struct(op)[1]
    unknown = set(values) - set(names)
    if unknown:
        raise ValueError(f"pack_params({op}): unknown field(s) {sorted(unknown)}")
    return [values.get(n, 0) or 0 for n in names]


def pack_params(op: str, **values) -> bytes:
    """Fast equivalent of ``schema.pack_params(op, "cuda", **values)``."""
    return params_struct(op)[0].pack(*fields_template(op, **values))


@functools.lru_cache(maxsize=None)
def ptr_head(op: str, fields: tuple[str, ...]) -> struct.Struct:
    """The struct's leading pointer fields, packed per call (the rest is packed once); the schema
    must keep them first, in this order."""
    run, offset = ptr_run(op, fields)
    if offset != 0:
        raise RuntimeError(f"{op} CUDA params must start with the pointers {fields}")
    return run


@functools.lru_cache(maxsize=None)
def ptr_run(op: str, fields: tuple[str, ...]) -> tuple[struct.Struct, int]:
    """(packer, byte offset) of pointer fields packed per call that follow each other in the
    CUDA params struct, in this order (the schema must keep them so; the rest is packed once)."""
    lay = schema.params_layout(op, "cuda")
    first = next((i for i, (n, _, _) in enumerate(lay) if n == fields[0]), None)
    run = lay[first:first + len(fields)] if first is not None else []
    if [(n, t) for n, t, _ in run] != [(f, "ptr") for f in fields] or \
            any(o != run[0][2] + 8 * i for i, (_, _, o) in enumerate(run)):
        raise RuntimeError(f"{op} CUDA params must hold the pointers {fields} in a row, "
                           f"got {[n for n, _, _ in lay]}")
    return struct.Struct("<" + "Q" * len(fields)), run[0][2]


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


class MergeCounters:
    """Zeroed int32 arrival counters of in-kernel split merges, one buffer per (device, stream):
    the kernels leave them all zeros after every call, and calls on different streams never share
    one. ``in_capture``: a stream that has no buffer yet gets one inside a CUDA-graph capture too
    (from the graph's pool; its zero fill is a node of the graph, run at every replay before the
    graph's first call); otherwise ``get`` answers 0 there (no counters: the caller merges with
    its combine kernel). A buffer too small is replaced by a bigger one; the old one stays alive,
    since a graph captured earlier may read it."""

    def __init__(self, *, in_capture: bool):
        self.in_capture = in_capture
        self.buffers: dict[tuple[int, int], torch.Tensor] = {}
        self.retired: list[torch.Tensor] = []

    def get(self, dev, stream: int, n: int) -> int:
        """Device address of at least `n` zeroed counters for `stream` on `dev`, or 0."""
        key = (dev.index, stream)
        buf = self.buffers.get(key)
        if buf is None or buf.numel() < n:
            if buf is None and not self.in_capture and torch.cuda.is_current_stream_capturing():
                return 0
            if buf is not None:
                self.retired.append(buf)
            size = max(n, 1024, 2 * buf.numel() if buf is not None else 0)
            buf = self.buffers[key] = torch.zeros(size, dtype=torch.int32, device=dev)
        return buf.data_ptr()

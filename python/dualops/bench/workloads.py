"""The per-op bench modules and the protocol they follow.

An op bench module (``bench/mla_decode.py``, ``bench/grouped_gemm.py``, and for IFA
``bench/incre_flash_attention.py`` when it provides the protocol, else ``bench/ifa_workload.py``)
defines:

    OP: str                              the op name
    KEYS: dict[str, object]              bench shape keys and their defaults (``--shape`` vocabulary)
    normalize(shape) -> dict             defaults filled, values checked (ValueError naming the key)
    label(shape) -> str                  short unique name of a config
    flops(shape) -> float                useful FLOPs of one call
    bytes_moved(shape) -> float          minimum HBM traffic of one call (inputs read once + outputs)
    build(shape, device, generator) -> dict
                                         fresh random public-API kwargs on ``device`` (never zeros;
                                         plans made here, outside any timed region)
    call(inputs, backend) -> callable    a no-argument closure running the public op
    peers(shape, inputs) -> dict[str, callable]
                                         other implementations of the same call available here
                                         (torch SDPA, torch._grouped_mm, flash_mla, torch_npu...),
                                         layouts converted here, outside the timed region; a peer
                                         that cannot run maps to a string saying why
"""
from __future__ import annotations

import importlib

_PROTOCOL = ("OP", "KEYS", "normalize", "label", "flops", "bytes_moved", "build", "call", "peers")
_MODULES = {"incre_flash_attention": ("incre_flash_attention", "ifa_workload"),
            "mla_decode": ("mla_decode",), "grouped_gemm": ("grouped_gemm",)}


def module(op: str):
    """The bench module of ``op``: the first candidate that exists and follows the protocol."""
    if op not in _MODULES:
        raise ValueError(f"op must be one of {sorted(_MODULES)}, got {op!r}")
    for name in _MODULES[op]:
        try:
            mod = importlib.import_module(f"{__package__}.{name}")
        except ImportError:
            continue
        if all(hasattr(mod, a) for a in _PROTOCOL):
            return mod
    raise RuntimeError(f"no bench module for {op} follows the protocol of dualops.bench.workloads")


def normalize(keys: dict, shape: dict, op: str) -> dict:
    """Fill defaults from ``keys`` and check each value's type against its default's."""
    unknown = set(shape) - set(keys)
    if unknown:
        raise ValueError(f"{op} bench shape: unknown key(s) {sorted(unknown)}; known: {', '.join(keys)}")
    out = dict(keys)
    for k, v in shape.items():
        want = type(keys[k])
        if want is bool and not isinstance(v, bool):
            raise ValueError(f"{op} bench shape: {k} must be true/false, got {v!r}")
        if want is int and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"{op} bench shape: {k} must be a non-negative int, got {v!r}")
        if want is str and not isinstance(v, str):
            raise ValueError(f"{op} bench shape: {k} must be a string, got {v!r}")
        out[k] = v
    return out


def choice(op: str, key: str, value, choices):
    if value not in choices:
        raise ValueError(f"{op} bench shape: {key} must be one of {list(choices)}, got {value!r}")
    return value


def positive(op: str, shape: dict, *keys):
    for k in keys:
        if shape[k] < 1:
            raise ValueError(f"{op} bench shape: {k} must be >= 1, got {shape[k]}")

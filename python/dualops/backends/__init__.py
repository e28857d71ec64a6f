"""Backends: one module each (reference, cuda, ascend_sim, npu), all with the interface of
docs/internals.md. Modules are imported lazily so a missing toolchain never breaks import."""
from __future__ import annotations

import importlib

NAMES = ("reference", "cuda", "ascend_sim", "npu")


def module(name: str):
    if name not in NAMES:
        raise ValueError(f"backend: expected one of {NAMES}, got {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def status(name: str) -> tuple[bool, str]:
    """(available here?, why / what)."""
    try:
        mod = module(name)
    except ImportError as e:  # a backend module whose imports fail is simply not available
        return False, f"backend module failed to import: {e}"
    return mod.status()

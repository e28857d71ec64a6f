"""Backends: one module each (reference, cuda, ascend_sim, npu), all with the interface of
docs/internals.md. Modules are imported lazily so a missing toolchain never breaks import.

This package is also the public ``dualops.backends()``: calling it lists every backend with
whether it runs here and why (so ``dualops.backends.cuda`` stays importable as a module)."""
from __future__ import annotations

import functools
import importlib
import sys
import types

NAMES = ("reference", "cuda", "ascend_sim", "npu")


@functools.lru_cache(maxsize=None)
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


def summary() -> dict[str, dict]:
    """Every backend: {"available": bool, "reason": str}."""
    out = {}
    for name in NAMES:
        ok, why = status(name)
        out[name] = {"available": ok, "reason": why}
    return out


class _CallablePackage(types.ModuleType):
    def __call__(self) -> dict[str, dict]:
        return summary()


sys.modules[__name__].__class__ = _CallablePackage

"""Backends: ``reference`` (a module) and the packages ``cuda``, ``ascend_sim`` and ``npu``, each
with one module per op (``<backend>/<op>.py``) and a ``status()``; see docs/internals.md
"Backend module interface". Modules are imported lazily so a missing toolchain never breaks import.

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


@functools.lru_cache(maxsize=None)
def op_module(name: str, op: str):
    """The module implementing ``op`` on backend ``name`` (None when the backend has none):
    ``dualops.backends.<name>.<op>`` for the packages, the backend module itself for reference."""
    mod = module(name)
    if not hasattr(mod, "__path__"):            # a single-module backend (reference)
        return mod if hasattr(mod, op) else None
    try:
        return importlib.import_module(f"{mod.__name__}.{op}")
    except ModuleNotFoundError as e:
        if e.name == f"{mod.__name__}.{op}":
            return None
        raise


def implementation(name: str, op: str):
    """(op function, prepare function or None) of ``op`` on backend ``name``."""
    mod = op_module(name, op)
    if mod is None or not hasattr(mod, op):
        raise NotImplementedError(f"{op}: backend {name!r} has no implementation of this op")
    return getattr(mod, op), getattr(mod, f"prepare_{op}", None)


def prepare(name: str, op: str, kw: dict):
    """The launch of ``op`` on backend ``name`` for validated keywords ``kw`` (docs/internals.md
    "Backend module interface"): ``prepare_<op>(plan=None, **kw)`` where the module has one, else
    None: the op function is the launch (nothing to prepare; looked up per call, so a test may
    replace it). Called as ``launch(plan=plan, **kw)`` with the tensors of any call of the same
    signature."""
    _, prep = implementation(name, op)
    return prep(plan=None, **kw) if prep is not None else None


@functools.lru_cache(maxsize=None)
def checks_values(name: str) -> bool:
    """Whether every call to backend ``name`` runs the value checks of ``validate="full"``: its
    kernels trust device values (lengths, block ids, group offsets) to stay in bounds; the
    backend package says so with ``CHECK_VALUES = True``."""
    return bool(getattr(module(name), "CHECK_VALUES", False))


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

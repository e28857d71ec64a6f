"""Access to the native module ``dualops._C`` with a clear reason when it is missing.

Looked up as ``dualops._C`` (an installed package), else at ``$DUALOPS_C_PATH``, else the newest
``build/**/_C*.so`` of a source checkout (running from python/ during development)."""
from __future__ import annotations

import functools
import glob
import importlib.util
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _from_file(path):
    spec = importlib.util.spec_from_file_location("dualops._C", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["dualops._C"] = mod
    return mod


@functools.lru_cache(maxsize=None)
def load():
    """(module or None, reason)."""
    try:
        from . import _C  # type: ignore[attr-defined]
    except ImportError as first:
        given = os.environ.get("DUALOPS_C_PATH")
        if given and not os.path.isfile(given):
            return None, (f"environment variable DUALOPS_C_PATH={given!r} is not allowed: the path of "
                          f"a built dualops._C*.so file (unset it to use the installed or dev build)")
        candidates = [given] if given else []
        candidates += sorted(glob.glob(os.path.join(_ROOT, "build", "**", "_C*.so"), recursive=True),
                             key=os.path.getmtime, reverse=True)
        for path in candidates:
            try:
                _C = _from_file(path)
                break
            except ImportError:
                continue
        else:
            return None, (f"the native module dualops._C is not built ({first}); run "
                          f"`bash scripts/setup.sh` (or `pip install .`) to build it")
    return _C, "built: " + ", ".join(k for k, v in _C.built.items() if v)


def require():
    mod, reason = load()
    if mod is None:
        raise RuntimeError(reason)
    return mod

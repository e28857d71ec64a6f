"""Access to the native module ``dualops._C`` with a clear reason when it is missing."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def load():
    """(module or None, reason)."""
    try:
        from . import _C  # type: ignore[attr-defined]
    except ImportError as e:
        return None, (f"the native module dualops._C is not built ({e}); install the package with "
                      f"`pip install .` (or `pip install -e .`) to build it")
    return _C, "built: " + ", ".join(k for k, v in _C.built.items() if v)


def require():
    mod, reason = load()
    if mod is None:
        raise RuntimeError(reason)
    return mod

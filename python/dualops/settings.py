"""The environment variables the Python package reads, each listed once, and their parsing.

A wrong value is a ValueError naming the variable, the value and what is allowed (and how to
get the default: unset it). The CUDA launcher's measurement overrides (``DUALOPS_IFA_*``) are
documented in the README; build switches (``DUALOPS_CUDA``, ``DUALOPS_CUDA_OPS``,
``DUALOPS_OFFLINE``) in ``scripts/setup.sh``.
"""
from __future__ import annotations

import math
import os

VARIABLES = {
    "DUALOPS_ASCEND_SIM_PROFILE": "the 910B profile the Ascend simulator runs (default ascend910b2)",
    "DUALOPS_ASCEND_SIM_CORES": "run the simulator on this many AI cores of the profile (default: all)",
    "DUALOPS_ASCEND_SIM_TIMEOUT_S": "seconds a simulated launch may run before it is stopped (default 60)",
    "DUALOPS_ASCEND_SIM_PIPE_SYNC": ("strict (default): the simulator faults on any missing pipe synchronisation; "
                                     "worst: the same checks, pipe work run in the worst legal order; "
                                     "worst_unchecked: worst order without the checks (a missing sync gives a "
                                     "wrong result); off: program order"),
    "DUALOPS_ASCEND_SIM_VEC_ULP": "hardware-like simulator numerics: vector Exp/Ln/Div/Sqrt/Reciprocal off by up to n ulp (default 0)",
    "DUALOPS_C_PATH": "path of a built dualops._C to load instead of the installed one",
    "DUALOPS_OPS_DIR": "folder of the op schema files (ops/*.yaml) when the package cannot find its own",
    "ASCEND_HOME_PATH": "CANN's install folder (set by CANN's set_env.sh): the npu backend reports its version",
    "DUALOPS_IFA_TAIL": "0: CUDA IFA plans never split only the last wave of a multi-wave grid (measurements)",
}


def _fail(name: str, raw: str, allowed: str) -> ValueError:
    return ValueError(f"environment variable {name}={raw!r} is not allowed: {allowed} "
                      f"(unset it for the default)")


def raw(name: str) -> str | None:
    """The variable's value, None when unset or empty."""
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def env_int(name: str, default: int | None = None, *, min_value: int | None = None,
            max_value: int | None = None) -> int | None:
    value = raw(name)
    if value is None:
        return default
    lo = "" if min_value is None else f">= {min_value}"
    hi = "" if max_value is None else f"<= {max_value}"
    allowed = "a whole number" + (f" {lo}" if lo else "") + (" and " if lo and hi else " " if hi else "") + hi
    try:
        n = int(value.strip())
    except ValueError:
        raise _fail(name, value, allowed.strip()) from None
    if (min_value is not None and n < min_value) or (max_value is not None and n > max_value):
        raise _fail(name, value, allowed.strip())
    return n


def env_float(name: str, default: float, *, positive: bool = True) -> float:
    value = raw(name)
    if value is None:
        return default
    allowed = "a finite number > 0 (seconds)" if positive else "a finite number"
    try:
        x = float(value.strip())
    except ValueError:
        raise _fail(name, value, allowed) from None
    if not math.isfinite(x) or (positive and x <= 0):
        raise _fail(name, value, allowed)
    return x


def env_choice(name: str, default: str, choices) -> str:
    value = raw(name)
    if value is None:
        return default
    if value.strip().lower() not in [c.lower() for c in choices]:
        raise _fail(name, value, f"one of {', '.join(choices)}")
    return value.strip()

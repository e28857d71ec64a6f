"""Overrides of the planners' launch choices, for measurements and tests.

Every launch choice of a call (kernel variant, CTA shape, merge of split-KV partials, prefetches,
stagger, split counts) is made by the op's planner from the problem and the device profile and
carried in the plan (``plan.describe()`` shows it). ``override`` changes some of those choices
for the calls planned inside a ``with`` block, in this thread::

    with dualops.tuning.override(ifa_merge="kernel", ifa_cta_shape="narrow"):
        out, lse = dualops.incre_flash_attention(q, k, v, ...)

Plans made inside the block are cached under the overrides in force, so calls after the block
get the default plans again. docs/tuning.md lists every knob, its values and what it trades.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

# name -> (allowed values or a type, what it sets). None (the default) leaves the planner's choice.
KNOBS: dict[str, tuple] = {
    "ifa_cta_shape": (("narrow", "wide"), "CUDA IFA: one CTA shape for every call (no one-chunk, "
                      "lockstep or prefetch variant unless asked below)"),
    "ifa_merge": (("kernel", "counter", "cluster"), "CUDA IFA: merge of split-KV partials where it "
                  "applies (cluster falls back to counter, counter to the combine kernel)"),
    "ifa_pdl": (bool, "CUDA IFA: launch the split kernel as a programmatic dependent launch"),
    "ifa_stagger_ns": (int, "CUDA IFA: spread of the first wave's starts in multi-wave grids (0: none)"),
    "ifa_second_fill_keys": (int, "CUDA IFA: splits of at least this many keys prefetch their "
                             "second pipeline fill into L2 (0: none)"),
    "ifa_lockstep_keys": (int, "CUDA IFA: units of at least this many keys run the lockstep kernel, "
                          "every grid (0: none)"),
    "ifa_lockstep_burst_keys": (int, "CUDA IFA: lockstep units of at least this many keys on "
                                "contiguous caches use the burst order (0: never)"),
    "ifa_narrow_prefetch": (bool, "CUDA IFA: narrow 8-bit grids run the kernel with the first-fill "
                            "L2 prefetch"),
    "ifa_wide_prefetch": (bool, "CUDA IFA: wide 8-bit grids run (True) or never run (False) the "
                          "kernel with the first-fill L2 prefetch"),
    "ifa_tail": (bool, "CUDA IFA: split only the last, partial wave's groups of long multi-wave "
                 "grids (False: plan every group whole)"),
}

_CURRENT: contextvars.ContextVar[tuple] = contextvars.ContextVar("dualops_tuning", default=())
_LISTENERS: list[Callable[[], None]] = []


def current() -> tuple[tuple[str, object], ...]:
    """The overrides in force, as sorted (name, value) pairs (hashable: planners key caches on it)."""
    return _CURRENT.get()


def get(name: str, default=None):
    """The override of knob `name`, else `default`."""
    if name not in KNOBS:
        raise KeyError(f"unknown tuning knob {name!r}; known: {', '.join(KNOBS)}")
    for k, v in _CURRENT.get():
        if k == name:
            return v
    return default


def on_change(fn: Callable[[], None]) -> None:
    """Call fn() whenever overrides are entered or left (caches of prepared launches register)."""
    _LISTENERS.append(fn)


def _check(name: str, value):
    if name not in KNOBS:
        raise ValueError(f"tuning.override: unknown knob {name!r}; known: {', '.join(KNOBS)}")
    allowed = KNOBS[name][0]
    if isinstance(allowed, tuple):
        if value not in allowed:
            raise ValueError(f"tuning.override: {name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    elif allowed is bool:
        if not isinstance(value, bool):
            raise TypeError(f"tuning.override: {name} must be a bool, got {type(value).__name__}")
    elif allowed is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"tuning.override: {name} must be an int >= 0, got {value!r}")
    return value


def _changed() -> None:
    for fn in _LISTENERS:
        fn()


@contextlib.contextmanager
def override(**knobs) -> Iterator[None]:
    """Override launch choices of the calls planned inside the block (``KNOBS`` lists the names;
    a value of None leaves that knob as it is). Nests: inner blocks win."""
    merged = dict(_CURRENT.get())
    for name, value in knobs.items():
        if value is None:
            continue
        merged[name] = _check(name, value)
    token = _CURRENT.set(tuple(sorted(merged.items())))
    _changed()
    try:
        yield
    finally:
        _CURRENT.reset(token)
        _changed()

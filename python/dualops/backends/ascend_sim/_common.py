"""Glue shared by the simulator op modules: the simulated profile, GM regions, the launch and
the last launch's counters for the cost model."""
from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Callable

import torch

from ... import ascend_cost_model, devices, native

NAME = "ascend_sim"
# Values of the profile key pipe_sync / DUALOPS_ASCEND_SIM_PIPE_SYNC (docs/ascend_sim.md "Modes").
PIPE_SYNC_MODES = ("strict", "worst", "worst_unchecked", "off")


_state = threading.local()
_LAST: dict = {}


# ----------------------------------------------------------------------------- profile


def _env_profile() -> devices.DeviceProfile:
    from ... import settings

    name = settings.raw("DUALOPS_ASCEND_SIM_PROFILE") or devices.DEFAULT_SIM_PROFILE
    ascend = [n for n, q in devices.PROFILES.items() if q.is_ascend]
    try:
        p = devices.profile(name)
    except ValueError:
        p = None
    if p is None or not p.is_ascend:
        raise ValueError(f"environment variable DUALOPS_ASCEND_SIM_PROFILE={name!r} is not allowed: "
                         f"an Ascend profile, one of {', '.join(ascend)} (unset it for the default {devices.DEFAULT_SIM_PROFILE})")
    n = settings.env_int("DUALOPS_ASCEND_SIM_CORES", None, min_value=1, max_value=p.num_cores)
    return p if n is None else devices.with_cores(p, n)


def active_profile() -> devices.DeviceProfile:
    """The profile simulated calls run with: use_profile() > environment > default."""
    p = getattr(_state, "profile", None)
    return p if p is not None else _env_profile()


@contextlib.contextmanager
def use_profile(profile="ascend910b2", cores: int | None = None):
    """Run the simulator with this Ascend profile (a name or DeviceProfile), optionally limited
    to `cores` AI cores (per-core capacities stay real), inside the block."""
    p = profile if isinstance(profile, devices.DeviceProfile) else devices.profile(profile)
    if not p.is_ascend:
        raise ValueError(f"use_profile: {p.name} is not an Ascend profile")
    if cores is not None:
        p = devices.with_cores(p, cores)
    prev = getattr(_state, "profile", None)
    _state.profile = p
    try:
        yield p
    finally:
        _state.profile = prev


def launch_profile(p: devices.DeviceProfile) -> dict:
    return {"name": p.name, "ub_bytes": p.ub_bytes, "l1_bytes": p.l1_bytes, "l0a_bytes": p.l0a_bytes,
            "l0b_bytes": p.l0b_bytes, "l0c_bytes": p.l0c_bytes, "ai_cores": p.num_cores,
            "timeout_s": _settings().env_float("DUALOPS_ASCEND_SIM_TIMEOUT_S", 60.0),
            # asynchronous-pipe model (docs/ascend_sim.md "Modes"): "strict" (default), "worst",
            # "worst_unchecked" or "off"
            "pipe_sync": _settings().env_choice("DUALOPS_ASCEND_SIM_PIPE_SYNC", "strict",
                                                PIPE_SYNC_MODES).lower(),
            # hardware-like vector numerics: Exp / Ln / Div / Sqrt / Reciprocal off by up to n ulp
            "vec_ulp": _settings().env_int("DUALOPS_ASCEND_SIM_VEC_ULP", 0, min_value=0, max_value=1 << 20)}


def _settings():
    from ... import settings

    return settings


def status():
    mod, reason = native.load()
    if mod is None:
        return False, reason
    if not hasattr(mod, "ascend_sim_launch"):
        return False, "dualops._C was built without the Ascend simulator"
    try:
        p = active_profile()
    except ValueError as e:
        return False, str(e)
    return True, (f"Ascend C kernels on the CPU simulator of {p.name} "
                  f"({p.num_cores} AI cores x 1 cube + 2 vector cores)")


def last_counters() -> dict:
    """The last simulated launch: {"op", "profile", "plan", "report"} (report = per-core counters
    and GM traffic per buffer, as _C.ascend_sim_launch returns them); {} before any call."""
    return dict(_LAST)


def last_estimate() -> dict:
    """Cost-model estimate of the last simulated launch (see dualops.ascend_cost_model)."""
    if not _LAST:
        raise RuntimeError("ascend_sim.last_estimate: no simulated launch yet")
    return ascend_cost_model.estimate(_LAST["report"], _LAST["profile"]).as_dict()


def estimate(op: str, inputs: dict, *, profile: str | None = None) -> dict:
    """Run one call of `op` (public-API keyword arguments, CPU tensors) on the simulator for the
    named profile and return the cost model's estimate: {"seconds", "bound", "profile", ...}."""
    import dualops

    from ... import schema

    if op not in schema.OPS or not schema.load(op).capabilities.get(NAME):
        raise NotImplementedError(f"ascend_sim.estimate: {op} has no Ascend C kernel yet")
    kw = {k: v for k, v in inputs.items() if k not in ("backend", "return_lse")}
    import importlib

    hook = getattr(importlib.import_module(f"{__package__}.{op}"), f"estimate_{op}", None)
    if hook is not None:   # an op that extrapolates from slices of its work list (its module says how)
        with use_profile(profile or devices.DEFAULT_SIM_PROFILE) as p:
            return hook(kw, p)
    with use_profile(profile or devices.DEFAULT_SIM_PROFILE):
        getattr(dualops, op)(**kw, backend=NAME)
        return last_estimate()


# ----------------------------------------------------------------------------- helpers


def ptr(t):
    return 0 if t is None else t.data_ptr()


def strides4(t):
    return (0, 0, 0, 0) if t is None else tuple(int(s) for s in t.stride())


class Regions:
    """The GM buffers of a launch: whole storages of the tensors (views included), merged where
    two tensors share memory, so any access outside them is a fault."""

    def __init__(self):
        self.items: list[tuple[int, int, str]] = []

    def add(self, name: str, t):
        if t is None:
            return
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            self.items.append((st.data_ptr(), st.nbytes(), name))
        else:
            raise TypeError(f"_Regions.add: {name} is not a tensor")

    def merged(self) -> list[tuple[int, int, str]]:
        out: list[list] = []
        for addr, n, name in sorted(i for i in self.items if i[1] > 0):
            if out and addr < out[-1][0] + out[-1][1]:
                last = out[-1]
                last[1] = max(last[0] + last[1], addr + n) - last[0]
                if name not in last[2].split("+"):
                    last[2] += "+" + name
            else:
                out.append([addr, n, name])
        return [tuple(i) for i in out]


def last_dim_unit(t, name):
    """Masks / biases are read a row of keys at a time: the key stride must be 0 or 1."""
    if t is None or t.stride(-1) in (0, 1):
        return t
    return t.contiguous()


def launch(op: str, kernel: str, num_cores: int, args: list[int], regions: Regions, prof, plan) -> dict:
    """Run a registered kernel on the simulator and keep its counters for the cost model."""
    C = native.require()
    report = C.ascend_sim_launch(kernel, num_cores, args, regions.merged(), launch_profile(prof))
    _LAST.clear()
    _LAST.update(op=op, profile=prof, plan=plan, report=report)
    return report


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the op modules' Ascend C kernel runs: the simulator (CPU tensors, this package) or an
    NPU (torch_npu tensors, backends/npu). The glue is the same -- checks, plan, tiling, params,
    workspace sizes, outputs on the tensors' device -- and only these differ."""

    name: str
    device_type: str
    profile: Callable           # () -> the DeviceProfile plans are made for
    launch: Callable            # like launch() above

    def check_device(self, name: str, t) -> None:
        if t.device.type != self.device_type:
            raise ValueError(f"{self.name} runs on {self.device_type.upper()} tensors, got {name} on {t.device}")

    def gm_bytes(self, data: bytes, device) -> torch.Tensor:
        """Packed tiling / params as a GM buffer on `device`."""
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return t if device.type == "cpu" else t.to(device)


SIM = Target(NAME, "cpu", active_profile, launch)

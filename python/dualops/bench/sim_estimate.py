"""The Ascend simulator's cost-model estimate of one call, for ``bench`` rows of ``ascend_sim``.

The simulator runs the real Ascend C kernel on the CPU and counts, per core, cube MACs, vector
work and GM traffic; its documented roofline cost model turns the counters into a time on a named
910B profile. That is an *estimate*, never a measurement, and every row says so.

Interface expected of the backend module (``dualops/backends/ascend_sim.py``)::

    estimate(op: str, inputs: dict, *, profile: str) -> dict | float
        inputs: the public-API keyword arguments of one call (CPU tensors, as ``bench`` builds
        them). Returns seconds, or a dict with "seconds" (required) and any detail (e.g. the
        bound: "cube" / "vector" / "gm", the counters, the profile used).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .measure import Measurement


def method_label(profile: str) -> str:
    return f"estimate (cost model, {profile})"


@dataclass
class Estimate:
    seconds: float
    profile: str
    detail: dict = field(default_factory=dict)

    def as_measurement(self) -> Measurement:
        bound = self.detail.get("bound")
        note = f"bound: {bound}" if bound else ""
        if "extrapolated" in str(self.detail.get("label", "")):
            note += "; extrapolated from reduced simulated runs"
        return Measurement(self.seconds, self.seconds, self.seconds, 1, method_label(self.profile),
                           kind="estimate", note=note)


def available() -> tuple[bool, str]:
    import dualops

    st = dualops.backends().get("ascend_sim", {})
    if not st.get("available"):
        return False, st.get("reason", "ascend_sim is not a known backend")
    from ..backends import module  # (dualops.backends, the attribute, is the status function)

    mod = module("ascend_sim")
    if not callable(getattr(mod, "estimate", None)):
        return False, ("the ascend_sim backend exposes no cost-model estimate "
                       "(expected dualops.backends.ascend_sim.estimate(op, inputs, profile=...))")
    return True, ""


def estimate(op: str, inputs: dict, profile: str) -> Estimate:
    from ..backends import module

    mod = module("ascend_sim")
    res = mod.estimate(op, inputs, profile=profile)
    if isinstance(res, (int, float)):
        return Estimate(float(res), profile)
    if not isinstance(res, dict) or "seconds" not in res:
        raise TypeError(f"ascend_sim.estimate must return seconds or a dict with 'seconds', got {res!r}")
    return Estimate(float(res["seconds"]), str(res.get("profile", profile)),
                    {k: v for k, v in res.items() if k != "seconds"})


def estimate_shape(mod, shape: dict, profile: str | None) -> Estimate:
    """For bench modules with ``sim_estimate(shape, profile)`` (shapes too big to simulate whole:
    the module extrapolates the cost model from reduced simulated runs)."""
    res = mod.sim_estimate(shape, profile)
    return Estimate(float(res["seconds"]), str(res.get("profile", profile)),
                    {k: v for k, v in res.items() if k != "seconds"})

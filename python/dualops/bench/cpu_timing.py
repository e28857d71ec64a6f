"""Wall-clock timing for host-synchronous backends (the reference on the CPU, and any device
whose work we can only wait on): median and spread of repeated calls, inputs rotated."""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass


@dataclass
class Timing:
    median_s: float
    p10_s: float
    p90_s: float
    runs: int
    method: str

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative width of the middle 80% of the runs."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "spread": self.spread}


def quantile(sorted_values, q: float) -> float:
    """Linear-interpolated quantile of an already sorted list."""
    if not sorted_values:
        raise ValueError("quantile of an empty list")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples, method: str) -> Timing:
    s = sorted(samples)
    return Timing(statistics.median(s), quantile(s, 0.1), quantile(s, 0.9), len(s), method)


def wall_clock(fns, *, warmup: int = 1, min_runs: int = 3, max_runs: int = 30,
               budget_s: float = 1.0, sync=None) -> Timing:
    """Time ``fns`` (a list of no-argument closures, taken in turn so consecutive calls touch
    different inputs) until ``max_runs`` runs or ``budget_s`` seconds, at least ``min_runs``.
    ``sync`` (e.g. ``torch.npu.synchronize``) is called after each call, inside the timing."""
    if not fns:
        raise ValueError("wall_clock: fns must hold at least one callable")
    if min_runs < 1 or max_runs < min_runs:
        raise ValueError(f"wall_clock: need 1 <= min_runs <= max_runs, got {min_runs}, {max_runs}")
    for i in range(warmup):
        fns[i % len(fns)]()
        if sync:
            sync()
    samples = []
    start = time.perf_counter()
    while len(samples) < max_runs and (len(samples) < min_runs or time.perf_counter() - start < budget_s):
        fn = fns[len(samples) % len(fns)]
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        samples.append(time.perf_counter() - t0)
    return summarize(samples, "wall-clock")

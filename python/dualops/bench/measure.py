"""How one implementation is timed on its device: CUDA through ``bench/timing.py`` (events,
warm-up, median and spread, rotated input sets, CUDA-graph replay), everything host-synchronous
through the wall clock (``bench/cpu_timing.py``). Results in seconds, with the method in words."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import cpu_timing


@dataclass
class Measurement:
    time_s: float
    p10_s: float
    p90_s: float
    runs: int
    method: str                # how it was obtained, in words
    kind: str = "measured"     # "measured" | "estimate"
    note: str = ""

    @property
    def spread(self) -> float:
        return (self.p90_s - self.p10_s) / self.time_s if self.time_s > 0 else 0.0


def rotation_sets(device_type: str, set_bytes: float, *, max_sets: int = 8) -> int:
    """Input sets to rotate through: enough to move 3x the L2 per pass on CUDA, and no more than
    fits comfortably in free memory; 1 elsewhere (host caches are not what the CPU figures are for)."""
    if device_type != "cuda":
        return 1
    from . import timing

    n = timing.rotation_count(int(set_bytes), timing.l2_bytes(), max_sets=max_sets)
    free, _ = torch.cuda.mem_get_info()
    return max(1, min(n, int(0.4 * free // max(set_bytes, 1))))


def measure(fns, device_type: str, *, graph: bool = True, runs: int = 30,
            budget_s: float = 1.0) -> Measurement:
    """Time ``fns`` (no-argument closures, one per rotated input set) on ``device_type``."""
    if device_type == "cuda":
        from . import timing

        note = ""
        try:
            t = timing.time_cuda(lambda i: fns[i](), len(fns), runs=runs, graph=graph)
        except Exception as e:  # capture can fail for a call that syncs; eager still measures it
            if not graph:
                raise
            torch.cuda.synchronize()
            note = f"graph capture failed ({type(e).__name__}: {str(e).splitlines()[0][:80]}); eager"
            t = timing.time_cuda(lambda i: fns[i](), len(fns), runs=runs, graph=False)
        method = ("cuda-graph replay" if t.graph else "cuda events, eager") + \
            f", median of {t.runs}, {len(fns)} input set{'s' if len(fns) > 1 else ''}"
        return Measurement(t.median_us * 1e-6, t.p10_us * 1e-6, t.p90_us * 1e-6, t.runs, method,
                           note=note)
    sync = None
    if device_type == "npu":
        sync = torch.npu.synchronize  # type: ignore[attr-defined]
    t = cpu_timing.wall_clock(fns, budget_s=budget_s, min_runs=min(3, runs), max_runs=runs, sync=sync)
    return Measurement(t.median_s, t.p10_s, t.p90_s, t.runs, f"wall-clock, median of {t.runs}")

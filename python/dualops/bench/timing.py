"""GPU timing that holds up (BENCHMARKS.md, "Method"): device events, warm-up, the median and spread of many
runs, inputs rotated so repeated runs do not measure the L2, optional CUDA-graph replay so
launch gaps vanish for small problems; plus a device-to-device copy probe for the bandwidth
ceiling."""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import torch


@dataclass
class Timing:
    """Per-call times in microseconds over `runs` timed runs (each run = one graph replay or one
    eager pass over every input set)."""

    median_us: float
    p10_us: float
    p90_us: float
    min_us: float
    runs: int
    calls_per_run: int
    graph: bool

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how much one run varies."""
        return (self.p90_us - self.p10_us) / self.median_us if self.median_us else math.inf

    def as_dict(self) -> dict:
        d = asdict(self)
        d["spread"] = self.spread
        return d


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    pos = q * (len(s) - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def rotation_count(set_bytes: int, l2_bytes: int, *, factor: float = 3.0, max_sets: int = 16) -> int:
    """How many input sets to rotate through so that one pass over them moves at least
    `factor` x the L2 (a set bigger than that needs no rotation)."""
    if set_bytes <= 0:
        return max_sets
    return max(1, min(max_sets, math.ceil(factor * l2_bytes / set_bytes)))


def l2_bytes(device=None) -> int:
    props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 50 * 2**20) or 50 * 2**20)


def time_cuda(fn: Callable[[int], object], n_sets: int = 1, *, warmup: int = 3, runs: int = 30,
              graph: bool = True, min_run_us: float = 0.0, warmup_ms: float = 200.0) -> Timing:
    """Time `fn(i)` (i = input-set index, 0..n_sets-1) on the current CUDA stream.

    One run calls fn on every set once (repeated `reps` times when a pass is shorter than
    `min_run_us`); with graph=True that run is captured once as a CUDA graph and replayed, so
    the figure is device time without Python or launch gaps. Before the timed runs, runs are
    repeated until `warmup_ms` of device time has passed: a GPU that has just come out of
    another workload (a previous shape, building the inputs) runs the first tens of
    milliseconds measurably slower, and whichever implementation was timed first would pay
    for it. Returns per-call statistics."""
    if n_sets < 1:
        raise ValueError(f"n_sets must be >= 1, got {n_sets}")
    stream = torch.cuda.current_stream()
    for _ in range(warmup):
        for i in range(n_sets):
            fn(i)
    torch.cuda.synchronize()

    reps = 1
    if min_run_us > 0:  # estimate one pass, then repeat passes so a run is long enough to time
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        for i in range(n_sets):
            fn(i)
        b.record(stream)
        b.synchronize()
        one = a.elapsed_time(b) * 1e3
        reps = max(1, min(64, math.ceil(min_run_us / max(one, 1e-3))))

    def one_run():
        for _ in range(reps):
            for i in range(n_sets):
                fn(i)

    g = None
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            one_run()  # warm the side stream too (allocator pools)
        stream.wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            one_run()
        g.replay()
        torch.cuda.synchronize()
    _warm(lambda: g.replay() if g is not None else one_run(), stream, warmup_ms)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for s, e in zip(starts, ends):
        s.record(stream)
        if g is not None:
            g.replay()
        else:
            one_run()
        e.record(stream)
    torch.cuda.synchronize()
    calls = reps * n_sets
    per_call = [s.elapsed_time(e) * 1e3 / calls for s, e in zip(starts, ends)]
    del g
    return Timing(median_us=statistics.median(per_call), p10_us=_quantile(per_call, 0.1),
                  p90_us=_quantile(per_call, 0.9), min_us=min(per_call), runs=runs,
                  calls_per_run=calls, graph=graph)


def _warm(run: Callable[[], object], stream, warmup_ms: float, max_runs: int = 2000) -> None:
    """Repeat `run` until about `warmup_ms` of device time has passed (one timed run sizes it)."""
    if warmup_ms <= 0:
        return
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(stream)
    run()
    b.record(stream)
    b.synchronize()
    for _ in range(min(max_runs, math.ceil(warmup_ms / max(a.elapsed_time(b), 1e-3)) - 1)):
        run()
    torch.cuda.synchronize()


def copy_bandwidth_gbs(nbytes: int = 2 * 2**30, *, runs: int = 20, device=None) -> dict:
    """Device-to-device copy of `nbytes`, counting bytes read plus bytes written (the
    convention of BENCHMARKS.md). Returns {"gbs": median GB/s, "best_gbs", "bytes", "median_us"}."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    n = nbytes // 4
    src = torch.empty(n, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    t = time_cuda(lambda i: dst.copy_(src), 1, warmup=3, runs=runs, graph=False)
    moved = 2 * n * 4
    del src, dst
    return {"gbs": moved / (t.median_us * 1e-6) / 1e9, "best_gbs": moved / (t.min_us * 1e-6) / 1e9,
            "bytes": moved, "median_us": t.median_us}

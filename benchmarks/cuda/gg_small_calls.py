"""Where the time of a small grouped-GEMM call goes (docs/grouped_gemm_cuda.md, "Limits").

For each shape: the call's time (CUDA-graph replays of every input set in turn, sets rotated
beyond L2, median of 30 after 200 ms of warm-up: the bench's method; the lower of `--rounds`
such medians, as a stray slow round shows at these lengths) for dualops and torch
(`torch._grouped_mm` / `torch._scaled_grouped_mm`), then the kernels of those replays from the
profiler (median duration and the gap after the kernel before them; a negative gap is a kernel
that started before the one ahead ended: a programmatic dependent launch). Then the streaming
floor of this GPU at small sizes: a device-to-device copy moving B bytes (B/2 read, B/2
written) and a read-only reduction over B bytes, timed the same way.

    python benchmarks/cuda/gg_small_calls.py [--shapes SPEC] [--rounds 2] [--no-profile] [--no-floor]

--shapes: `g=16,m=16,n=1536,k=2048,recipe=bf16;g=8,...` (the bench's vocabulary); the default
is the gg-qwen3 calls of 16 tokens per group and 8 groups of 16 x 1536 x 2048 bf16.
"""
from __future__ import annotations

import argparse
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

from dualops.bench import grouped_gemm as wl
from dualops.bench.timing import l2_bytes, rotation_count, time_cuda

DEFAULT = ("g=8,m=16,n=1536,k=2048;g=16,m=16,n=1536,k=2048;g=16,m=16,n=1536,k=2048,recipe=fp8_rowwise;"
           "g=16,m=16,n=4096,k=1536;g=16,m=16,n=4096,k=1536,recipe=fp8_rowwise;"
           "g=16,m=16,n=3072,k=4096;g=16,m=16,n=3072,k=4096,recipe=fp8_rowwise")


def _shapes(spec: str) -> list[dict]:
    return [{k: (v if k in ("recipe", "layout") else int(v)) for k, v in (kv.split("=") for kv in one.split(","))}
            for one in spec.split(";") if one]


def _kernels(fns) -> list[tuple[str, float, float]]:
    """(name, median µs, median gap µs before it) of the kernels of 5 replays of a graph of fns."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for fn in fns:
            fn()
    for _ in range(20):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                     and "emcpy" not in e.name), key=lambda e: e.time_range.start)
    per: dict[str, list[tuple[float, float]]] = {}
    end = None
    for e in events:
        gap = e.time_range.start - end if end is not None else 0.0
        end = e.time_range.end
        per.setdefault(e.name[:60], []).append((e.time_range.end - e.time_range.start, gap))
    return [(name, statistics.median(d for d, _ in v), statistics.median(g for _, g in v)) for name, v in per.items()]


def _time(fn, n_sets: int, rounds: int) -> float:
    return min(time_cuda(fn, n_sets).median_us for _ in range(rounds))


def calls(shapes: list[dict], with_profile: bool, rounds: int) -> None:
    gen = torch.Generator().manual_seed(0)
    for sh in shapes:
        s = wl.normalize(sh)
        first = wl.build(s, torch.device("cuda"), gen)
        wbytes = first["w"].numel() * first["w"].element_size()
        n = rotation_count(wbytes, l2_bytes())
        sets = [first] + [wl.build(s, torch.device("cuda"), gen) for _ in range(n - 1)]
        impls = {"dualops": [wl.call(i, "cuda") for i in sets]}
        peer = [next((p for name, p in wl.peers(s, i).items() if "torch" in name and not isinstance(p, str)), None)
                for i in sets]
        if peer[0] is not None:
            impls["torch"] = peer
        line = f"{wl.label(s):38s} weights {wbytes / 1e6:6.1f} MB"
        times = {}
        for name, fns in impls.items():
            times[name] = _time(lambda i, fns=fns: fns[i](), n, rounds)
            line += f" | {name} {times[name]:7.1f} us {wbytes / times[name] / 1e3:5.0f} GB/s"
        if "torch" in times:
            line += f" | torch / dualops {times['torch'] / times['dualops']:.2f}"
        print(line, flush=True)
        if with_profile:
            for name, fns in impls.items():
                for kernel, dur, gap in _kernels(fns):
                    print(f"    {name:8s} {kernel:60s} {dur:7.1f} us, gap before {gap:5.1f} us")
        del sets, impls, peer
        torch.cuda.empty_cache()


def floor(rounds: int) -> None:
    for mib in (25, 50, 100, 200, 400, 800):
        n = mib * 2**20 // 2
        sets = max(1, -(-150 // mib))
        src = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        dst = [torch.empty(n // 2, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        out = torch.empty((), device="cuda", dtype=torch.float32)
        t_copy = _time(lambda i: dst[i].copy_(src[i][: n // 2]), sets, rounds)
        t_sum = _time(lambda i: torch.sum(src[i], dim=0, dtype=torch.float32, out=out), sets, rounds)
        b = n * 2
        print(f"{mib:4d} MiB: copy (half read, half written) {t_copy:7.1f} us {b / t_copy / 1e3:5.0f} GB/s"
              f" | read-only sum {t_sum:7.1f} us {b / t_sum / 1e3:5.0f} GB/s", flush=True)
        del src, dst
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--no-floor", action="store_true")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    calls(_shapes(args.shapes), not args.no_profile, args.rounds)
    if not args.no_floor:
        floor(args.rounds)


if __name__ == "__main__":
    main()

"""Every CUDA grouped-GEMM kernel on the same calls: the own mma.sync kernel and the CUTLASS
sm90 kernels (forced through the plan), with torch._grouped_mm / torch._scaled_grouped_mm, on the
gg-targets shapes (timed like the bench: CUDA-graph replays after 200 ms of warm-up, median of 15). The planner's
choice (`tiling.grouped_gemm.cuda_kernel_for`) follows these figures (docs/grouped_gemm_cuda.md).

    python benchmarks/cuda/gg_kernel_choice.py [--quick | --miss | --shapes SPEC] [--kernels mma,sm90,...]
        [--repeat R]

--miss: only the shapes where a configuration choice is close (64-128 tokens per group, bf16 and
fp8 rowwise; 8 x 4096 bf16); --shapes: `g=32,m=128,n=4096,k=7168,recipe=bf16;g=8,...` (bench
vocabulary); --kernels: only these kernels (mma, when listed, is the reference of the "diff"
column; `sm90:n` = the kernel with the tile scheduler rasterizing along N); --repeat R: R rounds,
each kernel and torch timed once per round in turn (median of the rounds and their spread)."""
from __future__ import annotations

import dataclasses
import statistics
import sys

import torch

from dualops.backends.cuda import grouped_gemm as cuda_gg
from dualops.bench import grouped_gemm as wl
from dualops.bench.timing import time_cuda
from dualops.devices import detect
from dualops.heuristics.cuda import CUDA_KERNELS, cuda_kernel_for, sm90_supports
from dualops.tiling.grouped_gemm import plan_grouped_gemm

def _time(fn, reps=15):
    """Per-call median (us): the bench's method (CUDA-graph replays after 200 ms of warm-up)."""
    return time_cuda(lambda i: fn(), 1, runs=reps).median_us


def _plan(s, inp, kernel):
    w = inp["w"]
    name, _, raster = kernel.partition(":")
    kw = dict(group_offsets=inp["group_offsets"].cpu()) if "group_offsets" in inp else \
        dict(layout="masked", m_max=s["m"], num_groups=s["g"])
    plan = plan_grouped_gemm(**kw, n=s["n"], k=s["k"], device=detect(w.device), dtype=w.dtype,
                             scale_mode=inp["scale_mode"], kernel=name)
    return dataclasses.replace(plan, cuda_raster=raster) if raster else plan


def _shapes(argv):
    if "--shapes" in argv:
        spec = argv[argv.index("--shapes") + 1]
        return [{k: (v if k in ("recipe", "layout") else int(v)) for k, v in (kv.split("=") for kv in one.split(","))}
                for one in spec.split(";") if one]
    shapes = [dict(g=g, m=m, n=n, k=k, recipe=r) for (n, k) in ((4096, 7168), (7168, 2048))
              for r in ("bf16", "fp8_rowwise")
              for (g, m) in ((8, 4096), (8, 512), (32, 128), (64, 64), (256, 16), (256, 4))]
    shapes += [dict(g=8, m=4096, n=4096, k=7168, recipe="fp8_blockwise"),
               dict(g=32, m=128, n=4096, k=7168, recipe="fp8_blockwise"),
               dict(g=4, m=256, n=4096, k=7168, layout="masked", recipe="fp8_blockwise"),
               dict(g=4, m=256, n=4096, k=7168, layout="masked"),
               dict(g=4, m=256, n=4096, k=7168, layout="masked", recipe="fp8_rowwise"),
               dict(g=16, m=256, n=4096, k=7168), dict(g=16, m=96, n=4096, k=7168),
               dict(g=16, m=256, n=4096, k=7168, recipe="fp8_rowwise"),
               dict(g=16, m=96, n=4096, k=7168, recipe="fp8_rowwise")]
    if "--quick" in argv:
        shapes = shapes[::4]
    if "--miss" in argv:
        shapes = [dict(g=g, m=m, n=n, k=k, recipe=r) for (n, k) in ((4096, 7168), (7168, 2048))
                  for r in ("bf16", "fp8_rowwise") for (g, m) in ((32, 128), (64, 96), (64, 64))]
        shapes += [dict(g=8, m=4096, n=n, k=k) for (n, k) in ((4096, 7168), (7168, 2048))]
    return shapes


def _spread(ts):
    return f" ±{(max(ts) - min(ts)) / 2 / statistics.median(ts) * 100:.1f}%" if len(ts) > 1 else ""


def main():
    argv = sys.argv
    kernels = CUDA_KERNELS
    if "--kernels" in argv:
        kernels = tuple(argv[argv.index("--kernels") + 1].split(","))
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 1
    gen = torch.Generator().manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    for sh in _shapes(argv):
        s = wl.normalize(sh)
        inp = wl.build(s, torch.device("cuda"), gen)
        w = inp["w"]
        name = str(w.dtype).removeprefix("torch.")
        avg = s["m"]
        pick = cuda_kernel_for(avg, n=s["n"], dtype=name, scale_mode=inp["scale_mode"], out_dtype="bfloat16",
                               device=detect(w.device))
        calls, line = {}, f"{wl.label(s):40s} plan {pick:10s}"
        for kernel in kernels:
            if kernel != "mma" and not sm90_supports(kernel.partition(":")[0], s["n"], name, inp["scale_mode"],
                                                     "bfloat16"):
                continue
            try:
                plan = _plan(s, inp, kernel)
                calls[kernel] = (lambda plan=plan: cuda_gg.grouped_gemm(**inp, plan=plan))
            except Exception as e:  # noqa: BLE001
                line += f" | {kernel} error {type(e).__name__}: {str(e)[:80]}"
        peer = next((p for pn, p in wl.peers(s, inp).items() if "torch" in pn and not isinstance(p, str)), None)
        if peer is not None:
            calls["torch"] = peer
        times = {k: [] for k in calls}
        for _ in range(repeat):
            for k, fn in list(calls.items()):
                try:
                    times[k].append(_time(fn))
                except Exception as e:  # noqa: BLE001
                    line += f" | {k} error {type(e).__name__}: {str(e)[:80]}"
                    del calls[k], times[k]
        res = {k: statistics.median(ts) for k, ts in times.items() if ts}
        for k, t in res.items():
            if k != "torch":
                line += (f" | {k} {t:7.1f} us{_spread(times[k])} {wl.flops(s) / t / 1e6:5.0f} TF"
                         f" {wl.bytes_moved(s) / t / 1e3:5.0f} GB/s")
        if "mma" in res:
            ref = calls["mma"]().float()
            for k in res:
                if k not in ("mma", "torch"):
                    d = float((calls[k]().float() - ref).abs().max()) / max(1e-6, float(ref.abs().max()))
                    line += f" | {k} diff {d:.0e}"
        if "torch" in res:
            tp = res["torch"]
            ours = [t for k, t in res.items() if k != "torch"]
            line += (f" | torch {tp:7.1f} us{_spread(times['torch'])}, best {tp / min(ours, default=float('nan')):4.2f}x,"
                     f" plan {tp / res.get(pick, float('nan')):4.2f}x")
        print(line, flush=True)
        del inp, calls
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

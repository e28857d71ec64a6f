"""Every CUDA grouped-GEMM kernel on the same calls: the own mma.sync kernel and the CUTLASS
sm90 kernels (forced through the plan), with torch._grouped_mm / torch._scaled_grouped_mm, on the
gg-targets shapes (CUDA graph of 5 back-to-back calls, median of 15 replays). The planner's
choice (`tiling.grouped_gemm.cuda_kernel_for`) follows these figures (docs/grouped_gemm_cuda.md).

    python benchmarks/cuda/gg_kernel_choice.py [--quick | --miss] [--kernels mma,sm90,...]

--miss: only the shapes where a configuration choice is close (64-128 tokens per group, bf16 and
fp8 rowwise; 8 x 4096 bf16); --kernels: only these kernels (mma, when listed, is the reference of
the "diff" column)."""
from __future__ import annotations

import statistics
import sys

import torch

from dualops.backends.cuda import grouped_gemm as cuda_gg
from dualops.bench import grouped_gemm as wl
from dualops.devices import detect
from dualops.tiling.grouped_gemm import CUDA_KERNELS, cuda_kernel_for, plan_grouped_gemm, sm90_supports

CALLS = 5


def _time(fn, reps=15):
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    graph.replay()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / CALLS)
    return statistics.median(ts) * 1e3   # us


def _plan(s, inp, kernel):
    w = inp["w"]
    kw = dict(group_offsets=inp["group_offsets"].cpu()) if "group_offsets" in inp else \
        dict(layout="masked", m_max=s["m"], num_groups=s["g"])
    return plan_grouped_gemm(**kw, n=s["n"], k=s["k"], device=detect(w.device), dtype=w.dtype,
                             scale_mode=inp["scale_mode"], kernel=kernel)


def main():
    quick = "--quick" in sys.argv
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
    if quick:
        shapes = shapes[::4]
    if "--miss" in sys.argv:
        shapes = [dict(g=g, m=m, n=n, k=k, recipe=r) for (n, k) in ((4096, 7168), (7168, 2048))
                  for r in ("bf16", "fp8_rowwise") for (g, m) in ((32, 128), (64, 96), (64, 64))]
        shapes += [dict(g=8, m=4096, n=n, k=k) for (n, k) in ((4096, 7168), (7168, 2048))]
    kernels = CUDA_KERNELS
    if "--kernels" in sys.argv:
        kernels = tuple(sys.argv[sys.argv.index("--kernels") + 1].split(","))
    gen = torch.Generator().manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    for sh in shapes:
        s = wl.normalize(sh)
        inp = wl.build(s, torch.device("cuda"), gen)
        w = inp["w"]
        name = str(w.dtype).removeprefix("torch.")
        pick = cuda_kernel_for(s["m"], n=s["n"], dtype=name, scale_mode=inp["scale_mode"], out_dtype="bfloat16",
                               device=detect(w.device))
        line = f"{wl.label(s):40s} plan {pick:10s}"
        res = {}
        for kernel in kernels:
            if kernel != "mma" and not sm90_supports(kernel, s["n"], name, inp["scale_mode"], "bfloat16"):
                continue
            try:
                plan = _plan(s, inp, kernel)
                res[kernel] = t = _time(lambda: cuda_gg.grouped_gemm(**inp, plan=plan))
                line += f" | {kernel} {t:7.1f} us {wl.flops(s) / t / 1e6:5.0f} TF {wl.bytes_moved(s) / t / 1e3:5.0f} GB/s"
            except Exception as e:  # noqa: BLE001
                line += f" | {kernel} error {type(e).__name__}: {str(e)[:80]}"
        if "mma" in res:
            ref = cuda_gg.grouped_gemm(**inp, plan=_plan(s, inp, "mma")).float()
            for kernel in res:
                if kernel != "mma":
                    got = cuda_gg.grouped_gemm(**inp, plan=_plan(s, inp, kernel)).float()
                    d = float((got - ref).abs().max()) / max(1e-6, float(ref.abs().max()))
                    line += f" | {kernel} diff {d:.0e}"
        for pname, peer in wl.peers(s, inp).items():
            if isinstance(peer, str) or "torch" not in pname:
                continue
            try:
                tp = _time(peer)
                best = min(res.values()) if res else float("nan")
                line += f" | torch {tp:7.1f} us, best {tp / best:4.2f}x, plan {tp / res.get(pick, float('nan')):4.2f}x"
            except Exception as e:  # noqa: BLE001
                line += f" | {name} error {type(e).__name__}: {str(e)[:60]}"
        print(line, flush=True)
        del inp
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

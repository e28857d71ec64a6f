"""Quick same-run timing of the CUDA grouped GEMM against torch._grouped_mm (bf16) and
torch._scaled_grouped_mm (fp8 rowwise) on the DeepSeek-V3 MoE shapes (CUDA events, warm-up,
median of 20). Prints one line per shape; the full sweep is ``python -m dualops bench --sweep gg``.

    python benchmarks/cuda/gg_quick_timing.py [--quick]"""
from __future__ import annotations

import statistics
import sys

import torch

import dualops
from dualops.bench import grouped_gemm as wl


def _time(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def main():
    quick = "--quick" in sys.argv
    shapes = []
    for n, k in ((4096, 7168), (7168, 2048)):
        for g, m in ((8, 4096), (8, 512), (32, 128), (64, 32), (256, 16), (256, 4)):
            for recipe in ("bf16", "fp8_rowwise", "fp8_blockwise"):
                if recipe == "fp8_blockwise" and (g, m) not in ((8, 4096), (256, 16)):
                    continue
                shapes.append(dict(g=g, m=m, n=n, k=k, recipe=recipe))
    shapes.append(dict(g=4, m=256, n=4096, k=7168, recipe="fp8_blockwise", layout="masked"))
    if quick:
        shapes = shapes[::3]
    gen = torch.Generator().manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    for sh in shapes:
        s = wl.normalize(sh)
        try:
            inp = wl.build(s, torch.device("cuda"), gen)
            ours = wl.call(inp, "cuda")
            t = _time(ours)
        except Exception as e:  # noqa: BLE001
            print(f"{wl.label(s):48s} dualops error: {type(e).__name__}: {e}")
            continue
        line = (f"{wl.label(s):48s} dualops {t * 1e3:9.1f} us  {wl.flops(s) / t / 1e9:7.1f} TFLOPS "
                f"{wl.bytes_moved(s) / t / 1e6:7.1f} GB/s")
        for name, peer in wl.peers(s, inp).items():
            if isinstance(peer, str):
                continue
            try:
                tp = _time(peer)
                line += f" | {name} {tp * 1e3:9.1f} us ratio {tp / t:5.2f}x"
            except Exception as e:  # noqa: BLE001
                line += f" | {name} error {type(e).__name__}: {str(e)[:60]}"
        print(line, flush=True)
        del inp
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

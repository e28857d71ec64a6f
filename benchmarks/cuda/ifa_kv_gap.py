"""Does the distance between the K and the V cache decide how fast a call streams? Our kernel
reads the K rows and the V rows of the same keys at the same time; when V sits exactly a large
power of two after K (two same-sized caches allocated back to back: the sweep's b128 h32/8 s1k
caches are 2^28 B each), every K request may meet its V request in the same DRAM bank. This
times our contiguous path and SDPA (BSHD, the same memory) with K and V carved out of one
allocation at several gaps (--scan: at distances of 2^28 .. 2^32 B). Run on the GPU machine:
python benchmarks/cuda/ifa_kv_gap.py [--scan]"""
import math

import torch
import torch.nn.functional as F

from dualops.bench.timing import time_cuda
from ifa_placement import ours  # (run from this directory's script: its folder is on sys.path)

L2 = 50 << 20
D = 128
GAPS = (0, 4 << 10, 64 << 10, 1 << 20, 2 << 20, 3 << 20, 8 << 20)


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          scale=D ** -0.5, enable_gqa=True)


def deltas(size):
    """V's distance from K: adjacent, and multiples of 2^28 .. 2^32 with and without 2 MB more."""
    out = [size]
    for e in range(28, 33):
        for x in (1 << e, (1 << e) + (2 << 20), 3 << e):
            if x >= size and x not in out and x <= (5 << 30):
                out.append(x)
    return sorted(out)


def main(scan=False):
    shapes = ((32, 8, 128, 1024), (64, 8, 128, 1024), (128, 128, 16, 1024), (32, 8, 128, 8192), (32, 8, 16, 32768))
    if scan:
        shapes = ((32, 8, 128, 1024), (32, 8, 16, 32768))
    for hq, hkv, b, s in shapes:
        shape = (b, s, hkv, D)
        nbytes = b * s * hkv * D * 2
        n = max(1, math.ceil(3 * L2 / (2 * nbytes)))
        qs = [torch.randn(b, 1, hq, D, dtype=torch.bfloat16, device="cuda") for _ in range(n)]
        lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
        f = None
        line = []
        for gap in ([d - nbytes for d in deltas(nbytes)] if scan else GAPS):
            bufs = [torch.empty(2 * nbytes + gap, dtype=torch.uint8, device="cuda") for _ in range(n)]
            ks = [x[:nbytes].view(torch.bfloat16).view(shape) for x in bufs]
            vs = [x[nbytes + gap:2 * nbytes + gap].view(torch.bfloat16).view(shape) for x in bufs]
            for x in ks + vs:
                x.normal_()
            f = f or ours(qs[0], ks[0], vs[0], lens)
            t_o = time_cuda(lambda i: f(qs[i], ks[i], vs[i]), n).median_us
            t_s = time_cuda(lambda i: sdpa(qs[i], ks[i], vs[i]), n).median_us
            line.append((f"delta {(nbytes + gap) / 2**30:.4f}G" if scan else f"gap {gap >> 10}K") +
                        f" ours {t_o:.1f} sdpa {t_s:.1f}")
            del bufs, ks, vs
            torch.cuda.empty_cache()
        print(f"h{hq}/{hkv} b{b} s{s} sets {n}: " + "; ".join(line), flush=True)
        del qs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    import sys

    main(scan="--scan" in sys.argv)

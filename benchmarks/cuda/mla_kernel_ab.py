"""A/B of the two CUDA MLA split kernels (mma.sync and wgmma) on 16-bit caches: per-call GPU time
from CUDA-graph replay (10 calls per graph, CUDA events, median of 10), same inputs for both.
Run on a GPU machine: python3 benchmarks/cuda/mla_kernel_ab.py [b,h_q,s_q,s_k,page ...]"""
import statistics
import sys

import torch

import dualops
from dualops.backends.cuda import mla_decode as cuda_mla

PLANNED = cuda_mla.cuda_mla_kernel
KERNELS = [k for k in cuda_mla.MLA_CUDA_KERNELS]


def ev_time(fn, n=10):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


def run(b, h, sq, sk, pbs, kernel):
    cuda_mla.cuda_mla_kernel = PLANNED if kernel == "planned" else (lambda device, **kw: kernel)
    d = 576
    per = -(-sk // pbs)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(b * per, pbs, 1, d, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(b * per, device="cuda").to(torch.int32).view(b, per)
    lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    plan = dualops.get_mla_metadata(lens, num_heads_q=h, s_q=sq, page_block_size=pbs)
    fn = lambda: dualops.mla_decode(q, kv, table, lens, plan=plan, causal=sq > 1)  # noqa: E731
    fn()
    torch.cuda.synchronize()
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        for _ in range(10):
            fn()
    us = ev_time(gr.replay) / 10
    fl = 2 * h * sq * b * sk * (d + 512)
    by = b * sk * d * 2
    return us, fl / us / 1e6, by / us / 1e3


shapes = [tuple(int(x) for x in a.split(",")) for a in sys.argv[1:]] or [
    (128, 128, 1, 4096, 64), (64, 16, 1, 4096, 64), (64, 32, 1, 4096, 64), (64, 64, 1, 4096, 64),
    (64, 16, 2, 4096, 64), (64, 8, 1, 4096, 64)]
print(torch.cuda.get_device_name())
for b, h, sq, sk, pbs in shapes:
    res = {k: run(b, h, sq, sk, pbs, k) for k in KERNELS}
    print(f"b{b} h{h} s_q{sq} s_k{sk} page{pbs}: " + "  ".join(
        f"{k} {us:7.1f} us {tf:4.0f} TF {gb:5.0f} GB/s" for k, (us, tf, gb) in res.items()))

"""A/B of the CUDA MLA split kernels (wgmma, wgmma_seesaw, and wgmma_t up to 32 q rows) on every cache format: per-call GPU
time from CUDA-graph replay (10 calls per graph, CUDA events, median of 10), same inputs for both.
Run on a GPU machine: python3 benchmarks/cuda/mla_kernel_ab.py [--only KERNEL] [b,h_q,s_q,s_k,page[,kv_format[,q[,varlen]]]] ...
(kv_format: bf16, fp8_v32, fp8_model1 or int8_v32; bf16 when left out; q: bf16 or fp16, bf16 when left out;
varlen: the request lengths of the benchmark's varlen rows, ~ N(s_k, s_k / 2); --only: time that
kernel alone, e.g. wgmma)."""
import statistics
import sys

import torch

import dualops
from dualops import ops
from dualops import quant
from dualops.backends.cuda import mla_decode as cuda_mla
from dualops.bench.mla_decode import lengths as bench_lengths
from dualops.heuristics.cuda import MLA_CUDA_WGMMA_T_ROWS

PLANNED = cuda_mla.cuda_mla_kernel
KERNELS = [k for k in cuda_mla.MLA_CUDA_KERNELS]
D_QK = {"bf16": 576, "fp8_v32": 576, "fp8_model1": 512, "int8_v32": 576}
TOKEN_BYTES = {"bf16": 1152, "fp8_v32": 656, "fp8_model1": 584, "int8_v32": 656}


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


def inputs(b, h, sq, sk, pbs, fmt, dtype=torch.bfloat16, varlen=False):
    d = D_QK[fmt]
    ls = bench_lengths(dict(b=b, s_k=sk, varlen=varlen))
    per = -(-max(ls) // pbs)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
    kv = torch.randn(b * per, pbs, 1, d, device="cuda", dtype=dtype if fmt == "bf16" else torch.bfloat16)
    if fmt != "bf16":
        kv = quant.pack_mla_kv(kv, fmt)
    table = torch.randperm(b * per, device="cuda").to(torch.int32).view(b, per)
    lens = torch.tensor(ls, dtype=torch.int32, device="cuda")
    plan = dualops.get_mla_metadata(lens, num_heads_q=h, s_q=sq, kv_format=fmt, page_block_size=pbs)
    return dict(q=q, kv_cache=kv, block_table=table, cache_seqlens=lens, plan=plan, causal=sq > 1, kv_format=fmt)


def run(args, h, sq, fmt, kernel):
    cuda_mla.cuda_mla_kernel = PLANNED if kernel == "planned" else (lambda device, **kw: kernel)
    ops._PREPARED.clear()  # (prepared eager launches keep the kernel chosen when they were made)
    fn = lambda: dualops.mla_decode(**args)  # noqa: E731
    fn()
    torch.cuda.synchronize()
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        for _ in range(10):
            fn()
    us = ev_time(gr.replay) / 10
    tokens = int(args["cache_seqlens"].sum())
    fl = 2 * h * sq * tokens * (D_QK[fmt] + 512)
    by = tokens * TOKEN_BYTES[fmt]
    return us, fl / us / 1e6, by / us / 1e3


argv = sys.argv[1:]
if argv[:1] == ["--only"]:
    KERNELS = [argv[1]]
    argv = argv[2:]
shapes = [a.split(",") for a in argv] or [
    s.split(",") for s in ("128,128,1,4096,64", "64,16,1,4096,64", "64,32,1,4096,64", "64,64,1,4096,64",
                           "64,16,2,4096,64", "64,8,1,4096,64")]
print(torch.cuda.get_device_name())
for s in shapes:
    b, h, sq, sk, pbs = (int(x) for x in s[:5])
    fmt = s[5] if len(s) > 5 else "bf16"
    qt = s[6] if len(s) > 6 else "bf16"
    varlen = s[7:8] == ["varlen"]
    args = inputs(b, h, sq, sk, pbs, fmt, torch.float16 if qt == "fp16" else torch.bfloat16, varlen)
    res = {k: run(args, h, sq, fmt, k) for k in KERNELS
           if (k != "wgmma_t" or h * sq <= MLA_CUDA_WGMMA_T_ROWS) and (k != "wgmma_seesaw" or fmt == "bf16")}
    planned = PLANNED(dualops.devices.profile("h100"), kv_format=fmt, q_rows=sq * h, page_block_size=pbs)
    print(f"{fmt} q {qt} b{b} h{h} s_q{sq} s_k{sk}{' varlen' if varlen else ''} page{pbs} (planned {planned}): " + "  ".join(
        f"{k} {us:7.1f} us {tf:4.0f} TF {gb:5.0f} GB/s" for k, (us, tf, gb) in res.items()), flush=True)
    del args
    torch.cuda.empty_cache()

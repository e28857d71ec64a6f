"""CUDA MLA decode timing (the MLA rows of BENCHMARKS.md): per-call GPU time from CUDA-graph
replay of 10 calls (CUDA events, median), the eager time beside it, and the copy bandwidth of
the same run. Run on a GPU machine: python3 benchmarks/cuda/mla_timing.py"""
import statistics, torch, dualops
from dualops import quant
torch.manual_seed(0)
dev = "cuda"
def ev_time(fn, n=30):
    for _ in range(5): fn()
    ts = []
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)
x = torch.empty(1 << 30, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
t = ev_time(lambda: y.copy_(x)); copy_bw = 2 * x.numel() / t / 1e3
print(f"{torch.cuda.get_device_name()}  copy {copy_bw:.0f} GB/s (read+write)"); del x, y
rows = [(128,128,1,4096,"bf16",64),(128,128,2,4096,"bf16",64),(128,128,1,8192,"bf16",64),(32,128,1,16384,"bf16",64),
        (64,16,1,4096,"bf16",64),(64,16,1,4096,"fp8_v32",64),(64,16,1,4096,"fp8_model1",64),
        (128,128,1,4096,"fp8_v32",64),(128,128,1,4096,"fp8_model1",64),(64,16,1,4096,"bf16",16),(64,16,1,4096,"bf16",256),(64,64,1,4096,"bf16",64)]
for b,h,sq,sk,fmt,pbs in rows:
    d = 512 if fmt == "fp8_model1" else 576
    per = -(-sk // pbs); nb = b * per
    q = torch.randn(b, sq, h, d, device=dev, dtype=torch.bfloat16)
    kv = torch.randn(nb, pbs, 1, d, device=dev, dtype=torch.bfloat16)
    if fmt != "bf16": kv = quant.pack_mla_kv(kv, fmt)
    table = torch.randperm(nb, device=dev).to(torch.int32).view(b, per)
    lens = torch.full((b,), sk, dtype=torch.int32, device=dev)
    plan = dualops.get_mla_metadata(lens, num_heads_q=h, s_q=sq, kv_format=fmt, page_block_size=pbs)
    fn = lambda: dualops.mla_decode(q, kv, table, lens, plan=plan, kv_format=fmt, causal=sq > 1)
    fn(); torch.cuda.synchronize()
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        for _ in range(10): fn()
    us = ev_time(gr.replay, 10) / 10  # GPU time per call (10 calls per graph, no host overhead)
    us_eager = ev_time(fn)
    fl = 2 * h * sq * b * sk * (d + 512); by = b * sk * quant.mla_bytes_per_token(fmt, d) + b * sq * h * (d + 512) * 2
    print(f"b{b} h{h} s_q{sq} s_k{sk} {fmt} page{pbs}: {us:8.1f} us  {fl/us/1e6:6.1f} TFLOPS  {by/us/1e3:6.0f} GB/s ({100*by/us/1e3/copy_bw:.0f}% of copy)  eager {us_eager:.1f} us")
    if (b, h, fmt, pbs) == (64, 16, "bf16", 64):
        us2 = ev_time(lambda: dualops.mla_decode(q, kv, table, lens, kv_format=fmt))
        print(f"   same with plan=None (device planner in the call): {us2:.1f} us")

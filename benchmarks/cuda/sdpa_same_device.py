"""Times torch SDPA (cuDNN) on long-context K/V shapes, for comparing the IFA kernels with
cuDNN's read rate on the same GPU (BENCHMARKS.md, IFA CUDA section). Same method as
dualops.bench: BSHD view of a contiguous [B, S, H_kv, 128] bf16 cache, enable_gqa, sets rotated
so a run streams >= 3x L2, CUDA events, median of 25 runs after warm-up; each run starts behind
a ~100 us GPU sleep so the host's launch latency (cuDNN's eager SDPA call costs the host ~20 us)
is not counted. Prints the kernel names SDPA ran for the first shape."""
import statistics

import torch
import torch.nn.functional as F

SHAPES = [  # (name, b, s, h_q, h_kv)
    ("h32/8 b16 s128k", 16, 131072, 32, 8),
    ("h32/8 b1 s128k", 1, 131072, 32, 8),
    ("h64/8 b1 s128k", 1, 131072, 64, 8),
    ("h32/8 b16 s32k", 16, 32768, 32, 8),
    ("h128/128 b1 s32k", 1, 32768, 128, 128),
    ("h8/1 b16 s128k", 16, 131072, 8, 1),
    ("h8/1 b1 s128k", 1, 131072, 8, 1),
]


def median_us(fn, n_sets, runs=25, warm=3):
    times = []
    for r in range(warm + runs):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(200_000)  # GPU busy ~100 us: the host's launch latency is not timed
        e0.record()
        for i in range(n_sets):
            fn(i)
        e1.record()
        torch.cuda.synchronize()
        if r >= warm:
            times.append(e0.elapsed_time(e1) * 1000 / n_sets)
    return statistics.median(times)


def main():
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = props.L2_cache_size
    print(f"device: {props.name}, torch {torch.__version__}")
    src = torch.randn(1 << 29, device=dev, dtype=torch.bfloat16)  # 1 GiB
    dst = torch.empty_like(src)
    us = median_us(lambda i: dst.copy_(src), 1)
    print(f"copy probe 1074 MB: {us:.1f} us, {2 * src.numel() * 2 / us / 1e3:.0f} GB/s (read+write)")
    del src, dst
    for k, (name, b, s, hq, hkv) in enumerate(SHAPES):
        kv_bytes = 2 * b * s * hkv * 128 * 2
        n_sets = max(1, -(-3 * l2 // kv_bytes))
        sets = []
        for _ in range(n_sets):
            kc = torch.randn(b, s, hkv, 128, device=dev, dtype=torch.bfloat16)
            vc = torch.randn(b, s, hkv, 128, device=dev, dtype=torch.bfloat16)
            q = torch.randn(b, hq, 1, 128, device=dev, dtype=torch.bfloat16)
            sets.append((q, kc.transpose(1, 2), vc.transpose(1, 2)))

        def call(i):
            q, kk, vv = sets[i]
            return F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True)

        if k == 0:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                call(0)
                torch.cuda.synchronize()
            names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
            print("SDPA kernels:", sorted(names))
        us = median_us(call, n_sets)
        print(f"SDPA {name:18s} bshd-view sets {n_sets}: {us:9.1f} us  {kv_bytes / us / 1e3:6.0f} GB/s of K+V")
        # the contiguous BHSD copy (dualops.bench keeps the faster of the two layouts)
        sets = [(q, kk.contiguous(), vv.contiguous()) for q, kk, vv in sets]
        torch.cuda.empty_cache()
        us = median_us(call, n_sets)
        print(f"SDPA {name:18s} bhsd      sets {n_sets}: {us:9.1f} us  {kv_bytes / us / 1e3:6.0f} GB/s of K+V")
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""Host time of an eager `dualops.incre_flash_attention` and `dualops.mla_decode` call on CUDA
tensors (BENCHMARKS.md "Host overhead of an eager call").

Per configuration: warm-up, then `--calls` back-to-back eager calls (few enough that the launch
queue never fills, so the host is never held by the GPU); host µs per call = the loop's wall time
/ calls, median of `--reps` loops; end to end = the same loop followed by a synchronize. Also
timed in the same process: for IFA torch's eager SDPA (`enable_gqa=True`) on the same tensors,
and a bare `torch.empty` of the output (the allocator's share). MLA calls pass the step's plan
(`dualops.get_mla_metadata`, made once, as a decode step's layers do). `--profile` prints cProfile's top functions
of the first configuration. Run it against another copy of the package (an A/B of the Python
glue) with PYTHONPATH pointing there; `--json` saves the rows.

    python benchmarks/cuda/host_overhead.py [--op ifa|mla|all] [--calls 300] [--reps 7] [--profile] [--json F]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time

import torch
import torch.nn.functional as F

import dualops
from dualops import quant


def _ifa_configs(dev):
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device=dev, dtype=torch.bfloat16)

    out = []
    for name, b, hq, hkv, s in (("b16 h32/8 s4k", 16, 32, 8, 4096), ("b1 h8/1 s8k (64 splits)", 1, 8, 1, 8192)):
        q, k, v = rnd(b, 1, hq, 128), rnd(b, s, hkv, 128), rnd(b, s, hkv, 128)
        lens = torch.full((b,), s, dtype=torch.int32, device=dev)
        out.append(_ifa_row(name + " bf16", dict(q=q, k_cache=k, v_cache=v, kv_lens=lens), q, k, v))
    b, hq, hkv, s, bs = 16, 32, 8, 4096, 64
    q, k, v = rnd(b, 1, hq, 128), rnd(b, s, hkv, 128), rnd(b, s, hkv, 128)
    kq, ks, ko = quant.quantize_kv_int8(k)
    vq, vs, vo = quant.quantize_kv_int8(v)
    nb = b * s // bs
    table = torch.randperm(nb, device=dev).to(torch.int32).view(b, s // bs)
    lens = torch.full((b,), s, dtype=torch.int32, device=dev)
    out.append(_ifa_row("b16 h32/8 s4k int8 paged64", dict(
        q=q, k_cache=kq.view(nb, bs, hkv, 128), v_cache=vq.view(nb, bs, hkv, 128), kv_lens=lens,
        block_table=table, k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo), q, k, v))
    return out


def _ifa_row(name, kw, q, k, v):
    """(name, our call, peer call, output shape): the peer is torch's SDPA on the same tensors."""
    qs, ks, vs = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return ("IFA " + name, lambda: dualops.incre_flash_attention(**kw),
            lambda: F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True), q.shape)


def _mla_configs(dev):
    g = torch.Generator(device=dev).manual_seed(0)
    out = []
    for b, h, s, fmt in ((64, 16, 4096, "bf16"), (32, 128, 1024, "bf16"), (64, 16, 4096, "fp8_v32")):
        d, pbs = 576, 64
        q = torch.randn(b, 1, h, d, generator=g, device=dev, dtype=torch.bfloat16)
        kv = torch.randn(b * s // pbs, pbs, 1, d, generator=g, device=dev, dtype=torch.bfloat16)
        if fmt != "bf16":
            kv = quant.pack_mla_kv(kv, fmt)
        table = torch.randperm(b * s // pbs, device=dev).to(torch.int32).view(b, s // pbs)
        lens = torch.full((b,), s, dtype=torch.int32, device=dev)
        plan = dualops.get_mla_metadata(lens, num_heads_q=h, kv_format=fmt, page_block_size=pbs)
        kw = dict(q=q, kv_cache=kv, block_table=table, cache_seqlens=lens, plan=plan, kv_format=fmt)
        out.append((f"MLA b{b} h{h} s{s // 1024}k {fmt}", (lambda kw=kw: dualops.mla_decode(**kw)), None,
                    (b, 1, h, 512)))
    return out


def _loop_us(fn, calls, reps):
    host, e2e = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) / calls * 1e6)
        e2e.append((t2 - t0) / calls * 1e6)
    return statistics.median(host), statistics.median(e2e)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", choices=("ifa", "mla", "all"), default="all")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    dev = torch.device("cuda")
    rows = []
    print(f"dualops from {dualops.__file__}; {torch.cuda.get_device_name()}, torch {torch.__version__}")
    configs = (_ifa_configs(dev) if a.op in ("ifa", "all") else []) + \
        (_mla_configs(dev) if a.op in ("mla", "all") else [])
    for name, ours, peer, out_shape in configs:
        def empty(out_shape=out_shape):
            torch.empty(out_shape, dtype=torch.bfloat16, device=dev)

        timed = [("ours", ours)] + ([("sdpa", peer)] if peer else []) + [("empty", empty)]
        for _, fn in timed:
            for _ in range(50):
                fn()
        row = {"config": name}
        for label, fn in timed:
            row[label + "_host_us"], row[label + "_e2e_us"] = _loop_us(fn, a.calls, a.reps)
        rows.append(row)
        peer_txt = (f"SDPA host {row['sdpa_host_us']:6.1f} ({row['sdpa_e2e_us']:6.1f}) | " if peer else "")
        print(f"{name:34s} ours host {row['ours_host_us']:6.1f} us (end to end {row['ours_e2e_us']:6.1f}) | "
              f"{peer_txt}torch.empty {row['empty_host_us']:4.1f}")
        if a.profile and len(rows) == 1:
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(a.calls):
                ours()
            pr.disable()
            torch.cuda.synchronize()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
            print(s.getvalue())
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
                       "dualops": dualops.__file__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

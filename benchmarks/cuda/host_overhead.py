"""Host time of an eager `dualops.incre_flash_attention` and `dualops.mla_decode` call on CUDA
tensors (BENCHMARKS.md "Host overhead of an eager call").

Per configuration: warm-up, then `--calls` back-to-back eager calls (few enough that the launch
queue never fills, so the host is never held by the GPU: the b16 s4k rows take ~90 µs of GPU time
a call, and 300 of them held the host at the GPU's pace); host µs per call = the loop's wall time
/ calls, median of `--reps` loops; end to end = the same loop followed by a synchronize. Also
timed in the same process: for IFA torch's eager SDPA (`enable_gqa=True`) on the same tensors,
and a bare `torch.empty` of the output (the allocator's share). MLA calls pass the step's plan
(`dualops.get_mla_metadata`, made once, as a decode step's layers do). `--profile` prints cProfile's top functions
of the first configuration. Run it against another copy of the package (an A/B of the Python
glue) with PYTHONPATH pointing there; `--json` saves the rows.

`--device cpu` (the default where no GPU is present) times the same calls on CPU tensors through
the reference backend with its op functions replaced by a stub that only allocates the outputs, so
the figure is the host glue alone (API, dispatcher, validation cache, prepared launch); `--no-stub`
runs the real reference (or `--backend ascend_sim`) instead.

    python benchmarks/cuda/host_overhead.py [--op ifa|mla|all] [--calls 100] [--reps 7] [--profile] [--json F]
                                            [--device cuda|cpu] [--backend reference|ascend_sim] [--no-stub]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import statistics
import time

import torch
import torch.nn.functional as F

import dualops
from dualops import quant


def _ifa_configs(dev, s_scale=1, backend=None):
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device=dev, dtype=torch.bfloat16)

    out = []
    for name, b, hq, hkv, s in (("b16 h32/8 s4k", 16, 32, 8, 4096), ("b1 h8/1 s8k (64 splits)", 1, 8, 1, 8192)):
        s //= s_scale
        q, k, v = rnd(b, 1, hq, 128), rnd(b, s, hkv, 128), rnd(b, s, hkv, 128)
        lens = torch.full((b,), s, dtype=torch.int32, device=dev)
        out.append(_ifa_row(name + " bf16", dict(q=q, k_cache=k, v_cache=v, kv_lens=lens, backend=backend), q, k, v))
    b, hq, hkv, s, bs = 16, 32, 8, 4096 // s_scale, 64
    q, k, v = rnd(b, 1, hq, 128), rnd(b, s, hkv, 128), rnd(b, s, hkv, 128)
    kq, ks, ko = quant.quantize_kv_int8(k)
    vq, vs, vo = quant.quantize_kv_int8(v)
    nb = b * s // bs
    table = torch.randperm(nb, device=dev).to(torch.int32).view(b, s // bs)
    lens = torch.full((b,), s, dtype=torch.int32, device=dev)
    out.append(_ifa_row("b16 h32/8 s4k int8 paged64", dict(
        q=q, k_cache=kq.view(nb, bs, hkv, 128), v_cache=vq.view(nb, bs, hkv, 128), kv_lens=lens,
        block_table=table, k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo, backend=backend), q, k, v))
    return out


def _ifa_row(name, kw, q, k, v):
    """(name, our call, peer call, output shape): the peer is torch's SDPA on the same tensors."""
    qs, ks, vs = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return ("IFA " + name, lambda: dualops.incre_flash_attention(**kw),
            lambda: F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True), q.shape)


def _mla_configs(dev, s_scale=1, backend=None):
    g = torch.Generator(device=dev).manual_seed(0)
    out = []
    for b, h, s, fmt in ((64, 16, 4096, "bf16"), (32, 128, 1024, "bf16"), (64, 16, 4096, "fp8_v32")):
        d, pbs = 576, 64
        s = max(pbs, s // s_scale)
        q = torch.randn(b, 1, h, d, generator=g, device=dev, dtype=torch.bfloat16)
        kv = torch.randn(b * s // pbs, pbs, 1, d, generator=g, device=dev, dtype=torch.bfloat16)
        if fmt != "bf16":
            kv = quant.pack_mla_kv(kv, fmt)
        table = torch.randperm(b * s // pbs, device=dev).to(torch.int32).view(b, s // pbs)
        lens = torch.full((b,), s, dtype=torch.int32, device=dev)
        plan = dualops.get_mla_metadata(lens, num_heads_q=h, kv_format=fmt, page_block_size=pbs)
        kw = dict(q=q, kv_cache=kv, block_table=table, cache_seqlens=lens, plan=plan, kv_format=fmt, backend=backend)
        out.append((f"MLA b{b} h{h} s{s // 1024}k {fmt}" if s >= 1024 else f"MLA b{b} h{h} s{s} {fmt}", (lambda kw=kw: dualops.mla_decode(**kw)), None,
                    (b, 1, h, 512)))
    return out


def _stub_reference():
    """Replace the reference backend's op functions by ones that only allocate the outputs: what is
    left of a call's host time is the glue's."""
    from dualops.backends import reference as ref

    def ifa(q, k_cache, v_cache, *, plan=None, **kw):
        B, S, H, _ = q.shape
        return q.new_empty(q.shape), q.new_empty((B, H, S), dtype=torch.float32)

    def mla(q, kv_cache, block_table, cache_seqlens, *, plan=None, **kw):
        B, S, H, _ = q.shape
        return q.new_empty((B, S, H, 512)), q.new_empty((B, H, S), dtype=torch.float32)

    ref.incre_flash_attention, ref.mla_decode = ifa, mla


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _loop_us(fn, calls, reps, dev):
    host, e2e = [], []
    for _ in range(reps):
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        _sync(dev)
        t2 = time.perf_counter()
        host.append((t1 - t0) / calls * 1e6)
        e2e.append((t2 - t0) / calls * 1e6)
    return statistics.median(host), statistics.median(e2e)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", choices=("ifa", "mla", "all"), default="all")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--backend", choices=("reference", "ascend_sim"), default="reference",
                    help="--device cpu: the backend the calls name (default reference)")
    ap.add_argument("--no-stub", dest="stub", action="store_false",
                    help="--device cpu: run the backend's real op functions (default: a stub that allocates the outputs)")
    a = ap.parse_args(argv)
    dev = torch.device(a.device)
    rows = []
    if dev.type == "cuda":
        where, backend, s_scale = torch.cuda.get_device_name(), None, 1
    else:
        backend, s_scale = a.backend, 64       # short caches: the host glue does not depend on their length
        stubbed = a.stub and backend == "reference"
        if stubbed:
            _stub_reference()
        where = f"CPU {platform.processor() or platform.machine()}, backend {backend}{' (stub)' if stubbed else ''}"
    print(f"dualops from {dualops.__file__}; {where}, torch {torch.__version__}")
    configs = (_ifa_configs(dev, s_scale, backend) if a.op in ("ifa", "all") else []) + \
        (_mla_configs(dev, s_scale, backend) if a.op in ("mla", "all") else [])
    for name, ours, peer, out_shape in configs:
        def empty(out_shape=out_shape):
            torch.empty(out_shape, dtype=torch.bfloat16, device=dev)

        if dev.type != "cuda":
            peer = None     # torch's CPU SDPA computes for milliseconds: no host-time peer
        timed = [("ours", ours)] + ([("sdpa", peer)] if peer else []) + [("empty", empty)]
        for _, fn in timed:
            for _ in range(50):
                fn()
        row = {"config": name}
        for label, fn in timed:
            row[label + "_host_us"], row[label + "_e2e_us"] = _loop_us(fn, a.calls, a.reps, dev)
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
            _sync(dev)
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
            print(s.getvalue())
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": where, "date": time.strftime("%Y-%m-%d"),
                       "dualops": dualops.__file__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

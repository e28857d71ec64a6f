"""Measurement probes of the CUDA IFA kernels, one subcommand per stage of scripts/gpu_job.sh
(each the study of a BENCHMARKS.md item; run on the GPU machine with dualops built):

  shapes             the same calls under the CTA shape in PROBE_TUNE, and the kernel
                     torch's SDPA runs
  small [MODE]       latency of small / latency-bound calls at the plan's and other split counts
                     (MODE: a label for the PROBE_TUNE the caller set -- auto, combkern, nopdl;
                     auto also times SDPA on the same data)
  durations          a few small calls, ours and SDPA's, for Nsight Compute to time kernel by kernel
  splits KV          split counts around the plan's, on a bf16 / int8 / fp8 cache
  layouts            where V sits relative to K (separate, one buffer, fused), and split counts of
                     single-wave calls
  prof HQ HKV B S KV one call (bf16 or int8 cache) repeated, for Nsight Compute
  sassmix SASS       the opcode mix of the D = 128 split kernels in a cuobjdump -sass listing

PROBE_QUICK=1 keeps the first configuration of each list (a check that the probes still run).
PROBE_TUNE="ifa_merge=kernel,ifa_cta_shape=narrow,..." runs every call under those tuning overrides
(dualops.tuning.override; docs/tuning.md).
"""
from __future__ import annotations

import collections
import os
import re
import sys

QUICK = os.environ.get("PROBE_QUICK") == "1"


def _configs(cfgs):
    return cfgs[:1] if QUICK else cfgs


def _bf16_sets(b, s, hq, hkv, n, D=128):
    """n sets of (q, k, v): bf16, [B, S, H, D] caches of s keys."""
    import torch

    qs = [torch.randn(b, 1, hq, D, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    ks = [torch.randn(b, s, hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    vs = [torch.randn_like(x) for x in ks]
    return qs, ks, vs


def _call_kwargs(b, s, plan=None, **extra):
    """Keyword arguments of the backend call: every request s keys long, no mask / pse."""
    import torch

    kw = dict(kv_lens=torch.full((b,), s, dtype=torch.int32, device="cuda"), block_table=None, softmax_scale=0.088,
              causal=False, atten_mask=None, pse_shift=None, k_scale=None, v_scale=None, k_offset=None, v_offset=None)
    kw.update(extra)
    if plan is not None:
        kw["plan"] = plan
    return kw


def _time_ours(qs, ks, vs, kw, n):
    from dualops.backends.cuda import incre_flash_attention as cb
    from dualops.bench.timing import time_cuda

    return time_cuda(lambda i: cb.incre_flash_attention(qs[i], ks[i], vs[i], **kw), n).median_us


def _rotation(nbytes):
    from dualops.bench.timing import l2_bytes, rotation_count

    return rotation_count(nbytes, l2_bytes())


def shapes():
    import torch
    import torch.nn.functional as F
    from dualops.backends.cuda import incre_flash_attention as cb

    shape = dict(_tune_pairs()).get("ifa_cta_shape", "auto")
    for hq, hkv, b, s in _configs(((32, 8, 16, 32768), (128, 128, 1, 131072), (8, 1, 128, 32768), (32, 8, 1, 131072),
                                   (32, 8, 16, 1024), (32, 8, 128, 1024), (8, 1, 1, 8192))):
        n = _rotation(b * s * hkv * 512)
        qs, ks, vs = _bf16_sets(b, s, hq, hkv, n)
        plan = cb.make_ifa_plan(qs[0], ks[0], None)
        us = _time_ours(qs, ks, vs, _call_kwargs(b, s, plan), n)
        gbs = b * s * hkv * 512 / (us * 1e-6) / 1e9
        print(f"shape={shape:6s} h{hq}/{hkv} b{b} s{s} splits={plan.num_splits}: {us:8.1f} us {gbs:6.0f} GB/s",
              flush=True)
        qs = ks = vs = None  # (free before the next configuration allocates)
    if shape == "auto":
        q = torch.randn(16, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(16, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
            torch.cuda.synchronize()
        print("SDPA kernels:", sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"}))


def small(mode="auto"):
    import torch.nn.functional as F
    from dualops.backends.cuda import incre_flash_attention as cb
    from dualops.bench.timing import time_cuda

    cfgs = [(8, 1, 1, 16, ()), (8, 1, 1, 256, ()), (8, 1, 1, 1024, (1, 8, 16)), (8, 1, 1, 8192, (16, 64)),
            (8, 1, 1, 32768, (32, 64)), (8, 1, 1, 131072, (64,)),
            (32, 8, 1, 1024, (8, 16)), (32, 8, 1, 8192, (8, 32)), (8, 1, 16, 1024, (2, 8)), (32, 8, 16, 1024, (2,)),
            (32, 8, 128, 1024, ()), (128, 128, 1, 1024, (2,)), (8, 1, 128, 1024, ())]
    for hq, hkv, b, s, alts in _configs(cfgs):
        n = _rotation(b * s * hkv * 512)
        qs, ks, vs = _bf16_sets(b, s, hq, hkv, n)
        base = cb.make_ifa_plan(qs[0], ks[0], None)
        line = f"{mode:8s} h{hq}/{hkv} b{b} s{s}:"
        for ns in (base.num_splits,) + tuple(a for a in alts if a != base.num_splits):
            plan = base.with_splits(ns, granule=128)
            line += f"  ns{plan.num_splits}={_time_ours(qs, ks, vs, _call_kwargs(b, s, plan), n):.1f}"
        if mode == "auto":
            t1 = time_cuda(lambda i: F.scaled_dot_product_attention(qs[i].transpose(1, 2), ks[i].transpose(1, 2),
                                                                    vs[i].transpose(1, 2), enable_gqa=True), n)
            qc, kc, vc = ([x.transpose(1, 2).contiguous() for x in xs] for xs in (qs, ks, vs))
            t2 = time_cuda(lambda i: F.scaled_dot_product_attention(qc[i], kc[i], vc[i], enable_gqa=True), n)
            line += f"  SDPA={min(t1.median_us, t2.median_us):.1f}"
            del qc, kc, vc
        print(line, flush=True)
        qs = ks = vs = None  # (free before the next configuration allocates)


def durations():
    import torch
    import torch.nn.functional as F
    from dualops.backends.cuda import incre_flash_attention as cb

    for hq, hkv, b, s in _configs(((8, 1, 1, 1024), (8, 1, 1, 8192), (32, 8, 16, 1024))):
        (q,), (k,), (v,) = _bf16_sets(b, s, hq, hkv, 1)
        kw = _call_kwargs(b, s)
        for _ in range(3):
            cb.incre_flash_attention(q, k, v, **kw)
            F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True)
        torch.cuda.synchronize()


def splits(kv):
    from dualops.backends.cuda import incre_flash_attention as cb
    from dualops.bench import ifa_workload
    from dualops.bench.timing import time_cuda

    nbytes = 2 if kv == "bf16" else 1
    cfgs = ((8, 1, 1, 131072, (64, 128)), (8, 1, 1, 32768, (64, 128)), (8, 1, 1, 8192, (16, 32, 64)),
            (32, 8, 1, 32768, (16, 32)), (64, 8, 1, 32768, (16, 32)), (32, 8, 1, 8192, (8, 16, 32)),
            (8, 1, 16, 8192, (8, 16)), (8, 1, 16, 32768, (8, 16)), (8, 1, 1, 1024, (4, 8)),
            (8, 1, 16, 1024, (4, 8)), (32, 8, 1, 1024, (4, 8)), (8, 1, 1, 2048, (8, 16)), (8, 1, 1, 4096, (16, 32)),
            (8, 1, 2, 8192, (32, 64)), (8, 1, 8, 2048, (8, 16)), (32, 8, 2, 1024, (4, 8)))
    # SPLITS_FROM=N: from the N-th configuration on (the later ones alone)
    for hq, hkv, b, s, alts in _configs(cfgs[int(os.environ.get("SPLITS_FROM", "0")):]):
        n = _rotation(b * s * hkv * 256 * nbytes)
        # the bench sweep's inputs (int8 with per-channel scales and offsets, fp8 with scales)
        shape = ifa_workload.normalize(dict(b=b, h_q=hq, h_kv=hkv, s_kv=s, kv_dtype=kv))
        sets = [ifa_workload.build(shape, "cuda", None) for _ in range(n)]
        keys = ("k_scale", "v_scale", "k_offset", "v_offset")
        base = cb.make_ifa_plan(sets[0]["q"], sets[0]["k_cache"], None)
        line = f"{kv} h{hq}/{hkv} b{b} s{s}:"
        for ns in (base.num_splits,) + tuple(a for a in alts if a != base.num_splits):
            kws = [_call_kwargs(b, s, base.with_splits(ns), **{k: x.get(k) for k in keys}) for x in sets]
            t = time_cuda(lambda i: cb.incre_flash_attention(sets[i]["q"], sets[i]["k_cache"], sets[i]["v_cache"],
                                                             **kws[i]), n)
            line += f"  ns{kws[0]['plan'].num_splits}={t.median_us:.1f}"
        print(line, flush=True)
        sets = None  # (free before the next configuration allocates)


def layouts():
    import torch
    from dualops.backends.cuda import incre_flash_attention as cb

    def run(q, k, v, b, s, plan, label, nbytes):
        us = _time_ours([q], [k], [v], _call_kwargs(b, s, plan), 1)
        print(f"{label} {us:8.1f} us {nbytes / (us * 1e-6) / 1e9:6.0f} GB/s", flush=True)

    for hq, hkv, b, s in _configs(((32, 8, 16, 32768), (128, 128, 1, 131072), (8, 1, 128, 32768))):
        shape, n = (b, s, hkv, 128), b * s * hkv * 128
        (q,), (k,), (v,) = _bf16_sets(b, s, hq, hkv, 1)
        name = f"h{hq}/{hkv} b{b} s{s}"
        run(q, k, v, b, s, cb.make_ifa_plan(q, k, None), f"{name} {'separate':22s}", 4 * n)
        del k, v
        for pad in (4096 + 512, (1 << 20) + 37 * 256):
            buf = torch.randn(2 * n + pad // 2, device="cuda", dtype=torch.bfloat16)
            k, v = buf[:n].view(shape), buf[n + pad // 2:].view(shape)
            run(q, k, v, b, s, cb.make_ifa_plan(q, k, None), f"{name} {f'one buffer, V +{pad} B':22s}", 4 * n)
            del buf, k, v
        kv = torch.randn(b, s, hkv, 2, 128, device="cuda", dtype=torch.bfloat16)
        k, v = kv[..., 0, :], kv[..., 1, :]
        run(q, k, v, b, s, cb.make_ifa_plan(q, k, None), f"{name} {'fused [B,S,H,2,D]':22s}", 4 * n)
        del kv, k, v
    for hq, hkv, b, s in _configs(((128, 128, 1, 131072), (32, 8, 16, 32768))):
        (q,), (k,), (v,) = _bf16_sets(b, s, hq, hkv, 1)
        base = cb.make_ifa_plan(q, k, None)
        for ns in (1, 2, 4, 8, 16):
            run(q, k, v, b, s, base.with_splits(ns, split_len=s // ns), f"h{hq}/{hkv} b{b} s{s} splits={ns:2d}",
                b * s * hkv * 512)
        del k, v


def prof(hq, hkv, b, s, kv):
    import torch
    from dualops.backends.cuda import incre_flash_attention as cb

    hq, hkv, b, s = int(hq), int(hkv), int(b), int(s)
    (q,), (k,), (v,) = _bf16_sets(b, s, hq, hkv, 1)
    extra = {}
    if kv == "int8":
        k = torch.randint(-128, 128, k.shape, device="cuda", dtype=torch.int8)
        v = k.clone()
        sc = torch.full((hkv, 128), 0.01, device="cuda")
        extra = dict(k_scale=sc, v_scale=sc)
    kw = _call_kwargs(b, s, **extra)
    for _ in range(5):
        cb.incre_flash_attention(q, k, v, **kw)
    torch.cuda.synchronize()
    print(cb.make_ifa_plan(q, k, None).describe())


def sassmix(path):
    fn, hist = None, {}
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            fn = m.group(1)
            hist[fn] = collections.Counter()
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if fn and m:
            hist[fn][m.group(1)] += 1
    for fn, h in hist.items():
        if "ifa_split_kernel" in fn and "Li128ELi16E" in fn:
            print(fn, sum(h.values()), dict(h.most_common(25)))


COMMANDS = dict(shapes=shapes, small=small, durations=durations, splits=splits, layouts=layouts, prof=prof,
                sassmix=sassmix)

def _tune_pairs():
    from dualops.tiling.plan_info import _pairs, _value

    return [(k, _value(v)) for k, v in _pairs(os.environ.get("PROBE_TUNE", ""), "PROBE_TUNE").items()]


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(COMMANDS)}}} [args]\n\n{__doc__}")
    from dualops import tuning

    with tuning.override(**dict(_tune_pairs())):
        COMMANDS[sys.argv[1]](*sys.argv[2:])

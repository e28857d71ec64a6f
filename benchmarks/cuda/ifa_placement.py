"""Why do some multi-wave s1k calls run slower on the sweep's contiguous caches than on a paged
copy of the same data? Times our kernel, as the sweep does (rotated input sets, CUDA graphs), on
the sweep's contiguous tensors, on fresh clones of them, on paged copies whose blocks are in
random order (as the sweep's) and in order, and on the contiguous tensors with a block table in
order (the paged path reading the contiguous memory). Run on the GPU machine:
python benchmarks/cuda/ifa_placement.py"""
import math

import torch

from dualops.backends.cuda import incre_flash_attention as cb
from dualops.bench.timing import time_cuda

L2 = 50 << 20
D = 128


def ours(q, k, v, lens, table=None):
    plan = cb.make_ifa_plan(q, k, table)
    kw = dict(kv_lens=lens, block_table=table, softmax_scale=D ** -0.5, causal=False, atten_mask=None,
              pse_shift=None, k_scale=None, v_scale=None, k_offset=None, v_offset=None, plan=plan)
    return lambda qq, kk, vv: cb.incre_flash_attention(qq, kk, vv, **kw)


def paged(x, perm, bs):
    b, s, h, d = x.shape
    per = s // bs
    pool = torch.empty(b * per, bs, h, d, dtype=x.dtype, device=x.device)
    pool[perm] = x.reshape(b * per, bs, h, d)
    return pool


def main():
    gen = torch.Generator().manual_seed(0)
    for hq, hkv, b, s in ((128, 128, 1, 1024), (128, 128, 16, 1024), (32, 8, 128, 1024), (8, 1, 128, 1024),
                          (32, 8, 16, 32768)):
        kv_bytes = 2 * b * s * hkv * D * 2
        n = max(1, math.ceil(3 * L2 / kv_bytes))
        qs = [torch.randn(b, 1, hq, D, dtype=torch.bfloat16, device="cuda") for _ in range(n)]
        ks = [torch.randn(b, s, hkv, D, dtype=torch.bfloat16, device="cuda") for _ in range(n)]
        vs = [torch.randn(b, s, hkv, D, dtype=torch.bfloat16, device="cuda") for _ in range(n)]
        lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
        res = {}

        def t(name, fn):
            res[name] = time_cuda(fn, n).median_us

        f = ours(qs[0], ks[0], vs[0], lens)
        t("contiguous", lambda i: f(qs[i], ks[i], vs[i]))
        kc = [x.clone() for x in ks]
        vc = [x.clone() for x in vs]
        t("contiguous clone", lambda i: f(qs[i], kc[i], vc[i]))
        del kc, vc
        bs = 64
        per = s // bs
        ident = torch.arange(b * per, dtype=torch.int32, device="cuda").view(b, per)
        fi = ours(qs[0], ks[0].view(b * per, bs, hkv, D), vs[0].view(b * per, bs, hkv, D), lens, ident)
        t("contig mem, table in order", lambda i: fi(qs[i], ks[i].view(b * per, bs, hkv, D),
                                                    vs[i].view(b * per, bs, hkv, D)))
        perm = torch.randperm(b * per, generator=gen).to("cuda")
        table = perm.view(b, per).to(torch.int32)
        kp = [paged(x, perm, bs) for x in ks]
        vp = [paged(x, perm, bs) for x in vs]
        fp = ours(qs[0], kp[0], vp[0], lens, table)
        t("paged64 random order", lambda i: fp(qs[i], kp[i], vp[i]))
        del kp, vp
        ip = torch.arange(b * per, device="cuda")
        kp = [paged(x, ip, bs) for x in ks]
        vp = [paged(x, ip, bs) for x in vs]
        fo = ours(qs[0], kp[0], vp[0], lens, ident)
        t("paged64 in order", lambda i: fo(qs[i], kp[i], vp[i]))
        del kp, vp
        print(f"h{hq}/{hkv} b{b} s{s} sets {n}: " + ", ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
        del qs, ks, vs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""Accuracy of this library's CUDA MLA decode and of FlashMLA's dense decode on the same inputs,
each checked against dualops.reference.mla_decode (fp32) by the library's parity method
(dualops.testing.compare with the bf16 budgets: per element |a - b| <= 1e-3 or <= 2/128 |b|, and
the cosine difference). FlashMLA rounds the softmax weights P to bf16 once before P V; this
library multiplies V by P's hi and lo bf16 parts. The script shows what that costs in accuracy.

Run on a GPU machine with the GPU peers kit on PYTHONPATH (its environment script run):
    python3 benchmarks/cuda/mla_peer_parity.py [--seeds N]
Prints, per input set and implementation, the calls that fail the check, the failing elements,
the largest absolute error of out and the largest cosine difference."""
import argparse

import torch

import dualops
from dualops.reference import mla_decode as ref_mla_decode
from dualops.testing import LSE_TOLERANCE, compare, tolerance_for

D_QK, D_V, PAGE = 576, 512, 64


def lengths(kind, b, g):
    if kind.startswith("equal"):
        return torch.full((b,), int(kind[5:]), dtype=torch.int32)
    if kind == "varlen":  # ~ N(4096, 2048), at least 1
        return (torch.randn(b, generator=g) * 2048 + 4096).clamp(min=1).to(torch.int32)
    lo, hi = (int(x) for x in kind.split("-"))  # uniform in [lo, hi]
    return torch.randint(lo, hi + 1, (b,), generator=g, dtype=torch.int32)


def inputs(b, h, kind, seed):
    g = torch.Generator().manual_seed(seed)
    lens = lengths(kind, b, g)
    per = [-(-int(n) // PAGE) for n in lens]
    nblk = sum(per)
    q = torch.randn(b, 1, h, D_QK, generator=g).to(torch.bfloat16)
    kv = torch.randn(nblk, PAGE, 1, D_QK, generator=g).to(torch.bfloat16)
    ids = torch.randperm(nblk, generator=g).to(torch.int32)
    table = torch.zeros(b, max(per), dtype=torch.int32)
    at = 0
    for i, n in enumerate(per):
        table[i, :n] = ids[at:at + n]
        at += n
    return [t.cuda() for t in (q, kv, table, lens)]


def check(out, lse, ref_out, ref_lse):
    atol, rtol, cos = tolerance_for(torch.bfloat16)
    co = compare(out, ref_out, atol=atol, rtol=rtol, cos_eps=cos)
    la, lr, lc = LSE_TOLERANCE
    cl = compare(lse, ref_lse, atol=la, rtol=lr, cos_eps=lc)
    return co, cl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    import peer_flashmla as pf  # (the GPU peers kit, on PYTHONPATH)

    sets = [(128, 128, "equal4096"), (128, 128, "varlen"), (64, 128, "1-64"), (64, 16, "1-64"),
            (64, 128, "2-8"), (64, 16, "4096-4096")]
    print(torch.cuda.get_device_name())
    print(f"{'input set':28s} {'impl':9s} {'calls failing':>13s} {'elements failing':>16s} "
          f"{'max |err| out':>13s} {'max cos diff':>12s} {'lse fails':>9s}")
    for b, h, kind in sets:
        rows = {"dualops": [0, 0, 0, 0.0, 0.0, 0], "flash_mla": [0, 0, 0, 0.0, 0.0, 0]}
        for s in range(args.seeds):
            q, kv, table, lens = inputs(b, h, kind, 1000 * s + b + h)
            ref_out, ref_lse = ref_mla_decode(q, kv, table, lens, head_dim_v=D_V)
            res = {
                "dualops": dualops.mla_decode(q=q, kv_cache=kv, block_table=table, cache_seqlens=lens),
                "flash_mla": pf.flashmla_dense_decode(q, kv, table, lens, D_V),
            }
            for name, (out, lse) in res.items():
                co, cl = check(out, lse, ref_out, ref_lse)
                r = rows[name]
                r[0] += 1
                r[1] += int(not co.ok)
                r[2] += co.mismatched
                r[3] = max(r[3], co.max_abs)
                r[4] = max(r[4], co.cos_diff)
                r[5] += int(not cl.ok)
        numel = b * h * D_V
        for name, r in rows.items():
            print(f"{f'b{b} h_q{h} s_k {kind}':28s} {name:9s} {f'{r[1]} / {r[0]}':>13s} "
                  f"{f'{r[2]} / {r[0] * numel}':>16s} {r[3]:13.4g} {r[4]:12.3g} {r[5]:9d}")


if __name__ == "__main__":
    main()

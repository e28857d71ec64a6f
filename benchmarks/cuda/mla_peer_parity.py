"""Accuracy of this library's CUDA MLA decode, of FlashMLA's dense decode and of FlashInfer's MLA
decode on the same inputs, each checked against dualops.reference.mla_decode (fp32) by the parity
contract (docs/parity.md): per element |a - b| <= 1e-3 + 2/128 |b| + 2 * budget, the budget being
the rounding term the reference computes on the same inputs (P rounded once to bf16), plus the
cosine difference and the special-value rule; lse likewise. Each row says PASS or FAIL under the
contract, the worst error as a multiple of its bound, and, for contrast, how many elements the
old check without the rounding term (|a - b| <= 1e-3 or <= 2/128 |b|) rejects.

Run on a GPU machine with the GPU peers kit on PYTHONPATH (its environment script run):
    python3 benchmarks/cuda/mla_peer_parity.py [--seeds N] [--no-poison] [--impl NAME ...]
Inputs: randn q and cache (bf16), randomly permuted block tables, and (unless --no-poison) NaN in
every cache slot past a request's length, as the parity method has it. Exit status 1 if any
implementation fails the contract."""
import argparse
import sys

import torch

import dualops
from dualops.reference import mla_decode as ref_mla_decode
from dualops.testing import LSE_TOLERANCE, compare, tolerance_for

D_QK, D_V, PAGE = 576, 512, 64
SETS = [(128, 128, "equal4096"), (128, 128, "varlen"), (64, 128, "1-64"), (64, 16, "1-64"),
        (64, 128, "2-8"), (64, 16, "4096-4096")]


def lengths(kind, b, g):
    if kind.startswith("equal"):
        return torch.full((b,), int(kind[5:]), dtype=torch.int32)
    if kind == "varlen":  # ~ N(4096, 2048), at least 1
        return (torch.randn(b, generator=g) * 2048 + 4096).clamp(min=1).to(torch.int32)
    lo, hi = (int(x) for x in kind.split("-"))  # uniform in [lo, hi]
    return torch.randint(lo, hi + 1, (b,), generator=g, dtype=torch.int32)


def inputs(b, h, kind, seed, poison):
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
        if poison and int(lens[i]) % PAGE:
            kv[int(ids[at + n - 1]), int(lens[i]) % PAGE:] = float("nan")   # slots past the length
        at += n
    return [t.cuda() for t in (q, kv, table, lens)]


def implementations(names):
    impls = {"dualops": lambda q, kv, t, n: dualops.mla_decode(q=q, kv_cache=kv, block_table=t, cache_seqlens=n)}
    if "flash_mla" in names:
        import peer_flashmla as pf  # the GPU peers kit, on PYTHONPATH
        impls["flash_mla"] = lambda q, kv, t, n: pf.flashmla_dense_decode(q, kv, t, n, D_V)
    if "flashinfer" in names:
        import peer_flashinfer as pfi
        impls["flashinfer"] = lambda q, kv, t, n: pfi.mla_decode(q, kv, t, n, D_V, return_lse=True)
    return {k: v for k, v in impls.items() if k in names}


def check(out, lse, ref_out, ref_lse, budget, with_budget=True):
    atol, rtol, cos = tolerance_for(torch.bfloat16)
    la, lr, lc = LSE_TOLERANCE
    co = compare(out, ref_out, atol=atol, rtol=rtol, cos_eps=cos, budget=budget.out if with_budget else None)
    cl = compare(lse, ref_lse, atol=la, rtol=lr, cos_eps=lc, budget=budget.lse if with_budget else None)
    return co, cl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--no-poison", action="store_true", help="random values (not NaN) in slots past the lengths")
    ap.add_argument("--impl", nargs="+", default=["dualops", "flash_mla", "flashinfer"],
                    choices=["dualops", "flash_mla", "flashinfer"])
    args = ap.parse_args()
    impls = implementations(args.impl)
    print(torch.cuda.get_device_name(), "| poisoned slots:", not args.no_poison)
    print(f"{'input set':24s} {'impl':10s} {'contract':>8s} {'calls ok':>8s} {'worst':>7s} {'max cos':>9s} "
          f"{'lse ok':>6s} {'old check: elements failing':>28s}")
    failed = False
    for b, h, kind in SETS:
        rows = {name: dict(calls=0, ok=0, worst=0.0, cos=0.0, lse_ok=0, old=0) for name in impls}
        for s in range(args.seeds):
            q, kv, table, lens = inputs(b, h, kind, 1000 * s + b + h, not args.no_poison)
            ref_out, ref_lse, budget = ref_mla_decode(q, kv, table, lens, head_dim_v=D_V, return_budget=True)
            for name, fn in impls.items():
                out, lse = fn(q, kv, table, lens)
                co, cl = check(out, lse, ref_out, ref_lse, budget)
                old, _ = check(out, lse, ref_out, ref_lse, budget, with_budget=False)
                r = rows[name]
                r["calls"] += 1
                r["ok"] += int(co.ok and cl.ok)
                r["worst"] = max(r["worst"], co.worst, cl.worst)
                r["cos"] = max(r["cos"], co.cos_diff)
                r["lse_ok"] += int(cl.ok)
                r["old"] += old.mismatched
        numel = b * h * D_V
        for name, r in rows.items():
            verdict = "PASS" if r["ok"] == r["calls"] else "FAIL"
            failed |= verdict == "FAIL"
            old = f"{r['old']} / {r['calls'] * numel}"
            print(f"{f'b{b} h_q{h} s_k {kind}':24s} {name:10s} {verdict:>8s} {r['ok']:>4d}/{r['calls']:<3d} "
                  f"{r['worst']:7.3f} {r['cos']:9.2e} {r['lse_ok']:>6d} {old:>28s}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

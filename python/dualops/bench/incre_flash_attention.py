"""The IFA benchmark sweep of BENCHMARKS.md: our CUDA backend against torch SDPA (``enable_gqa=True``) in
the same run, on contiguous and paged (64 / 128) caches and on int8 / fp8 caches; GB/s of K+V
read and its share of the measured copy bandwidth.

``sweep()`` returns the rows (dicts) so the CLI can print or save them; ``format_rows`` makes the
table; ``python -m dualops.bench.incre_flash_attention [--quick] [--json PATH]`` runs it alone.
Every timing is the median of many CUDA-graph replays over input sets rotated beyond the L2.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import sys

import torch
import torch.nn.functional as F

from .timing import copy_bandwidth_gbs, l2_bytes, rotation_count, time_cuda

HEADS = ((8, 1), (32, 8), (64, 8), (128, 128))
BATCHES = (1, 16, 128)
SEQS = (1024, 8192, 32768, 131072)
HEAD_DIM = 128
KV_CAP_BYTES = 8 * 2**30      # K+V bytes of one configuration (keeps the sweep to a few minutes)
PAGES = (64, 128)
QUANT_MIN_S = 8192            # int8 / fp8 rows from this context length (the target)

QUICK_POINTS = ((1, 8192), (16, 4096), (1, 131072), (128, 1024))


def _points(quick: bool, heads):
    for hq, hkv in heads:
        pts = QUICK_POINTS if quick else [(b, s) for b in BATCHES for s in SEQS]
        for b, s in pts:
            if b * s * hkv * HEAD_DIM * 2 * 2 <= KV_CAP_BYTES:
                yield hq, hkv, b, s


def _ours(q, k, v, kv_lens, block_table=None, k_scale=None, v_scale=None, offset=None):
    from ..backends.cuda import incre_flash_attention as cb

    plan = cb.make_ifa_plan(q, k, block_table)
    kw = dict(kv_lens=kv_lens, block_table=block_table, softmax_scale=q.shape[-1] ** -0.5,
              causal=False, atten_mask=None, pse_shift=None, k_scale=k_scale, v_scale=v_scale,
              k_offset=offset, v_offset=offset, plan=plan)
    return plan, (lambda qq, kk, vv: cb.incre_flash_attention(qq, kk, vv, **kw))


def _paged(k, v, block_size, gen):
    """Scatter contiguous [b, s, h, d] caches into a randomly permuted pool of pages."""
    b, s, h, d = k.shape
    per = math.ceil(s / block_size)
    nblk = b * per
    perm = torch.randperm(nblk, generator=gen).to(k.device)
    table = perm.view(b, per).to(torch.int32)
    pad = per * block_size - s

    def scatter(x):
        if pad:
            x = torch.cat([x, x.new_zeros(b, pad, h, d)], dim=1)
        pool = torch.empty(nblk, block_size, h, d, dtype=x.dtype, device=x.device)
        pool[perm] = x.reshape(b * per, block_size, h, d)
        return pool

    return scatter(k), scatter(v), table


def _bench_config(hq, hkv, b, s, *, copy_gbs, l2, graph, runs, gen, quant, paged):
    dev = torch.device("cuda")
    d = HEAD_DIM
    kv_bytes = b * s * hkv * d * 2 * 2
    n_sets = rotation_count(kv_bytes, l2)
    lens = torch.full((b,), s, dtype=torch.int32, device=dev)
    qs = [torch.randn(b, 1, hq, d, dtype=torch.bfloat16, device=dev) for _ in range(n_sets)]
    ks = [torch.randn(b, s, hkv, d, dtype=torch.bfloat16, device=dev) for _ in range(n_sets)]
    vs = [torch.randn(b, s, hkv, d, dtype=torch.bfloat16, device=dev) for _ in range(n_sets)]
    rows = []
    base = dict(h_q=hq, h_kv=hkv, b=b, s_kv=s, d=d, n_sets=n_sets)

    def row(variant, t, nbytes, plan=None, **extra):
        gbs = nbytes / (t.median_us * 1e-6) / 1e9
        r = dict(variant=variant, **base, us=t.median_us, p10_us=t.p10_us, p90_us=t.p90_us,
                 kv_gbs=gbs, pct_copy=100.0 * gbs / copy_gbs if copy_gbs else math.nan)
        if plan is not None:
            # splits: of every group, or "N (last wave)" where only the last wave's groups split
            splits = f"{plan.num_splits} (last wave)" if plan.whole_groups else plan.num_splits
            r.update(splits=splits, units=plan.num_units)
        r.update(extra)
        rows.append(r)
        return r

    plan, ours = _ours(qs[0], ks[0], vs[0], lens)
    t_ours = time_cuda(lambda i: ours(qs[i], ks[i], vs[i]), n_sets, graph=graph, runs=runs)

    # SDPA on the same storage seen as [b, h, s, d] (flash attention's own BSHD layout) and on a
    # contiguous BHSD copy; the faster of the two is the figure to beat. Ours runs on both as well
    # (a BHSD cache is a strided [b, s, h, d] view to it): where the tensors sit in DRAM moves some
    # multi-wave calls by up to 10 % (BENCHMARKS.md, "Method"), so each side is compared on its faster
    # layout ("vs_sdpa"), and on the very same memory ("vs_sdpa_same": BSHD, both).
    def sdpa(qq, kk, vv):
        return F.scaled_dot_product_attention(qq.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2),
                                              enable_gqa=True)

    t_view = time_cuda(lambda i: sdpa(qs[i], ks[i], vs[i]), n_sets, graph=graph, runs=runs)
    t_sdpa, layout = t_view, "bshd"
    t_best, our_layout = t_ours, "bshd"
    t_oc = None  # ours on the BHSD copies (where they fit)
    if kv_bytes * n_sets * 2 <= 2 * KV_CAP_BYTES:
        kc = [x.transpose(1, 2).contiguous() for x in ks]
        vc = [x.transpose(1, 2).contiguous() for x in vs]
        qc = [x.transpose(1, 2).contiguous() for x in qs]
        t_c = time_cuda(lambda i: F.scaled_dot_product_attention(qc[i], kc[i], vc[i], enable_gqa=True), n_sets,
                        graph=graph, runs=runs)
        if t_c.median_us < t_sdpa.median_us:
            t_sdpa, layout = t_c, "bhsd"
        kt = [x.transpose(1, 2) for x in kc]  # [b, s, h, d] views of the BHSD copies
        vt = [x.transpose(1, 2) for x in vc]
        _, ours_t = _ours(qs[0], kt[0], vt[0], lens)
        t_oc = time_cuda(lambda i: ours_t(qs[i], kt[i], vt[i]), n_sets, graph=graph, runs=runs)
        if t_oc.median_us < t_best.median_us:
            t_best, our_layout = t_oc, "bhsd"
        del kc, vc, qc, kt, vt
    contig = row("contiguous", t_ours, kv_bytes, plan, sdpa_us=t_sdpa.median_us, sdpa_layout=layout,
                 best_us=t_best.median_us, layout=our_layout, vs_sdpa=t_sdpa.median_us / t_best.median_us,
                 vs_sdpa_same=t_view.median_us / t_ours.median_us)

    if quant and s >= QUANT_MIN_S:
        # 8-bit caches hold half the bytes: their own rotation, so that one pass still moves >= 3x L2
        n_q = rotation_count(kv_bytes // 2, l2)
        for name, make in (("int8", lambda x: torch.randint(-128, 128, x.shape, dtype=torch.int8, device=dev)),
                           ("fp8", lambda x: x.to(torch.float8_e4m3fn))):
            kq = [make(ks[i % n_sets]) for i in range(n_q)]
            vq = [make(vs[i % n_sets]) for i in range(n_q)]
            sc = torch.rand(hkv, d, device=dev) * 0.02 + 0.005
            # int8 as the default (asymmetric) quantizer makes it: per-channel scales and offsets
            off = torch.rand(hkv, d, device=dev) * 6 - 3 if name == "int8" else None

            def run_8bit(label, kk, vv, bf16_us):
                planq, oq = _ours(qs[0], kk[0], vv[0], lens, k_scale=sc, v_scale=sc, offset=off)
                tq = time_cuda(lambda i: oq(qs[i % n_sets], kk[i], vv[i]), n_q, graph=graph, runs=runs)
                row(label, tq, kv_bytes // 2, planq, n_sets=n_q, vs_bf16=tq.median_us / bf16_us)

            run_8bit(name, kq, vq, contig["us"])
            if t_oc is not None:
                # the same on BHSD caches (each head's keys contiguous), against bf16 on BHSD: the
                # layout moves single-wave 8-bit calls more than bf16 ones
                def bhsd(xs):
                    return [x.transpose(1, 2).contiguous().transpose(1, 2) for x in xs]

                run_8bit(f"{name} bhsd", bhsd(kq), bhsd(vq), t_oc.median_us)
            del kq, vq
    if paged:
        for bs in PAGES:
            kp, vp, tables = [], [], []
            for x, y in zip(ks, vs):
                a, c, tb = _paged(x, y, bs, gen)
                kp.append(a), vp.append(c), tables.append(tb)
            planp, op = _ours(qs[0], kp[0], vp[0], lens, block_table=tables[0])
            from ..backends.cuda import incre_flash_attention as cb

            kw = dict(kv_lens=lens, softmax_scale=d ** -0.5, causal=False, atten_mask=None, pse_shift=None,
                      k_scale=None, v_scale=None, k_offset=None, v_offset=None, plan=planp)
            tp = time_cuda(lambda i: cb.incre_flash_attention(qs[i], kp[i], vp[i], block_table=tables[i], **kw),
                           n_sets, graph=graph, runs=runs)
            row(f"paged{bs}", tp, kv_bytes, planp, contig_over_paged=contig["us"] / tp.median_us)
            del kp, vp, tables
    del qs, ks, vs
    torch.cuda.empty_cache()
    return rows


def sweep(*, quick: bool = False, heads=HEADS, graph: bool = True, runs: int = 30, quant: bool = True,
          paged: bool = True, progress=None) -> dict:
    """Run the IFA sweep on the current CUDA device. Returns {"device", "date", "copy", "rows"}."""
    if not torch.cuda.is_available():
        raise RuntimeError("the IFA benchmark needs a CUDA device")
    from ..backends.cuda import incre_flash_attention as cb

    ok, why = cb.status()
    if not ok:
        raise RuntimeError(f"CUDA backend not available: {why}")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    copy = copy_bandwidth_gbs()
    l2 = l2_bytes()
    rows = []
    for hq, hkv, b, s in _points(quick, heads):
        rs = _bench_config(hq, hkv, b, s, copy_gbs=copy["gbs"], l2=l2, graph=graph, runs=runs, gen=gen,
                           quant=quant, paged=paged)
        rows.extend(rs)
        if progress:
            progress(format_rows(rs, header=False))
    return {"device": torch.cuda.get_device_name(), "date": _dt.date.today().isoformat(),
            "torch": torch.__version__, "copy": copy, "graph": graph, "rows": rows}


def format_rows(rows, header: bool = True) -> str:
    cols = ("variant", "h_q", "h_kv", "b", "s_kv", "splits", "us", "best_us", "sdpa_us", "vs_sdpa", "vs_sdpa_same",
            "kv_gbs", "pct_copy", "vs_bf16", "contig_over_paged")
    heads = ("variant", "hq", "hkv", "b", "s_kv", "spl", "us", "best_us", "sdpa_us", "xSDPA", "xSDPAmem", "GB/s",
             "%copy", "q/bf16", "c/paged")
    out = []
    if header:
        out.append(" ".join(f"{h:>10}" for h in heads))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            if isinstance(v, float):
                v = f"{v:.3f}" if c.startswith(("vs_", "contig")) else f"{v:.1f}"
            cells.append(f"{v!s:>10}")
        out.append(" ".join(cells))
    return "\n".join(out)


def summarize(result: dict) -> str:
    """The issue's targets against the rows."""
    rows = result["rows"]
    lines = []
    con = [r for r in rows if r["variant"] == "contiguous"]
    if con:
        worst = min(con, key=lambda r: r["vs_sdpa"])
        lines.append(f"contiguous vs SDPA (each on its faster layout): min {worst['vs_sdpa']:.3f}x "
                     f"(h{worst['h_q']}/{worst['h_kv']} b{worst['b']} s{worst['s_kv']}), "
                     f"{sum(r['vs_sdpa'] >= 1.0 for r in con)}/{len(con)} >= 1.0x")
        same = min(con, key=lambda r: r["vs_sdpa_same"])
        lines.append(f"contiguous vs SDPA (same BSHD memory): min {same['vs_sdpa_same']:.3f}x "
                     f"(h{same['h_q']}/{same['h_kv']} b{same['b']} s{same['s_kv']}), "
                     f"{sum(r['vs_sdpa_same'] >= 1.0 for r in con)}/{len(con)} >= 1.0x")
    for bs in PAGES:
        pg = [r for r in rows if r["variant"] == f"paged{bs}"]
        if pg:
            w = min(pg, key=lambda r: r["contig_over_paged"])
            lines.append(f"paged{bs} / contiguous speed: min {w['contig_over_paged']:.3f} "
                         f"({sum(r['contig_over_paged'] >= 0.95 for r in pg)}/{len(pg)} >= 0.95)")
    for name in ("int8", "fp8", "int8 bhsd", "fp8 bhsd"):
        qr = [r for r in rows if r["variant"] == name]
        if qr:
            w = max(qr, key=lambda r: r["vs_bf16"])
            what = f"{name.split()[0]} time / bf16" + (" (both BHSD)" if " " in name else "")
            lines.append(f"{what}: max {w['vs_bf16']:.3f} ({sum(r['vs_bf16'] <= 0.6 for r in qr)}/"
                         f"{len(qr)} <= 0.6)")
    big = [r for r in con if r["b"] == 1 and r["s_kv"] >= 131072]
    for r in big:
        lines.append(f"b1 s{r['s_kv']} h{r['h_q']}/{r['h_kv']}: {r['kv_gbs']:.0f} GB/s = {r['pct_copy']:.1f}% "
                     f"of copy ({r['splits']} splits)")
    return "\n".join(lines)


def markdown_table(result: dict) -> str:
    """The sweep as the Markdown table of BENCHMARKS.md: one line per contiguous config, with its
    paged and 8-bit rows as ratio columns."""
    rows = result["rows"]
    by = {}
    for r in rows:
        by.setdefault((r["h_q"], r["h_kv"], r["b"], r["s_kv"]), {})[r["variant"]] = r

    def layout(r, key, lay):
        return f"{r[key]:.1f}" + (" (BHSD)" if r.get(lay) == "bhsd" else "")

    cols = ["h_q/h_kv", "b", "s_kv", "splits", "ours µs (BSHD)", "ours best µs", "SDPA best µs", "ours/SDPA best",
            "ours/SDPA same memory", "K+V GB/s", "% of copy"] + [f"paged{bs} speed vs contig" for bs in PAGES] + [
            "int8 time / bf16", "fp8 time / bf16", "int8 / bf16, both BHSD", "fp8 / bf16, both BHSD"]
    out = ["| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 1)]
    for (hq, hkv, b, s), v in by.items():
        c = v.get("contiguous")
        if c is None:
            continue
        cells = [f"{hq}/{hkv}", str(b), str(s), str(c["splits"]), f"{c['us']:.1f}", layout(c, "best_us", "layout"),
                 layout(c, "sdpa_us", "sdpa_layout"), f"{c['vs_sdpa']:.2f}", f"{c['vs_sdpa_same']:.2f}",
                 f"{c['kv_gbs']:.0f}", f"{c['pct_copy']:.0f}"]
        cells += [f"{v[f'paged{bs}']['contig_over_paged']:.2f}" if f"paged{bs}" in v else "–" for bs in PAGES]
        cells += [f"{v[q]['vs_bf16']:.2f}" if q in v else "–" for q in ("int8", "fp8", "int8 bhsd", "fp8 bhsd")]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few points per head config")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--eager", action="store_true", help="time eager calls instead of CUDA-graph replays")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--markdown", metavar="JSON", help="print the table of a saved sweep (--json) and its summary")
    args = ap.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as f:
            res = json.load(f)
        print(markdown_table(res))
        print(f"\n{res['device']}, {res['date']}, torch {res['torch']}, copy {res['copy']['gbs']:.0f} GB/s")
        print(summarize(res))
        return 0
    print(format_rows([], header=True), flush=True)
    res = sweep(quick=args.quick, graph=not args.eager, runs=args.runs, progress=lambda s: print(s, flush=True))
    print(f"device {res['device']}, {res['date']}, torch {res['torch']}, copy {res['copy']['gbs']:.0f} GB/s")
    print(summarize(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

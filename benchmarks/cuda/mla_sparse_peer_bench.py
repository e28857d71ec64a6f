"""Sparse MLA decode, dualops' CUDA kernels against FlashMLA's sm90 sparse FP8 decode (the kernel
DeepSeek-V3.2 deployments run), on the same inputs: q bf16 [b, s_q, h_q, 576], a cache in
FlashMLA's FP8 "v32" layout (656 bytes per token, dualops.quant.pack_mla_kv(kv, "fp8_v32")), and
per query token topk token ids (block * page + offset) drawn at random from its request's s_k
cached tokens (dualops.bench.mla_decode.build, the inputs of the BENCHMARKS.md sparse rows).

FlashMLA runs from the prebuilt benchmark peer (benchmarks/cuda/flashmla_sparse_peer: its
build.sh makes .peers_sparse/libflashmla_sparse_peer.so; never a dependency of dualops); its
column is skipped with the reason when the library is absent. dualops runs
dualops.mla_decode(..., backend="cuda") with a host plan; FlashMLA with its scheduler metadata,
both made once outside the timed region (as a decode step reuses them across layers).

Timing: dualops.bench.timing.time_cuda, one call per CUDA graph replay, device events, 200 ms
warm-up, the median of --runs runs (default 30). Every call reads b * s_q * topk tokens spread
over a cache far larger than the L2 (both are printed). Accuracy: max |a - b| between the two
outputs (out bf16, lse fp32), and of each against dualops' fp32 reference on the first requests.

FlashMLA's sm90 kernel takes 64 or 128 query heads only. Rows with fewer heads run FlashMLA on q
padded with zero heads to 64 (how a serving engine runs it at that head count; the padding copy
is not timed, the outputs of the real heads are compared), unless --no-pad.

Run on an H100 / H200 (the dualops CUDA backend built, the peer library carried):
    PYTHONPATH=python python3 benchmarks/cuda/mla_sparse_peer_bench.py [ROW ...] [--runs N]
        [--s-k 8192] [--lib PATH] [--no-pad] [--ref-requests 2] [--json FILE]
ROW: b,h_q,s_q,topk (default: 128,128,2,2048 128,16,2,2048 128,32,2,2048 128,64,2,2048).
--dry-run: tiny inputs on the CPU, checking the inputs, the reference and the peer's argument
checks (no GPU needed; nothing is timed).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

import dualops
from dualops.bench import mla_decode as workload

HERE = Path(__file__).resolve().parent
ROWS = ["128,128,2,2048", "128,16,2,2048", "128,32,2,2048", "128,64,2,2048"]
PEER_HEADS = (64, 128)


def load_peer():
    """benchmarks/cuda/flashmla_sparse_peer/peer.py as a module (it is not a package)."""
    name = "flashmla_sparse_peer"
    spec = importlib.util.spec_from_file_location(name, HERE / "flashmla_sparse_peer" / "peer.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def parse_row(text: str) -> dict:
    try:
        b, h, sq, topk = (int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"row {text!r}: expected b,h_q,s_q,topk (e.g. 128,128,2,2048)")
    return dict(b=b, h_q=h, s_q=sq, topk=topk)


def shape_of(row: dict, s_k: int) -> dict:
    return workload.normalize(dict(row, s_k=s_k, page=64, kv_format="fp8_v32"))


def peer_inputs(inputs: dict, pad: bool):
    """(q as FlashMLA gets it, how many heads are real, a note) or a string saying why FlashMLA
    cannot run the row."""
    q = inputs["q"]
    h = q.shape[2]
    if h in PEER_HEADS:
        return q, h, ""
    if not pad or h > 64:
        return f"FlashMLA's sm90 sparse decode takes h_q 64 or 128, not {h}" + ("" if h > 64 else " (--no-pad)")
    qp = torch.zeros(*q.shape[:2], 64, q.shape[3], dtype=q.dtype, device=q.device)
    qp[:, :, :h] = q
    return qp, h, f"q padded {h} -> 64 heads"


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def reference(inputs: dict, n: int, scale: float):
    """dualops' fp32 reference on the first n requests: (out, lse)."""
    sub = {k: (v[:n] if k in ("q", "indices", "block_table", "cache_seqlens") else v)
           for k, v in inputs.items() if k != "plan"}
    return dualops.mla_decode(**sub, softmax_scale=scale, backend="reference")


def bench_row(row: dict, args, peer, peer_skip: str | None, device) -> dict:
    from dualops.bench.timing import time_cuda

    s = shape_of(row, args.s_k)
    g = torch.Generator().manual_seed(args.seed)
    inputs = workload.build(s, device, g)
    scale = s["d_qk"] ** -0.5
    res = dict(row=workload.label(s), shape=s, bytes_per_call=workload.bytes_moved(s),
               flops_per_call=workload.flops(s), cache_bytes=inputs["kv_cache"].numel())
    cuda = device != "cpu"

    def ours():
        return dualops.mla_decode(**inputs, softmax_scale=scale, backend="cuda")

    out_d = lse_d = None
    if cuda:
        try:
            out_d, lse_d = ours()
            res["dualops"] = time_cuda(lambda i: ours(), 1, runs=args.runs).as_dict()
        except Exception as e:  # a build without the CUDA kernels, an unsupported variant
            res["dualops"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]

    if out_d is not None:
        # the same call through dualops.compat.flash_mla, with FlashMLA's argument list as the peer
        # gets it: the same tensors reach both (the result matches the direct call's)
        from dualops.compat import flash_mla as compat

        meta, _ = compat.get_mla_metadata()
        out_c, _ = compat.flash_mla_with_kvcache(inputs["q"], inputs["kv_cache"], None, None, 512, meta, None,
                                                 softmax_scale=scale, is_fp8_kvcache=True,
                                                 indices=inputs["indices"], backend="cuda")
        res["compat_vs_direct"] = max_diff(out_c, out_d)

    got = peer_inputs(inputs, not args.no_pad)
    out_f = lse_f = None
    if peer_skip is not None:
        res["flashmla"] = peer_skip
    elif isinstance(got, str):
        res["flashmla"] = got
    else:
        qf, real, note = got
        res["flashmla_note"] = note
        meta, _ = peer.get_mla_metadata()

        def theirs():
            return peer.flash_mla_with_kvcache(qf, inputs["kv_cache"], None, None, 512, meta, None,
                                               softmax_scale=scale, is_fp8_kvcache=True, indices=inputs["indices"],
                                               lib_path=args.lib)
        try:
            out_f, lse_f = theirs()
            out_f, lse_f = out_f[:, :, :real], lse_f[:, :real]
            res["flashmla"] = time_cuda(lambda i: theirs(), 1, runs=args.runs).as_dict()
        except Exception as e:
            res["flashmla"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]

    if out_d is not None and out_f is not None:
        res["max_abs_diff_out"] = max_diff(out_d, out_f)
        res["max_abs_diff_lse"] = max_diff(lse_d, lse_f)
        res["max_abs_out"] = float(out_d.float().abs().max())
    if args.ref_requests > 0:
        n = min(args.ref_requests, s["b"])
        ref_out, ref_lse = reference(inputs, n, scale)
        for name, o, l in (("dualops", out_d, lse_d), ("flashmla", out_f, lse_f)):
            if o is not None:
                res[f"ref_diff_{name}"] = (max_diff(o[:n], ref_out), max_diff(l[:n], ref_lse))
        res["ref_requests"] = n
    del inputs
    if cuda:
        torch.cuda.empty_cache()
    return res


def fmt_time(t) -> str:
    return f"{t['median_us']:9.1f}" if isinstance(t, dict) else f"{'n/a':>9}"


def print_row(r: dict) -> None:
    d, f = r.get("dualops"), r.get("flashmla")
    ratio = f"{f['median_us'] / d['median_us']:6.2f}x" if isinstance(d, dict) and isinstance(f, dict) else f"{'':7}"
    gbs = f"{r['bytes_per_call'] / d['median_us'] / 1e3:6.0f}" if isinstance(d, dict) else f"{'':6}"
    diff = (f"{r['max_abs_diff_out']:9.2e} {r['max_abs_diff_lse']:9.2e}" if "max_abs_diff_out" in r
            else f"{'n/a':>9} {'n/a':>9}")
    print(f"{r['row']:<44} {fmt_time(d)} {fmt_time(f)} {ratio} {gbs} {diff}", flush=True)
    for name in ("dualops", "flashmla"):
        if isinstance(r.get(name), str):
            print(f"    {name}: {r[name]}")
        elif isinstance(r.get(name), dict):
            t = r[name]
            print(f"    {name}: p10 {t['p10_us']:.1f} / p90 {t['p90_us']:.1f} us over {t['runs']} runs")
    if r.get("flashmla_note"):
        print(f"    flashmla: {r['flashmla_note']} (padding not timed; real heads compared)")
    if "compat_vs_direct" in r:
        print(f"    dualops through compat.flash_mla (FlashMLA's call) vs direct: max |Δout| {r['compat_vs_direct']:.2e}")
    if "ref_requests" in r:
        parts = [f"{n} out {v[0]:.2e} lse {v[1]:.2e}" for n in ("dualops", "flashmla")
                 if (v := r.get(f"ref_diff_{n}")) is not None]
        if parts:
            print(f"    max |x - fp32 reference| on the first {r['ref_requests']} requests: " + "; ".join(parts))


def dry_run(args, peer) -> None:
    """CPU only: tiny inputs, the reference, and the peer's checks up to its launch."""
    row = dict(b=2, h_q=16, s_q=2, topk=128)
    s = workload.normalize(dict(row, s_k=512, page=64, kv_format="fp8_v32"))
    inputs = workload.build(s, "cpu", torch.Generator().manual_seed(0))
    assert inputs["kv_cache"].shape[-1] == 656 and inputs["indices"].dtype == torch.int32
    out, lse = reference(inputs, 2, s["d_qk"] ** -0.5)
    print(f"dry run {workload.label(s)}: reference out {tuple(out.shape)} lse {tuple(lse.shape)}, "
          f"finite {bool(torch.isfinite(out).all())}")
    for pad in (True, False):
        got = peer_inputs(inputs, pad)
        if isinstance(got, str):
            print(f"  peer, pad={pad}: {got}")
            continue
        meta, _ = peer.get_mla_metadata()
        try:
            peer.flash_mla_with_kvcache(got[0], inputs["kv_cache"], None, None, 512, meta, None,
                                        is_fp8_kvcache=True, indices=inputs["indices"], lib_path=args.lib)
        except ValueError as e:
            print(f"  peer, pad={pad}: q {tuple(got[0].shape)}: {e}")
    print(f"  peer library: {peer.available(args.lib)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="*", help="b,h_q,s_q,topk (default: %s)" % " ".join(ROWS))
    ap.add_argument("--s-k", type=int, default=8192, help="tokens cached per request (default 8192)")
    ap.add_argument("--runs", type=int, default=30, help="timed runs per implementation (median; >= 20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lib", default=None, help="the peer library (default .peers_sparse/libflashmla_sparse_peer.so "
                                                "or $DUALOPS_FLASHMLA_SPARSE_PEER)")
    ap.add_argument("--no-pad", action="store_true", help="no FlashMLA figure for rows below 64 heads")
    ap.add_argument("--ref-requests", type=int, default=2, help="requests checked against the fp32 reference (0: none)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--dry-run", action="store_true", help="CPU only: check inputs and arguments, time nothing")
    args = ap.parse_args(argv)
    if args.runs < 20:
        ap.error("--runs must be >= 20")
    peer = load_peer()
    if args.dry_run:
        dry_run(args, peer)
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time (--dry-run checks the inputs on the CPU)")
        return 1
    from dualops.bench.timing import copy_bandwidth_gbs, l2_bytes

    ok, why = peer.available(args.lib)
    peer_skip = None if ok else f"skipped: {why}"
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  L2 {l2_bytes() / 2**20:.0f} MiB")
    print(f"FlashMLA peer: {why if ok else peer_skip}")
    lib = Path(why) if ok else None
    if lib is not None and (lib.parent / "BUILD_INFO.txt").is_file():
        info = dict(line.split(": ", 1) for line in (lib.parent / "BUILD_INFO.txt").read_text().splitlines()
                    if ": " in line)
        print(f"  FlashMLA {info.get('flashmla', '?')[:12]}, CUTLASS {info.get('cutlass', '?').split()[0]}, "
              f"{info.get('nvcc', '?')}")
    copy = copy_bandwidth_gbs()
    print(f"copy {copy['gbs']:.0f} GB/s (read + write)\n")
    print(f"{'row':<44} {'dualops':>9} {'FlashMLA':>9} {'FM/do':>7} {'GB/s':>6} {'|Δout|':>9} {'|Δlse|':>9}")
    print(f"{'':<44} {'us':>9} {'us':>9} {'':>7} {'(do)':>6} {'max':>9} {'max':>9}")
    results = []
    for text in args.rows or ROWS:
        r = bench_row(parse_row(text), args, peer, peer_skip, "cuda")
        print_row(r)
        results.append(r)
    print("\nFM/do: FlashMLA time / dualops time (> 1: dualops faster). GB/s: KV tokens read once + q + out, "
          "over dualops' time. Cache per row: "
          f"{results[0]['cache_bytes'] / 2**20:.0f} MiB; read per call {results[0]['bytes_per_call'] / 2**20:.0f} MiB.")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(device=torch.cuda.get_device_name(), copy=copy,
                                                   results=results), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

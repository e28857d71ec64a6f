"""``python -m dualops [info|parity|bench]``: argument parsing only; the work is in
``dualops.parity``, ``dualops.bench`` and ``dualops.bench.environment``.

With no subcommand it runs the main job: a quick parity check and a quick bench on whatever
backends this machine has, reports written to ``reports/`` (or ``--out``)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OPS = ("incre_flash_attention", "mla_decode", "grouped_gemm")
BACKENDS = ("reference", "cuda", "ascend_sim", "npu")


def _backend_list(values):
    """--backend given several times and/or comma-separated."""
    out = []
    for v in values or []:
        out += [b.strip() for b in v.split(",") if b.strip()]
    bad = [b for b in out if b not in BACKENDS]
    if bad:
        raise ValueError(f"--backend must be among {', '.join(BACKENDS)}, got {', '.join(bad)}")
    return out or None


def _count(text: str) -> int:
    """argparse type: an int >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def _non_negative(text: str) -> float:
    """argparse type: a finite float >= 0."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if not (x >= 0 and x != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return x


def _positive(text: str) -> float:
    x = _non_negative(text)
    if x == 0:
        raise argparse.ArgumentTypeError("must be > 0, got 0")
    return x


def _check_out(path, flag: str = "--out") -> None:
    """Report folders: an existing file there is an error said before any work is done."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{flag} {path}: is an existing file; {flag} takes a folder (reports are "
                         f"written into it), so give a folder path or remove the file")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{flag} {path}: {parent} is a file, so the folder cannot be made there")
            break


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dualops",
        description="dualops' main job. With no subcommand: a quick parity check and a quick bench on "
                    "every backend this machine has, reports written to reports/ (or --out).")
    p.add_argument("--out", default="reports", help="report directory of the main job (default: reports/)")
    sub = p.add_subparsers(dest="command")

    info = sub.add_parser("info", help="backends, devices, native build flags, capability matrix")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.add_argument("--op", choices=OPS, help="show the plan and launch choices of a call of this op "
                      "(with --shape)")
    info.add_argument("--shape", metavar="K=V,...", help="the call's shape in the bench vocabulary, e.g. "
                      "b=64,h_q=16,s_k=4096 for mla_decode (see `bench --list`)")
    info.add_argument("--backend", choices=BACKENDS, help="the backend whose plan to show (default: the one "
                      "that runs here)")
    info.add_argument("--device", help="device profile to plan for (h100, h200, ascend910b2, ...; default: "
                      "the backend's; with --plan: h100)")
    info.add_argument("--plan", metavar="K=V,...", help="show the plan (and every launch choice) of this IFA "
                      "problem, e.g. batch=1,s_q=1,h_q=8,h_kv=1,head_dim=128,max_kv_len=131072,kv_dtype=int8")
    info.add_argument("--tune", default="", metavar="K=V,...", help="tuning overrides of --plan (docs/tuning.md)")
    info.add_argument("--header", action="store_true", help="with --plan: print the packed header's int32 values")

    par = sub.add_parser("parity", help="every op x variant x backend against the reference")
    par.add_argument("--op", action="append", choices=OPS, help="only this op (repeatable)")
    par.add_argument("--backend", action="append", help="only these backends (repeatable or comma-separated; "
                     "default: every available one)")
    mode = par.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="the quick case set (default)")
    mode.add_argument("--full", action="store_true", help="every case")
    par.add_argument("--case", action="append", help="only this case (repeatable; from the full set)")
    par.add_argument("--seed", type=int, help="input seed (default: fresh, printed for repro)")
    par.add_argument("--out", default="reports", help="report directory (default: reports/)")
    par.add_argument("--save", metavar="DIR", help="also store each case's inputs and outputs in DIR")
    par.add_argument("--against", metavar="DIR", help="re-run a saved case set here and compare with "
                     "its stored outputs and the reference")

    ben = sub.add_parser("bench", help="time each op on the available backends and peers")
    ben.add_argument("--list", action="store_true", help="list the named sweeps and exit")
    ben.add_argument("--sweep", action="append", help="a sweep or group name (repeatable; default: quick)")
    ben.add_argument("--op", choices=OPS, help="restrict to this op (needed with --shape)")
    ben.add_argument("--shape", action="append", metavar="K=V,...", help="a custom config of --op (repeatable)")
    ben.add_argument("--backend", action="append", help="only these backends (repeatable or comma-separated)")
    ben.add_argument("--eager", action="store_true", help="CUDA: time eager calls, not CUDA-graph replays")
    ben.add_argument("--runs", type=_count, default=30, help="timed runs per config (default 30)")
    ben.add_argument("--rounds", type=_count, default=1,
                     help="time each config's implementations in turn this many times; each keeps its "
                          "median round (default 1)")
    ben.add_argument("--budget", type=_positive, default=1.0, help="CPU: seconds of timing per config (default 1)")
    ben.add_argument("--no-probe", action="store_true", help="CUDA: skip the copy/matmul ceiling probes")
    ben.add_argument("--no-peers", action="store_true", help="do not time the peer implementations")
    ben.add_argument("--cpu-limit", type=_non_negative, default=2.0, metavar="GFLOP",
                     help="CPU backends skip configs above this many GFLOP (default 2)")
    ben.add_argument("--sim-profile", help="910B profile of the simulator's estimates (default ascend910b2)")
    ben.add_argument("--seed", type=int, default=0)
    ben.add_argument("--out", default="reports", help="report directory (default: reports/)")
    ben.add_argument("--compare", metavar="OLD.json", help="ratio to a previous bench.json")
    ben.add_argument("--threshold", type=_non_negative, default=0.05, help="regression threshold (default 0.05 = 5%%)")
    ben.add_argument("--fail-on-regression", action="store_true", help="exit 3 when a regression is flagged")
    ben.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


def _info(args) -> int:
    if args.plan:
        from .tiling import plan_info

        print(plan_info.format_plan(plan_info.plan_from_spec(args.plan, args.device or "h100", args.tune),
                                    args.header))
        return 0
    from .bench import environment

    if args.op or args.shape:
        if not args.op:
            raise ValueError("info --shape needs --op (which op the shape is for)")
        from . import explain

        print(explain.explain(args.op, args.shape or "", backend=args.backend, device=args.device))
        return 0

    d = environment.info()
    print(json.dumps(d, indent=2, default=str) if args.json else environment.format_info(d))
    return 0


def _parity(args) -> int:
    from . import parity

    return parity.main(ops=args.op, backends=_backend_list(args.backend), full=args.full, seed=args.seed,
                       case_names=args.case, out=args.out, save=args.save, against=args.against,
                       command=args.command_line)


def _bench(args) -> int:
    from . import bench

    if args.list:
        print(bench.sweeps.listing())
        return 0
    return bench.main(sweep_names=args.sweep, op=args.op, shapes=args.shape,
                      backends=_backend_list(args.backend), graph=not args.eager, runs=args.runs, rounds=args.rounds,
                      budget_s=args.budget, probe=not args.no_probe, peers=not args.no_peers,
                      cpu_limit=args.cpu_limit, sim_profile=args.sim_profile, seed=args.seed, out=args.out,
                      compare=args.compare, threshold=args.threshold,
                      fail_on_regression=args.fail_on_regression, plots=not args.no_plots,
                      command=args.command_line)


def _main_job(args) -> int:
    from . import bench, parity

    import time

    import dualops

    here = ", ".join(b for b, st in dualops.backends().items() if st["available"])
    print(f"dualops main job: quick parity + quick bench on the backends of this machine ({here})")
    start = time.monotonic()
    print("\n[1/2] parity: the quick cases of every op on each backend against the fp32 reference "
          "(usually under a minute on a 2-core CPU)", flush=True)
    rc_parity = parity.main(out=args.out, command=args.command_line)
    print("\n[2/2] bench: the quick sweeps (IFA, MLA decode, grouped GEMM) on each backend and the peers here, "
          "Ascend simulator rows as 910B cost-model estimates (usually 1-2 min on a 2-core CPU)", flush=True)
    rc_bench = bench.main(sweep_names=["quick"], out=args.out, command=args.command_line)
    print(f"\nreports in {args.out}/: open {args.out}/index.html (every run so far, and the newest: machine, "
          f"parity matrix, bench tables with spreads and peer ratios, peers, plots, commands); "
          f"parity {'FAILED' if rc_parity else 'passed'}; main job took {time.monotonic() - start:.0f} s")
    return rc_parity or rc_bench


def main(argv=None) -> int:
    from .report_runs import command_line

    args = _parser().parse_args(argv)
    args.command_line = command_line(argv)
    run = {"info": _info, "parity": _parity, "bench": _bench, None: _main_job}[args.command]
    try:
        _check_out(getattr(args, "out", None))
        _check_out(getattr(args, "save", None), "--save")
        return run(args)
    except BrokenPipeError:  # the output went into a program that stopped reading (| head)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        print(f"python -m dualops: error: {e}", file=sys.stderr)
        return 2

"""Benchmarks: ``python -m dualops bench`` (see ``cli.py``).

    from dualops import bench
    run = bench.run(bench.sweeps.resolve(["quick"]))     # a BenchRun
    print(bench.report.terminal(run))

Layout: ``sweeps.py`` (named sweeps), ``workloads.py`` (the per-op module protocol) with
``ifa_workload.py`` / ``mla_decode.py`` / ``grouped_gemm.py``, ``measure.py`` (CUDA through the
CUDA author's ``timing.py``, wall clock through ``cpu_timing.py``), ``sim_estimate.py`` (the Ascend
simulator's cost model), ``ceilings.py``, ``runner.py``, ``report.py``, ``compare.py``, ``plots.py``.
``incre_flash_attention.py`` is the standalone CUDA IFA sweep of BENCHMARKS.md (``python -m
dualops.bench.incre_flash_attention``).
"""
from __future__ import annotations

import sys

from . import report, sweeps
from .runner import BenchRun, Row, run

__all__ = ["BenchRun", "Row", "run", "report", "sweeps", "main"]


def main(*, sweep_names=None, op=None, shapes=None, backends=None, graph=True, runs=30, rounds=1,
         budget_s=1.0, probe=True, peers=True, cpu_limit=2.0, sim_profile=None, seed=0,
         out="reports", compare=None, threshold=0.05, fail_on_regression=False, plots=True,
         stream=None, command=None) -> int:
    """Run, print, write. Exit status 0; 1 on an error row; 3 on a regression with
    ``fail_on_regression``."""
    from . import compare as compare_mod

    stream = stream or sys.stdout
    if shapes:
        if not op:
            raise ValueError("--shape needs --op (which op the shape is for)")
        sweep_list = [sweeps.custom(op, shapes)]
        if sweep_names:
            sweep_list += sweeps.resolve(sweep_names)
    else:
        sweep_list = sweeps.resolve(sweep_names or ["quick"])
        if op:
            sweep_list = [s for s in sweep_list if s.op == op]
            if not sweep_list:
                raise ValueError(f"--op {op}: none of the selected sweeps is for this op")
    old = compare_mod.load(compare) if compare else None  # fail before a long run, not after
    result = run(sweep_list, backends=backends, graph=graph, runs=runs, rounds=rounds, budget_s=budget_s, probe=probe,
                 with_peers=peers, cpu_limit=cpu_limit, sim_profile=sim_profile, seed=seed)
    result.settings["command"] = " ".join(
        ["python -m dualops bench"] + [f"--sweep {n}" for n in sweep_names or ([] if shapes else ["quick"])]
        + ([f"--op {op}"] if op else []) + [f"--shape {s}" for s in shapes or []]
        + ([f"--backend {','.join(backends)}"] if backends else []) + ([] if graph else ["--eager"])
        + ([f"--rounds {rounds}"] if rounds > 1 else []))
    if old is not None:
        compare_mod.apply(result, old, threshold=threshold, path=compare)
    print(report.terminal(result), file=stream)
    paths = report.write(result, out, plots=plots, command=command)
    from .. import report_page

    report_page.write(paths["run"])
    page = report_page.write(out)
    print(f"bench reports: {paths['run']}/ (this run; also copied to {paths['json']}, {paths['markdown']}); "
          f"{page} lists every run", file=stream)
    for p in paths.get("plots", []):
        print(f"  plot: {p}", file=stream)
    if plots and paths.get("plots_note"):
        print(f"  {paths['plots_note']}", file=stream)
    if fail_on_regression and result.regressions:
        print(f"bench: {len(result.regressions)} regression(s) beyond {threshold:.0%}", file=stream)
        return 3
    return 1 if result.errors else 0

"""Bench reports: a terminal table, a JSON file, a Markdown page (BENCHMARKS.md-ready), and
PNG plots when matplotlib is installed."""
from __future__ import annotations

import json
from pathlib import Path

from .environment import describe_machine, machine
from .runner import BenchRun, Row
from .table import NOISY_SPREAD, json_safe, markdown_table, noisy, num, spread_cell, text_table


def _ms(s):
    return "-" if s is None else f"{s * 1e3:.4g}"


def _headers(run: BenchRun):
    h = ["config", "impl", "method", "time ms", "spread", "TFLOPS", "GB/s", "% BW", "% peak"]
    return h + (["vs old"] if run.compare else []) + ["note"]


def _row(r: Row, run: BenchRun) -> list:
    impl = r.impl if r.source == "dualops" else f"{r.impl} (peer)"
    if r.status != "ok":
        return [r.label, impl, r.status] + ["-"] * (6 + bool(run.compare)) + [r.reason]
    cells = [r.label, impl, r.method, _ms(r.time_s), spread_cell(r.spread),
             num(r.tflops, ".3g"), num(r.gbs, ".4g"), num(r.pct_bw, ".0f"), num(r.pct_peak, ".0f")]
    if run.compare:
        cells.append("-" if r.ratio is None else f"{r.ratio:.3f}x" + (" REGRESSION" if r.regression else ""))
    return cells + [r.reason]


def _by_sweep(run: BenchRun):
    out: dict[str, list[Row]] = {}
    for r in run.rows:
        out.setdefault(r.sweep, []).append(r)
    return out


def noisy_rows(run: BenchRun) -> list[Row]:
    return [r for r in run.rows if r.status == "ok" and noisy(r.spread)]


def noise_warning(run: BenchRun) -> str:
    """One line on the rows whose spread makes their time meaningless, or ''."""
    bad = noisy_rows(run)
    if not bad:
        return ""
    timed = sum(r.status == "ok" and r.spread is not None for r in run.rows)
    worst = max(bad, key=lambda r: r.spread)
    return (f"WARNING: {len(bad)} of {timed} timings are NOISY (spread over {NOISY_SPREAD:.0%} of the median; "
            f"worst {worst.spread:.0%}: {worst.op} {worst.label} {worst.impl}): their times and ratios say "
            f"little (was the machine busy?); rerun when it is quiet, or with --rounds 3.")


def _notes(run: BenchRun) -> list[str]:
    lines = [f"spread = (90th - 10th percentile) / median of the timed runs; NOISY above {NOISY_SPREAD:.0%}"]
    for key, c in run.ceilings.items():
        lines.append(f"ceiling [{key}]: {c['source']}")
    if run.ceilings:
        lines.append("% BW = GB/s (minimum bytes: inputs read once + outputs) of the bandwidth ceiling; "
                     "% peak = TFLOPS of the bf16 matmul ceiling (fp8 / int8 paths can pass 100%)")
    if any(r.kind == "estimate" for r in run.rows):
        lines.append("rows whose method says 'estimate (cost model, <profile>)' are the Ascend simulator's "
                     "cost-model estimates for that 910B profile, not measurements; their % columns are "
                     "of the profile's assumed ceilings")
    if any(r.device == "cpu" and r.kind == "measured" and r.status == "ok" for r in run.rows):
        lines.append("CPU rows (reference, CPU peers) are wall-clock times for orientation; no CPU ceiling is shown")
    if run.compare:
        c = run.compare
        lines.append(f"compared with {c['path']} ({c['created']}, {c['machine']}): {c['matched']} rows matched, "
                     f"{c['regressions']} regressions beyond {c['threshold']:.0%}, {c['improvements']} improvements; "
                     f"'vs old' = new time / old time")
    return lines


def peer_lines(run: BenchRun) -> list[str]:
    """Every peer of each op with its status and reason (peers.catalog)."""
    from . import peers

    lines = []
    for op, entries in peers.catalog(run).items():
        lines.append(f"peers of {op}:")
        width = max(len(e["peer"]) for e in entries) if entries else 0
        lines += [f"  {e['peer']:<{width}}  {e['status']:<7}  {e['reason']}" for e in entries]
    return lines


def terminal(run: BenchRun) -> str:
    parts = []
    for sweep, rows in _by_sweep(run).items():
        desc = run.sweeps.get(sweep, {}).get("description", "")
        parts.append(f"\n{sweep}: {desc}\n" + text_table(_headers(run), [_row(r, run) for r in rows], max_width=72))
    parts.append("")
    parts += peer_lines(run)
    parts.append("")
    parts += _notes(run)
    warn = noise_warning(run)
    if warn:
        parts.append(warn)
    for r in run.regressions:
        parts.append(f"REGRESSION {r.op} {r.label} {r.impl}: {_ms(r.time_s)} ms vs {_ms(r.old_time_s)} ms "
                     f"({r.ratio:.3f}x)")
    return "\n".join(parts)


def markdown(run: BenchRun) -> str:
    m = machine()
    how = ""
    if run.settings.get("accelerated") and any(r.device == "cuda" and r.status == "ok" for r in run.rows):
        how = ("; CUDA timings are " + ("CUDA-graph replays" if run.settings["graph"] else "eager calls")
               + " timed with CUDA events (median, inputs rotated beyond L2)")
    lines = ["# dualops benchmarks", "", f"- created: {run.created}", f"- machine: {describe_machine(m)}",
             f"- backends: {', '.join(run.settings['backends'])}{how}",
             f"- command: `{run.settings.get('command') or 'python -m dualops bench --sweep ' + ' --sweep '.join(run.settings['sweeps'])}`"]
    for b, s in run.backends.items():
        if not s["available"]:
            lines.append(f"- not run here: {b}: {s['reason']}")
    lines += ["", *(f"- {n}" for n in _notes(run))]
    if noise_warning(run):
        lines += ["", f"**{noise_warning(run)}**"]
    for sweep, rows in _by_sweep(run).items():
        desc = run.sweeps.get(sweep, {}).get("description", "")
        lines += ["", f"## {sweep}", "", desc, "", markdown_table(_headers(run), [_row(r, run) for r in rows])]
    from . import peers

    lines += ["", "## Peers", ""]
    for op, entries in peers.catalog(run).items():
        lines += ["", f"{op}:", "", markdown_table(["peer", "runs on", "status", "reason"],
                                                    [[e["peer"], e["runs_on"], e["status"], e["reason"]]
                                                     for e in entries])]
    return "\n".join(lines) + "\n"


def result_line(run: BenchRun) -> str:
    ok = [r for r in run.rows if r.status == "ok"]
    configs = len({(r.op, r.label) for r in run.rows})
    noisy = len(noisy_rows(run))
    return (f"{configs} configs, {len(ok)} timings or estimates, {len(run.errors)} errors"
            + (f", {noisy} NOISY" if noisy else "") + f"; sweeps {', '.join(run.sweeps)}")


def write(run: BenchRun, out_dir, *, plots: bool = True, command: str | None = None) -> dict:
    """Write the reports (and plots) into a new run folder under ``out_dir/runs`` and copy them
    to the top of ``out_dir`` (the newest bench run); returns their paths there and the folder."""
    from .. import report_runs
    from . import peers

    data = run.to_json()
    data["peers"] = peers.catalog(run)
    folder = report_runs.new_run(out_dir, "bench")
    (folder / "bench.json").write_text(json.dumps(json_safe(data), indent=2, default=str, allow_nan=False))
    (folder / "bench.md").write_text(markdown(run))
    made, why = [], ""
    if plots:
        from . import plots as plot_mod

        made, why = plot_mod.write_all(run, folder)
    report_runs.finish(folder, kind="bench", created=run.created, machine=data["machine"],
                       command=command or report_runs.command_line(), result=result_line(run))
    report_runs.publish(out_dir, folder, "bench")
    out = Path(out_dir)
    paths = {"json": out / "bench.json", "markdown": out / "bench.md", "run": folder}
    if plots:
        paths["plots"] = [out / p.name for p in made]
        paths["plots_note"] = why
    return paths

"""Bench reports: a terminal table, a JSON file, a Markdown page (BENCHMARKS.md-ready), and
PNG plots when matplotlib is installed."""
from __future__ import annotations

import json
from pathlib import Path

from .environment import describe_machine, machine
from .runner import BenchRun, Row
from .table import json_safe, markdown_table, num, text_table


def _ms(s):
    return "-" if s is None else f"{s * 1e3:.4g}"


def _headers(run: BenchRun):
    h = ["config", "impl", "method", "time ms", "spread", "TFLOPS", "GB/s", "% BW", "% peak"]
    return h + (["vs old"] if run.compare else []) + ["note"]


def _row(r: Row, run: BenchRun) -> list:
    impl = r.impl if r.source == "dualops" else f"{r.impl} (peer)"
    if r.status != "ok":
        return [r.label, impl, r.status] + ["-"] * (6 + bool(run.compare)) + [r.reason]
    cells = [r.label, impl, r.method, _ms(r.time_s), num(r.spread, ".1%") if r.spread is not None else "-",
             num(r.tflops, ".3g"), num(r.gbs, ".4g"), num(r.pct_bw, ".0f"), num(r.pct_peak, ".0f")]
    if run.compare:
        cells.append("-" if r.ratio is None else f"{r.ratio:.3f}x" + (" REGRESSION" if r.regression else ""))
    return cells + [r.reason]


def _by_sweep(run: BenchRun):
    out: dict[str, list[Row]] = {}
    for r in run.rows:
        out.setdefault(r.sweep, []).append(r)
    return out


def _notes(run: BenchRun) -> list[str]:
    lines = []
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


def terminal(run: BenchRun) -> str:
    parts = []
    for sweep, rows in _by_sweep(run).items():
        desc = run.sweeps.get(sweep, {}).get("description", "")
        parts.append(f"\n{sweep}: {desc}\n" + text_table(_headers(run), [_row(r, run) for r in rows], max_width=72))
    parts.append("")
    parts += _notes(run)
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
    for sweep, rows in _by_sweep(run).items():
        desc = run.sweeps.get(sweep, {}).get("description", "")
        lines += ["", f"## {sweep}", "", desc, "", markdown_table(_headers(run), [_row(r, run) for r in rows])]
    return "\n".join(lines) + "\n"


def write(run: BenchRun, out_dir, *, plots: bool = True) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "bench.json", "markdown": out / "bench.md"}
    paths["json"].write_text(json.dumps(json_safe(run.to_json()), indent=2, default=str, allow_nan=False))
    paths["markdown"].write_text(markdown(run))
    if plots:
        from . import plots as plot_mod

        made, why = plot_mod.write_all(run, out)
        paths["plots"] = made
        paths["plots_note"] = why
    return paths

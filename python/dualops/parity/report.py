"""Parity reports: a terminal table, a JSON file and a Markdown page, all from one ParityRun."""
from __future__ import annotations

import json
from pathlib import Path

from ..bench.environment import describe_machine, machine, now
from ..bench.table import json_safe, markdown_table, num, text_table
from . import cross_format
from .runner import ParityRun, Result

HEADERS = ("case", "backend", "vs", "result", "max abs", "max rel", "cos diff", "note")


def _row(r: Result) -> list:
    h = r.headline()
    note = r.reason
    if r.status == "pass" and len(r.outputs) > 1:
        note = "all outputs ok (" + ", ".join(r.outputs) + ")"
    return [r.case, r.backend, r.against, r.status.upper() if r.failed else r.status,
            num(h.get("max_abs")), num(h.get("max_rel")), num(h.get("cos_diff"), ".2e"), note]


def _by_op(run: ParityRun):
    ops: dict[str, list[Result]] = {}
    for r in run.results:
        ops.setdefault(r.op, []).append(r)
    return ops


def _unavailable(run: ParityRun) -> list[str]:
    return [f"{b}: {s['reason']}" for b, s in run.backends.items() if not s["available"]]


def terminal(run: ParityRun) -> str:
    parts = []
    for op, rows in _by_op(run).items():
        parts.append(f"\n{op}\n" + text_table(HEADERS, [_row(r) for r in rows]))
    if run.cross_format:
        parts.append(f"\nmla_decode cross-format: {cross_format.INTRO}\n"
                     + text_table(cross_format.HEADERS, cross_format.table_rows(run.cross_format)))
    s = run.summary()
    against = f", against {run.against['dir']}" if run.against else ""
    parts.append(f"\nparity: {s['pass']} pass, {s['fail']} fail, {s['error']} error, {s['n/a']} n/a "
                 f"(seed {run.seed}, backends {', '.join(run.selection['backends'])}{against})")
    for line in _unavailable(run):
        parts.append(f"  not run here: {line}")
    fails = run.failures
    if fails:
        parts.append("\nfailing cases; reproduce with:")
        parts += [f"  {r.repro}    # {r.backend} vs {r.against}: {r.reason}" for r in fails]
    return "\n".join(parts)


def to_json(run: ParityRun) -> dict:
    return {"format": "dualops-parity-report", "version": 1, "created": now(), "seed": run.seed,
            "machine": machine(), "selection": run.selection, "backends": run.backends,
            "against": run.against, "summary": run.summary(), "cases": run.cases,
            "results": [r.to_json() for r in run.results], "cross_format": run.cross_format}


def markdown(run: ParityRun) -> str:
    m = machine()
    s = run.summary()
    lines = ["# dualops parity report", "",
             f"- created: {now()}", f"- machine: {describe_machine(m)}", f"- seed: {run.seed}",
             f"- backends run: {', '.join(run.selection['backends'])}",
             f"- result: **{s['pass']} pass, {s['fail']} fail, {s['error']} error, {s['n/a']} n/a**"]
    if run.against:
        am = run.against.get("machine") or {}
        lines.append(f"- against the saved set `{run.against['dir']}` "
                     f"(made {run.against.get('created')} on {am.get('host', '?')}, torch {am.get('torch', '?')})")
    for line in _unavailable(run):
        lines.append(f"- not run here: {line}")
    lines += ["", "Method (docs/parity.md): per element pass if |a−b| ≤ atol + rtol·|b| + c·budget, the "
              "budget being the rounding term the reference computes on the same inputs (two "
              "backends: the sum of their bounds); cosine difference ≤ ε; inf/NaN positions must "
              "match. Expected values are the fp32 reference on the dequantized inputs; `vs` names what a backend is compared with "
              "(`reference`, another backend, or `saved:<backend>` outputs of a saved set). "
              "`n/a` = the schema says the backend does not support the variant."]
    for op, rows in _by_op(run).items():
        lines += ["", f"## {op}", "", markdown_table(HEADERS, [_row(r) for r in rows])]
    if run.cross_format:
        lines += ["", "## mla_decode: fp8_v32 against int8_v32", "", cross_format.INTRO[0].upper()
                  + cross_format.INTRO[1:] + ".", "",
                  markdown_table(cross_format.HEADERS, cross_format.table_rows(run.cross_format))]
    fails = run.failures
    if fails:
        lines += ["", "## Failures", "", "```"] + [r.repro for r in fails] + ["```"]
    lines += ["", "## Cases", ""]
    for key, c in run.cases.items():
        feats = ", ".join(f"{k}={v}" for k, v in c["features"].items())
        lines.append(f"- `{key}`: {'; '.join(c['exercises'])} (schema features: {feats})")
    return "\n".join(lines) + "\n"


def result_line(run: ParityRun) -> str:
    s = run.summary()
    what = f"against {run.against['dir']}" if run.against else f"{len(run.cases)} cases"
    return (f"{s['pass']} pass, {s['fail']} fail, {s['error']} error, {s['n/a']} n/a ({what}; "
            f"backends {', '.join(run.selection['backends'])}; seed {run.seed})")


def write(run: ParityRun, out_dir, *, command: str | None = None) -> dict[str, Path]:
    """Write the reports into a new run folder under ``out_dir/runs`` and copy them to the top of
    ``out_dir`` (the newest parity run); returns their paths there and the run folder."""
    from .. import report_runs

    data = to_json(run)
    folder = report_runs.new_run(out_dir, "parity")
    (folder / "parity.json").write_text(json.dumps(json_safe(data), indent=2, default=str, allow_nan=False))
    (folder / "parity.md").write_text(markdown(run))
    report_runs.finish(folder, kind="parity", created=data["created"], machine=data["machine"],
                       command=command or report_runs.command_line(), result=result_line(run))
    report_runs.publish(out_dir, folder, "parity")
    out = Path(out_dir)
    return {"json": out / "parity.json", "markdown": out / "parity.md", "run": folder}

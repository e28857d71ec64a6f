"""``bench --compare OLD.json``: the ratio of each row's time to the same row of a previous run
(same op, config, implementation and kind: measured rows are compared with measured ones,
estimates with estimates), regressions flagged beyond a threshold."""
from __future__ import annotations

import json
from pathlib import Path

from .runner import BenchRun


def load(path) -> dict:
    """A previous ``bench.json``, checked: any problem is one ValueError naming the file."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"--compare: {p} is a folder; give the bench.json file in it")
    if not p.is_file():
        raise FileNotFoundError(f"--compare: {p} does not exist")
    try:
        data = json.loads(p.read_text())
    except UnicodeDecodeError:
        raise ValueError(f"--compare: {p}: is not text (expected a bench.json written by "
                         f"python -m dualops bench)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"--compare: {p}: is not valid JSON: {e.msg} (line {e.lineno}, "
                         f"column {e.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"--compare: {p}: holds a JSON {type(data).__name__}, expected the object "
                         f"a dualops bench report is")
    if data.get("format") != "dualops-bench-report":
        raise ValueError(f"--compare: {p}: is not a dualops bench report (format {data.get('format')!r})")
    rows = data.get("rows")
    if not isinstance(rows, list):
        raise ValueError(f"--compare: {p}: 'rows' is {type(rows).__name__ if rows is not None else 'missing'}, "
                         f"expected a list")
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str) for k in ("op", "label", "impl")):
            raise ValueError(f"--compare: {p}: rows[{i}] is not a bench row (needs op, label and impl strings)")
        t = r.get("time_s")
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))):
            raise ValueError(f"--compare: {p}: rows[{i}].time_s must be a number or null, got {t!r}")
    if not isinstance(data.get("machine") or {}, dict):
        raise ValueError(f"--compare: {p}: 'machine' must be an object")
    return data


def _key(row: dict) -> tuple:
    return (row["op"], row["label"], row["impl"], row.get("kind") or "measured")


def apply(run: BenchRun, old: dict, *, threshold: float = 0.05, path: str = "") -> dict:
    """Fill ``old_time_s``, ``ratio`` (new / old time) and ``regression`` (ratio > 1 + threshold)
    on the rows of ``run`` found in ``old``; return a summary stored on the run."""
    if threshold < 0:
        raise ValueError(f"--threshold must be >= 0, got {threshold}")
    before = {_key(r): r for r in old.get("rows", []) if r.get("status") == "ok" and r.get("time_s")}
    matched = 0
    for row in run.rows:
        prev = before.get(row.key)
        if row.status != "ok" or not row.time_s or prev is None:
            continue
        matched += 1
        row.old_time_s = prev["time_s"]
        row.ratio = row.time_s / prev["time_s"]
        row.regression = row.ratio > 1.0 + threshold
    old_machine = (old.get("machine") or {}).get("host")
    summary = {"path": str(path), "created": old.get("created"), "machine": old_machine,
               "threshold": threshold, "matched": matched, "regressions": len(run.regressions),
               "improvements": sum(1 for r in run.rows if r.ratio is not None and r.ratio < 1.0 - threshold)}
    run.compare = summary
    return summary

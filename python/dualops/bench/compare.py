"""``bench --compare OLD.json``: the ratio of each row's time to the same row of a previous run
(same op, config, implementation and kind: measured rows are compared with measured ones,
estimates with estimates), regressions flagged beyond a threshold."""
from __future__ import annotations

import json
from pathlib import Path

from .runner import BenchRun


def load(path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--compare: {p} does not exist")
    data = json.loads(p.read_text())
    if data.get("format") != "dualops-bench-report":
        raise ValueError(f"--compare: {p} is not a dualops bench report (format {data.get('format')!r})")
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

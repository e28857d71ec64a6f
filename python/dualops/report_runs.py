"""The run folders of a report directory: each ``python -m dualops parity|bench`` run keeps its
own results in ``<out>/runs/<UTC time>-<kind>/`` with a ``run.json`` (kind, time, machine,
command, result in one line), and the newest run of each kind is also copied to the top of
``<out>`` (``parity.json``, ``bench.json``, ``bench_*.png``, ...), where ``index.html`` shows it
and lists every run. Nothing is removed: an older run stays in its folder."""
from __future__ import annotations

import datetime
import json
import shlex
import shutil
import sys
from pathlib import Path

RUNS = "runs"
RUN_JSON = "run.json"
# The files of each kind that the top of the report directory holds for the newest run.
LATEST = {"parity": ("parity.json", "parity.md"), "bench": ("bench.json", "bench.md")}


def command_line(argv=None) -> str:
    """The command a run was started with, as a user would type it."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python -m dualops"] + [shlex.quote(str(a)) for a in args])


def new_run(out_dir, kind: str) -> Path:
    """A fresh, empty run folder under ``out_dir/runs`` named after the time and ``kind``."""
    if kind not in LATEST:
        raise ValueError(f"kind must be one of {', '.join(LATEST)}, got {kind!r}")
    base = Path(out_dir) / RUNS
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        path = base / (f"{stamp}-{kind}" + (f"-{n}" if n > 1 else ""))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"{base}: cannot make a new run folder (999 runs of {kind} started at {stamp})")


def finish(run_dir, *, kind: str, created: str, machine: dict, command: str, result: str) -> Path:
    """Write the run's ``run.json``."""
    from .bench.environment import describe_machine
    from .parity.store import write_atomic

    info = {"format": "dualops-run", "version": 1, "kind": kind, "id": Path(run_dir).name,
            "created": created, "machine": describe_machine(machine) if machine.get("host") else "(not recorded)",
            "host": machine.get("host"),
            "command": command, "result": result}
    return write_atomic(Path(run_dir) / RUN_JSON, json.dumps(info, indent=2))


def _adopt_earlier(out: Path, src: Path, kind: str) -> None:
    """Reports of ``kind`` at the top of ``out`` from before it kept run folders get a run folder
    of their own (named after the time they were made), so that publishing a new run does not
    replace them unseen."""
    top = out / LATEST[kind][0]
    if not top.is_file() or any(r.get("kind") == kind and r["dir"] != src.name for r in list_runs(out)):
        return
    try:
        data = json.loads(top.read_text())
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    stamp = str(data.get("created") or "")[:19].replace("-", "").replace(":", "").replace("T", "-")
    folder = out / RUNS / f"{stamp or '00000000-000000'}-{kind}-earlier"   # undated: listed oldest
    folder.mkdir(parents=True, exist_ok=True)
    names = list(LATEST[kind]) + (sorted(p.name for p in out.glob("bench_*.png")) if kind == "bench" else [])
    for name in names:
        if (out / name).is_file():
            shutil.copyfile(out / name, folder / name)
    command = (data.get("settings") or {}).get("command") if kind == "bench" else None
    finish(folder, kind=kind, created=data.get("created") or "", machine=data.get("machine") or {},
           command=command or "(not recorded)", result="kept from before this folder kept its runs")
    from . import report_page

    report_page.write(folder)


def publish(out_dir, run_dir, kind: str) -> None:
    """Copy the run's files of ``kind`` to the top of ``out_dir`` (the newest run of that kind);
    bench plots of the previous newest bench run are replaced (they stay in its run folder)."""
    out, src = Path(out_dir), Path(run_dir)
    _adopt_earlier(out, src, kind)
    if kind == "bench":
        for old in out.glob("bench_*.png"):
            old.unlink()
        names = list(LATEST[kind]) + sorted(p.name for p in src.glob("bench_*.png"))
    else:
        names = list(LATEST[kind])
    from .parity.store import _umask

    for name in names:
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
            (out / name).chmod(0o666 & ~_umask())   # as a new file would be, whatever the old one was


def list_runs(out_dir) -> list[dict]:
    """Every run folder's ``run.json`` (with ``dir``: its folder name), newest first; a folder
    whose run.json is missing or damaged is listed with what is wrong."""
    base = Path(out_dir) / RUNS
    if not base.is_dir():
        return []
    def order(d: Path):
        """The folder name's time (to the second), then when its run.json was written (runs
        started within one second)."""
        try:
            written = (d / RUN_JSON).stat().st_mtime_ns
        except OSError:
            written = 0
        return d.name[:15], written

    out = []
    for d in sorted((p for p in base.iterdir() if p.is_dir()), key=order, reverse=True):
        try:
            info = json.loads((d / RUN_JSON).read_text())
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            info = {"kind": "?", "result": f"no readable run.json ({type(e).__name__}): interrupted?"}
        info["dir"] = d.name
        out.append(info)
    return out

"""PNG plots of a bench run, one per sweep with an x axis (matplotlib: a dependency of the main
job, which scripts/setup.sh installs): time per call, and achieved GB/s (attention sweeps) or
TFLOPS (grouped GEMM sweeps) against the device's ceiling, one line per implementation
(dualops backends and peers alike)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .runner import BenchRun, Row

MISSING = ("matplotlib is not installed: no PNG plots (`bash scripts/setup.sh` installs it, or "
           "`python3 -m pip install matplotlib`)")


def have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def series(rows: list[Row], x_key: str, metric: str) -> dict[str, list[tuple]]:
    """{series name: [(x, value), ...] sorted by x}. A series is one implementation at one setting
    of every shape key other than ``x_key``; only the keys that vary within the sweep name it."""
    ok = [r for r in rows if r.status == "ok" and r.x is not None and getattr(r, metric) is not None]
    varying = sorted({k for r in ok for k in r.shape if k != x_key
                      and len({str(o.shape.get(k)) for o in ok}) > 1})
    out: dict[str, list[tuple]] = {}
    for r in ok:
        tag = " ".join(f"{k}={r.shape[k]}" for k in varying)
        name = f"{r.impl}{' (estimate)' if r.kind == 'estimate' else ''}" + (f" {tag}" if tag else "")
        out.setdefault(name, []).append((r.x, getattr(r, metric)))
    return {k: sorted(v) for k, v in out.items() if len(v) >= 2}


def _ceiling(run: BenchRun, rows: list[Row], field: str):
    keys = {r.ceiling for r in rows if r.ceiling}
    return [(k, run.ceilings[k][field]) for k in sorted(keys) if k in run.ceilings]


def _impl_name(r: Row) -> str:
    return f"{r.impl}{' (estimate)' if r.kind == 'estimate' else ''}"


def _bars(ax, rows: list[Row], metric: str, scale: float = 1.0):
    """Grouped bars: one group per config, one bar per implementation (sweeps with no x axis)."""
    labels = list(dict.fromkeys(r.label for r in rows))
    impls = list(dict.fromkeys(_impl_name(r) for r in rows))
    width = 0.8 / max(len(impls), 1)
    for j, impl in enumerate(impls):
        xs, ys = [], []
        for i, lab in enumerate(labels):
            r = next((r for r in rows if r.label == lab and _impl_name(r) == impl), None)
            if r is not None and getattr(r, metric) is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(getattr(r, metric) * scale)
        ax.bar(xs, ys, width=width, label=impl)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=15, ha="right", fontsize=7)


def write_all(run: BenchRun, out_dir) -> tuple[list[Path], str]:
    """Write one PNG per sweep with measured rows: time per call and achieved GB/s or TFLOPS
    against the ceiling, one line (sweeps with an x axis) or bar (the others) per implementation.
    Returns (paths, note when none could be made)."""
    if not have_matplotlib():
        return [], MISSING
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for name, info in run.sweeps.items():
        x_key = info.get("x_key")
        rows = [r for r in run.rows if r.sweep == name and r.status == "ok" and r.time_s]
        gemm = info["op"] == "grouped_gemm"
        metric, field, ylabel = (("tflops", "tflops", "TFLOPS") if gemm else ("gbs", "bandwidth_gbs", "GB/s"))
        lines = series(rows, x_key, metric) if x_key else {}
        if not rows or (x_key and not lines):
            continue
        fig, (ax_t, ax) = plt.subplots(1, 2, figsize=(13, 5))
        if lines:
            for label, pts in series(rows, x_key, "time_s").items():
                ax_t.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], marker="o", label=label)
            for label, pts in lines.items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
            xlabel = {"s_kv": "context length (keys)", "s_k": "context length (keys)",
                      "m": "tokens per expert"}.get(x_key, x_key)
            for a in (ax_t, ax):
                a.set_xscale("log", base=2)
                a.set_xlabel(xlabel)
        else:
            _bars(ax_t, rows, "time_s", 1e3)
            _bars(ax, rows, metric)
        for key, value in _ceiling(run, rows, field):
            ax.axhline(value, linestyle="--", color="gray")
            ax.annotate(f"ceiling [{key}] {value:.0f}", (0.01, value), xycoords=("axes fraction", "data"),
                        fontsize=8, va="bottom")
        for a, title, yl in ((ax_t, "time per call", "ms"), (ax, f"achieved {ylabel}", ylabel)):
            a.set_ylabel(yl)
            a.set_title(f"{name}: {title}")
            a.grid(True, alpha=0.3)
            a.legend(fontsize=7)
        ax_t.set_yscale("log")
        path = Path(out_dir) / f"bench_{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    return made, "" if made else "no sweep here has a measured row to plot"

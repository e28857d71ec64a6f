"""PNG plots of a bench run (matplotlib is an optional extra): GB/s against context length per
implementation with the bandwidth ceiling drawn (attention sweeps), TFLOPS against tokens per
expert with the matmul ceiling drawn (grouped GEMM sweeps)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .runner import BenchRun, Row

MISSING = ("matplotlib is not installed: no PNG plots (install it with `pip install matplotlib`, "
           "the optional plotting extra)")


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


def write_all(run: BenchRun, out_dir) -> tuple[list[Path], str]:
    """Write one PNG per sweep that has an x axis. Returns (paths, note when none could be made)."""
    if not have_matplotlib():
        return [], MISSING
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for name, info in run.sweeps.items():
        x_key = info.get("x_key")
        rows = [r for r in run.rows if r.sweep == name]
        if not x_key or not rows:
            continue
        gemm = info["op"] == "grouped_gemm"
        metric, field, ylabel = (("tflops", "tflops", "TFLOPS") if gemm else ("gbs", "bandwidth_gbs", "GB/s"))
        lines = series(rows, x_key, metric)
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, pts in lines.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        for key, value in _ceiling(run, rows, field):
            ax.axhline(value, linestyle="--", color="gray")
            ax.annotate(f"ceiling [{key}] {value:.0f}", (0.01, value), xycoords=("axes fraction", "data"),
                        fontsize=8, va="bottom")
        ax.set_xscale("log", base=2)
        ax.set_xlabel({"s_kv": "context length (keys)", "s_k": "context length (keys)",
                       "m": "tokens per expert"}.get(x_key, x_key))
        ax.set_ylabel(ylabel)
        ax.set_title(f"{name}: {ylabel} vs {x_key}")
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        path = Path(out_dir) / f"bench_{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    return made, "" if made else "no sweep here has two or more points along its x axis to plot"

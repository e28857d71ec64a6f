"""PNG plots of a bench run, one per sweep (matplotlib: a dependency of the main job, which
scripts/setup.sh installs): time per call, and achieved GB/s (attention sweeps) or TFLOPS
(grouped GEMM sweeps), one line or bar per implementation (dualops backends and peers alike).
Measurements and cost-model estimates are drawn on separate panels, one pair per device or
profile, each titled with where its numbers come from; a device's ceiling is drawn where it is
on the scale of the data."""
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
        xs, ys, lo, hi = [], [], [], []
        for i, lab in enumerate(labels):
            r = next((r for r in rows if r.label == lab and _impl_name(r) == impl), None)
            if r is not None and getattr(r, metric) is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(getattr(r, metric) * scale)
                # times: a whisker from the 10th to the 90th percentile of the runs (the spread)
                spread = metric == "time_s" and r.p10_s is not None and r.p90_s is not None
                lo.append(max(ys[-1] - r.p10_s * scale, 0.0) if spread else 0.0)
                hi.append(max(r.p90_s * scale - ys[-1], 0.0) if spread else 0.0)
        ax.bar(xs, ys, width=width, label=impl, yerr=[lo, hi] if any(lo) or any(hi) else None, capsize=3)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=15, ha="right", fontsize=7)


def panel_groups(run: BenchRun, rows: list[Row]) -> list[tuple[str, list[Row]]]:
    """The rows of a sweep split by where their figures come from, one pair of panels each:
    measurements per device first, then the cost-model estimates (never on one axis with a
    measurement). Returns [(what the panels show, in words), rows]."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault((r.kind == "estimate", r.device), []).append(r)
    out = []
    for (estimate, device), mine in sorted(groups.items()):
        out.append((source_words(run, device, estimate), mine))
    return out


def source_words(run: BenchRun, device: str, estimate: bool) -> str:
    """Where a row's figure comes from, in words."""
    if estimate:
        profile = run.settings.get("sim_profile") or "910B"
        return f"ESTIMATED by the {profile} cost model (Ascend simulator), not measured"
    if device == "cuda":
        import torch

        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "a CUDA GPU"
        return f"measured on {name}"
    if device == "npu":
        return "measured on the Ascend NPU"
    return f"measured on this machine's CPU ({run.settings.get('cpu_threads') or _threads()} threads, wall clock)"


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _fit(ax, values, ceilings):
    """Linear y axis from 0 to just above the data; a ceiling line only where it is within 3x of
    the largest value (else the data would sit flat on the axis): returns the ceilings left out."""
    top = max(values) if values else 1.0
    off = []
    for key, value in ceilings:
        if value <= 3 * top:
            ax.axhline(value, linestyle="--", color="gray")
            ax.annotate(f"ceiling [{key}] {value:.0f}", (0.01, value), xycoords=("axes fraction", "data"),
                        fontsize=8, va="bottom")
            top = max(top, value)
        else:
            off.append(f"{key} {value:.0f}")
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    return off


def write_all(run: BenchRun, out_dir) -> tuple[list[Path], str]:
    """Write one PNG per sweep: for each source of figures (measured on a device, or estimated
    by the cost model) a row of two panels, time per call (log axis) and achieved GB/s or TFLOPS
    (linear, fitted to the data), one line (sweeps with an x axis) or bar (the others) per
    implementation. Every panel's title says where its numbers come from. Returns (paths, note
    when none could be made)."""
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
        groups = [(w, g) for w, g in panel_groups(run, rows) if not x_key or series(g, x_key, metric)]
        if not groups:
            continue
        fig, axes = plt.subplots(len(groups), 2, figsize=(13, 4.6 * len(groups)), squeeze=False)
        for (words, mine), (ax_t, ax) in zip(groups, axes):
            if x_key:
                for label, pts in series(mine, x_key, "time_s").items():
                    ax_t.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], marker="o", label=label)
                for label, pts in series(mine, x_key, metric).items():
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
                xlabel = {"s_kv": "context length (keys)", "s_k": "context length (keys)",
                          "m": "tokens per expert"}.get(x_key, x_key)
                for a in (ax_t, ax):
                    a.set_xscale("log", base=2)
                    a.set_xlabel(xlabel)
            else:
                _bars(ax_t, mine, "time_s", 1e3)
                _bars(ax, mine, metric)
            values = [getattr(r, metric) for r in mine if getattr(r, metric) is not None]
            off = _fit(ax, values, _ceiling(run, mine, field))
            note = f" (ceiling {', '.join(off)}: off scale)" if off else ""
            for a, title, yl in ((ax_t, "time per call", "ms"), (ax, f"achieved {ylabel}{note}", ylabel)):
                a.set_ylabel(yl)
                a.set_title(f"{name}: {title}\n{words}", fontsize=9)
                a.grid(True, alpha=0.3)
                a.legend(fontsize=7)
            ax_t.set_yscale("log")
            times = [r.time_s * 1e3 for r in mine] + [r.p90_s * 1e3 for r in mine if r.p90_s]
            ax_t.set_ylim(min(times) / 10, max(times) * 3)   # bars of similar times look similar
            if not x_key and any(r.p90_s for r in mine):
                ax_t.set_title(ax_t.get_title().replace("time per call", "time per call (whiskers: 10th-90th "
                                                                            "percentile of the runs)", 1), fontsize=9)
        path = Path(out_dir) / f"bench_{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        made.append(path)
    return made, "" if made else "no sweep here has a measured row to plot"

"""``reports/index.html``: one static page (no server, no script, no network) with every run kept
in the folder (``runs/``: time, kind, machine, command, result, a link to the run's own page), the
machine and its devices, the parity matrix of the newest parity run (backend x backend: pass /
fail with the worst error), the bench tables of the newest bench run (time with its spread, noisy
rows flagged, each implementation's ratio against every peer, measured and estimated figures
told apart), every peer of each op with its status, the plots, and the exact commands that
reproduce it all. Built from the reports in the folder (parity.json, bench.json, bench_*.png: the
newest run of each kind), so ``parity`` and ``bench`` run separately each refresh it; a run
folder gets the same page for that run alone."""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

INDEX = "index.html"

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.6em} h2{margin-top:2em;border-bottom:1px solid #ccc} h3{margin-top:1.4em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em} th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f2f2f2} td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{background:#e5f5e5} .fail{background:#fbe3e3;font-weight:bold} .na{color:#888} .note{color:#666;font-size:.85em}
.noisy{background:#fff1c9;font-weight:bold} .warn{background:#fff1c9;padding:.4em .6em;border-left:4px solid #e0a800}
.est{color:#6a3d9a;font-style:italic}
code,pre{background:#f6f6f6;padding:2px 4px} pre{padding:.6em;overflow-x:auto}
img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
"""


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _num(x, fmt=".3g") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, fmt)


def _load(path: Path):
    """A report JSON, or None when absent or unreadable (the page says so instead of failing)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _table(headers, rows, classes=None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers or ())
    body = []
    for i, row in enumerate(rows):
        cls = (classes or {}).get(i, {})
        cells = []
        for j, c in enumerate(row):
            k = cls.get(j, "")
            cells.append(f"<td class=\"{k}\">{c}</td>" if k else f"<td>{c}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if headers else ""
    return f"<table>{thead}<tbody>{''.join(body)}</tbody></table>"


# ----------------------------------------------------------------------------- sections


def _machine_section(parity, bench) -> str:
    src = (bench or parity or {})
    m = src.get("machine") or {}
    rows = [["host", _e(m.get("host"))], ["platform", _e(m.get("platform"))],
            ["Python / torch", _e(f"{m.get('python')} / {m.get('torch')} (CUDA {m.get('torch_cuda')})")],
            ["dualops", _e(m.get("dualops"))], ["CPU threads", _e(m.get("cpu_threads"))]]
    for d in m.get("cuda_devices") or []:
        rows.append(["CUDA device", _e(f"{d.get('name')} ({d.get('sms')} SMs)")])
    if not m.get("cuda_devices"):
        rows.append(["CUDA device", "none"])
    out = ["<h2 id=\"machine\">Machine and devices</h2>", _table(None, rows)]
    backends = src.get("backends") or {}
    if backends:
        brows = [[_e(b), "available" if s.get("available") else "not here", _e(s.get("reason"))]
                 for b, s in backends.items()]
        cls = {i: {1: "pass" if s.get("available") else "na"} for i, s in enumerate(backends.values())}
        out += ["<h3>Backends</h3>", _table(["backend", "here", "what / why not"], brows, cls)]
    ceilings = (bench or {}).get("ceilings") or {}
    if ceilings:
        crows = [[_e(k), _num(c.get("bandwidth_gbs"), ".0f"), _num(c.get("tflops"), ".0f"), _e(c.get("source"))]
                 for k, c in ceilings.items()]
        out += ["<h3>Device ceilings</h3>", _table(["device", "GB/s", "TFLOPS", "source"], crows)]
    return "\n".join(out)


def _worst(results, key: str) -> float | None:
    worst = None
    for r in results:
        for c in (r.get("outputs") or {}).values():
            v = c.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v) and (worst is None or v > worst):
                worst = v
    return worst


def _parity_section(parity) -> str:
    if parity is None:
        return ("<h2 id=\"parity\">Parity</h2><p class=\"na\">No parity report here "
                "(run <code>python -m dualops parity</code>).</p>")
    results = parity.get("results") or []
    s = parity.get("summary") or {}
    out = ["<h2 id=\"parity\">Parity</h2>",
           f"<p>{s.get('pass', 0)} pass, {s.get('fail', 0)} fail, {s.get('error', 0)} error, "
           f"{s.get('n/a', 0)} n/a; seed {_e(parity.get('seed'))}"
           + (f"; against the saved set <code>{_e(parity['against'].get('dir'))}</code>" if parity.get("against") else "")
           + ". Each cell: the backend of the row checked against the column (the fp32 reference, another "
             "backend, or a saved set's outputs): cases passed / run, the largest absolute error and cosine "
             "difference over them (a case passes per element by absolute or relative tolerance).</p>"]
    ops = list(dict.fromkeys(r.get("op") for r in results))
    for op in ops:
        mine = [r for r in results if r.get("op") == op]
        rows_b = list(dict.fromkeys(r.get("backend") for r in mine))
        cols = list(dict.fromkeys(r.get("against") for r in mine))
        rows, classes = [], {}
        for i, b in enumerate(rows_b):
            row = [f"<b>{_e(b)}</b>"]
            classes[i] = {}
            for j, a in enumerate(cols, start=1):
                cell = [r for r in mine if r.get("backend") == b and r.get("against") == a]
                run = [r for r in cell if r.get("status") != "n/a"]
                if not cell:
                    row.append("")
                    continue
                if not run:
                    row.append("n/a")
                    classes[i][j] = "na"
                    continue
                passed = sum(r.get("status") == "pass" for r in run)
                bad = len(run) - passed
                row.append(f"{'PASS' if not bad else 'FAIL'} {passed}/{len(run)}<br>"
                           f"<span class=\"note\">worst max abs {_num(_worst(run, 'max_abs'))}, "
                           f"cos diff {_num(_worst(run, 'cos_diff'), '.1e')}</span>")
                classes[i][j] = "pass" if not bad else "fail"
            rows.append(row)
        out += [f"<h3>{_e(op)}</h3>", _table(["backend \\ vs"] + [_e(c) for c in cols], rows, classes)]
    fails = [r for r in results if r.get("status") in ("fail", "error")]
    if fails:
        out += ["<h3>Failures (reproduce with)</h3>",
                "<pre>" + "\n".join(_e(f"{r.get('repro')}    # {r.get('backend')} vs {r.get('against')}: "
                                       f"{r.get('reason')}") for r in fails) + "</pre>"]
    return "\n".join(out)


def _source(r: dict, bench: dict) -> str:
    """Where a row's figure comes from, as a table cell."""
    if r.get("kind") == "estimate":
        prof = (bench.get("settings") or {}).get("sim_profile") or "910B"
        return f"<span class=\"est\">estimate ({_e(prof)} cost model)</span>"
    dev = r.get("device")
    if dev == "cuda":
        gpus = ((bench.get("machine") or {}).get("cuda_devices") or [{}])
        return _e(f"measured: {gpus[0].get('name') or 'CUDA GPU'}")
    return _e(f"measured: {dev.upper() if dev in ('cpu', 'npu') else dev}")


def _bench_section(bench, out_dir: Path) -> str:
    from .bench.table import NOISY_SPREAD, noisy, spread_cell

    if bench is None:
        return ("<h2 id=\"bench\">Benchmarks</h2><p class=\"na\">No bench report here "
                "(run <code>python -m dualops bench</code>).</p>")
    rows = bench.get("rows") or []
    out = ["<h2 id=\"bench\">Benchmarks</h2>",
           "<p>Times are medians per call; <i>spread</i> = (90th − 10th percentile) / median of the timed "
           f"runs, and a row whose spread is over {NOISY_SPREAD:.0%} is marked NOISY: its time and ratios say "
           "little (a busy machine). <i>source</i> tells measurements from the Ascend simulator's cost-model "
           "estimates, which are figures for a 910B, not for this machine. <i>vs PEER</i> = the peer's time / "
           "this implementation's time (above 1: faster than the peer), given for measurements on the same "
           "device only. Every peer of each op is listed under <a href=\"#peers\">Peers</a>.</p>"]
    bad = [r for r in rows if r.get("status") == "ok" and noisy(r.get("spread"))]
    if bad:
        worst = max(bad, key=lambda r: r["spread"])
        out.append(f"<p class=\"warn\" id=\"noisy-warning\">{len(bad)} timings are NOISY (spread over "
                   f"{NOISY_SPREAD:.0%}; worst {worst['spread']:.0%}: {_e(worst.get('op'))} {_e(worst.get('label'))} "
                   f"{_e(worst.get('impl'))}): rerun on a quiet machine, or with <code>--rounds 3</code>.</p>")
    for sweep, info in (bench.get("sweeps") or {}).items():
        mine = [r for r in rows if r.get("sweep") == sweep]
        if not mine:
            continue
        peers = list(dict.fromkeys(r["impl"] for r in mine if r.get("source") == "peer" and r.get("status") == "ok"))
        headers = ["config", "impl", "source", "status", "time ms", "spread", "GB/s", "TFLOPS", "% BW", "% peak"] \
            + [f"vs {p}" for p in peers] + ["note"]
        by_cfg: dict[str, dict[str, dict]] = {}
        for r in mine:
            by_cfg.setdefault(r.get("label"), {})[r.get("impl")] = r
        table, classes = [], {}
        for r in mine:
            ok = r.get("status") == "ok"
            impl = r.get("impl") + (" (peer)" if r.get("source") == "peer" else "")
            cells = [_e(r.get("label")), _e(impl), _source(r, bench) if ok else "", _e(r.get("status")),
                     _num(r["time_s"] * 1e3, ".4g") if ok and r.get("time_s") else "-",
                     _e(spread_cell(r.get("spread"))) if ok else "-",
                     _num(r.get("gbs"), ".4g"), _num(r.get("tflops"), ".3g"),
                     _num(r.get("pct_bw"), ".0f"), _num(r.get("pct_peak"), ".0f")]
            for p in peers:
                peer = by_cfg[r.get("label")].get(p)
                like = peer and peer.get("kind") == r.get("kind") and peer.get("device") == r.get("device")
                if ok and r.get("source") == "dualops" and like and peer.get("status") == "ok" and r.get("time_s"):
                    noisy_pair = noisy(r.get("spread")) or noisy(peer.get("spread"))
                    cells.append(_num(peer["time_s"] / r["time_s"], ".3f") + "x" + (" (noisy)" if noisy_pair else ""))
                else:
                    cells.append("")
            cells.append(f"<span class=\"note\">{_e(r.get('reason'))}</span>")
            cls = {3: "pass" if ok else ("fail" if r.get("status") == "error" else "na")}
            if ok and noisy(r.get("spread")):
                cls[5] = "noisy"
            classes[len(table)] = cls
            table.append(cells)
        out += [f"<h3>{_e(sweep)}</h3>", f"<p>{_e(info.get('description'))}</p>", _table(headers, table, classes)]
        png = out_dir / f"bench_{sweep}.png"
        if png.is_file():
            out.append(f"<img src=\"{_e(png.name)}\" alt=\"{_e(sweep)}: time and throughput, measured and "
                       f"estimated on separate panels\">")
    pngs = sorted(p.name for p in out_dir.glob("bench_*.png")
                  if p.stem[len("bench_"):] not in (bench.get("sweeps") or {}))
    for name in pngs:
        out.append(f"<img src=\"{_e(name)}\" alt=\"{_e(name)}\">")
    return "\n".join(out)


def _peers_section(bench) -> str:
    peers = (bench or {}).get("peers")
    out = ["<h2 id=\"peers\">Peers</h2>"]
    if not isinstance(peers, dict) or not peers:
        return "\n".join(out + ["<p class=\"na\">No bench report with peers here.</p>"])
    out.append("<p>Every peer implementation of each op, whether this run timed it, and if not, why.</p>")
    for op, entries in peers.items():
        rows, classes = [], {}
        for i, e in enumerate(entries if isinstance(entries, list) else []):
            rows.append([_e(e.get("peer")), _e(e.get("runs_on")), _e(e.get("status")), _e(e.get("reason"))])
            classes[i] = {2: "pass" if e.get("status") == "timed" else "na"}
        out += [f"<h3>{_e(op)}</h3>", _table(["peer", "runs on", "status", "reason"], rows, classes)]
    return "\n".join(out)


def _runs_section(runs, shown) -> str:
    """Every run in the folder, newest first; the newest of each kind is the one shown below."""
    out = ["<h2 id=\"runs\">Runs</h2>"]
    if not runs:
        return "\n".join(out + ["<p class=\"na\">No run folders here yet.</p>"])
    out.append(f"<p>{len(runs)} runs kept in <code>runs/</code>, newest first. The newest of each kind is "
               "shown on this page; each run's own page has its full results.</p>")
    rows, classes = [], {}
    for i, r in enumerate(runs):
        here = r.get("dir") in shown
        when = str(r.get("created") or "").replace("T", " ").removesuffix("+00:00")
        rows.append([_e(when), _e(r.get("kind")) + (" (shown below)" if here else ""),
                     f"<code>{_e(r.get('command'))}</code>", _e(r.get("machine")), _e(r.get("result")),
                     f"<a href=\"runs/{_e(r['dir'])}/index.html\">{_e(r['dir'])}</a>"])
        if here:
            classes[i] = {1: "pass"}
    out.append(_table(["time (UTC)", "kind", "command", "machine", "result", "run folder"], rows, classes))
    return "\n".join(out)


def _commands(parity, bench) -> str:
    cmds = ["bash scripts/setup.sh            # install and build (once)"]
    if parity is not None:
        sel = parity.get("selection") or {}
        cmd = "python3 -m dualops parity"
        if parity.get("against"):
            cmd += f" --against {parity['against'].get('dir')}"
        else:
            cmd += " --full" if sel.get("full") else ""
            cmd += f" --seed {parity.get('seed')}"
            cmd += "".join(f" --op {o}" for o in sel.get("ops") or [] if len(sel.get("ops") or []) < 3)
            cmd += "".join(f" --case {c}" for c in sel.get("cases") or [])
        if sel.get("backends"):
            cmd += f" --backend {','.join(sel['backends'])}"
        cmds.append(cmd)
    if bench is not None:
        c = (bench.get("settings") or {}).get("command") or "python -m dualops bench"
        cmds.append(c.replace("python -m", "python3 -m", 1))
    cmds.append("bash scripts/main.sh             # set-up + quick parity + quick bench, this page included")
    return ("<h2 id=\"repro\">Reproduce</h2><p>From the repository root:</p><pre>"
            + "\n".join(_e(c) for c in cmds) + "</pre>")


def render(out_dir) -> str:
    from . import report_runs

    d = Path(out_dir)
    parity, bench = _load(d / "parity.json"), _load(d / "bench.json")
    created = (bench or parity or {}).get("created", "")
    run_info = _load(d / report_runs.RUN_JSON)
    runs = report_runs.list_runs(d)
    sections = [("machine", "machine"), ("parity", "parity"), ("bench", "benchmarks"), ("peers", "peers"),
                ("repro", "reproduce")]
    if run_info is not None:
        head = (f"<p>One run: <code>{_e(run_info.get('command'))}</code>, {_e(run_info.get('created'))} on "
                f"{_e(run_info.get('machine'))}: {_e(run_info.get('result'))}. "
                "<a href=\"../../index.html\">Every run</a>.</p>")
    else:
        sections.insert(0, ("runs", "runs"))
        newest = {}
        for r in runs:
            newest.setdefault(r.get("kind"), r.get("dir"))
        head = _runs_section(runs, set(newest.values()))
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<title>dualops report</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>dualops report</h1>",
             f"<p>Newest results {_e(created)}. Sections: "
             + " · ".join(f"<a href=\"#{k}\">{w}</a>" for k, w in sections) + ". Details: "
             + " · ".join(f"<a href=\"{n}\">{n}</a>" for n in ("parity.md", "parity.json", "bench.md", "bench.json")
                          if (d / n).is_file()) + "</p>",
             head, _machine_section(parity, bench), _parity_section(parity), _bench_section(bench, d),
             _peers_section(bench), _commands(parity, bench), "</body></html>"]
    return "\n".join(parts) + "\n"


def write(out_dir) -> Path:
    """Write (or refresh) ``index.html`` in ``out_dir`` from the reports there."""
    from .parity.store import write_atomic

    path = Path(out_dir) / INDEX
    return write_atomic(path, render(out_dir))

"""The report folder keeps every run (run folders, run.json, the newest of each kind on top), the
bench report shows each timing's spread and flags noisy ones, lists every peer of each op, and
keeps measured and estimated figures apart in its plots; plus the messages of damaged files."""
import importlib.util
import io
import json
import re

import pytest
import torch

import dualops
from dualops import cli, report_runs
from dualops.bench import peers, plots, report
from dualops.bench.runner import BenchRun, Row
from dualops.bench.table import NOISY_SPREAD, noisy, spread_cell
from dualops.parity import store


def _row(impl, *, kind="measured", device="cpu", time_s=1e-3, p10=0.9e-3, p90=1.1e-3, source="dualops",
         status="ok", label="g2 m4", x=None, reason=""):
    return Row("s", "grouped_gemm", label, {"g": 2, "m": 4}, impl, source, device, status, x=x, kind=kind,
               method="estimate (cost model, ascend910b2)" if kind == "estimate" else "wall-clock",
               time_s=time_s if status == "ok" else None, p10_s=p10 if kind == "measured" else None,
               p90_s=p90 if kind == "measured" else None, flops=1e9, bytes=1e6,
               tflops=1e-3 / time_s if status == "ok" else None, gbs=1e-3 / time_s if status == "ok" else None,
               reason=reason)


def _run(rows, **settings):
    run = BenchRun(settings={"backends": ["reference"], "graph": True, "sweeps": ["s"], "peers": True,
                             "accelerated": False, "sim_profile": "ascend910b2", **settings},
                   backends={}, rows=rows)
    run.sweeps["s"] = {"op": "grouped_gemm", "description": "test sweep", "x_key": None}
    return run


def test_noisy_threshold():
    assert NOISY_SPREAD == 0.5
    assert not noisy(0.5) and noisy(0.51) and not noisy(None) and not noisy(float("nan"))
    assert spread_cell(0.12) == "12%" and spread_cell(1.5) == "150% NOISY" and spread_cell(None) == "-"


def test_terminal_shows_spread_and_warns_of_noise():
    quiet = _run([_row("reference"), _row("torch._grouped_mm", source="peer")])
    text = report.terminal(quiet)
    assert "spread" in text and "20%" in text and "WARNING" not in text
    loud = _run([_row("reference", p10=0.1e-3, p90=3e-3), _row("torch._grouped_mm", source="peer")])
    text = report.terminal(loud)
    assert "290% NOISY" in text
    assert re.search(r"WARNING: 1 of 2 timings are NOISY \(spread over 50% of the median; worst 290%", text), text
    assert "NOISY" in report.markdown(loud) and report.result_line(loud).endswith("1 NOISY; sweeps s")


def test_every_peer_is_listed_with_a_reason():
    run = _run([_row("reference"), _row("torch._grouped_mm", source="peer"),
                _row("torch._grouped_mm", source="peer", status="n/a", label="g2 m4 fp8", reason="bf16 / fp16 only"),
                _row("torch._scaled_grouped_mm", source="peer", status="n/a", reason="CUDA (sm90+) only")])
    cat = peers.catalog(run)["grouped_gemm"]
    assert [e["peer"] for e in cat] == peers.names("grouped_gemm")
    by = {e["peer"]: e for e in cat}
    assert by["torch._grouped_mm"]["status"] == "timed"
    assert by["torch._grouped_mm"]["reason"] == "timed in 1 of 2 configs; not in the others: bf16 / fp16 only"
    assert by["torch._scaled_grouped_mm"] == {"peer": "torch._scaled_grouped_mm", "package": "torch",
                                              "runs_on": "any device", "status": "n/a",
                                              "reason": "CUDA (sm90+) only"}
    for name in ("flashinfer-segment_gemm", "flag_gems-grouped_mm", "torch_npu-grouped_matmul"):
        e = by[name]
        assert e["status"] == "n/a" and e["reason"].startswith("runs on an ") and "this run timed peers on the CPU" \
            in e["reason"], e
    assert "not installed" in by["torch_npu-grouped_matmul"]["reason"]
    lines = "\n".join(report.peer_lines(run))
    assert "peers of grouped_gemm:" in lines and "flag_gems-grouped_mm" in lines
    off = peers.catalog(_run([_row("reference")], peers=False))["grouped_gemm"]
    assert {e["status"] for e in off} == {"not run"}


def test_measured_and_estimated_figures_are_told_apart():
    run = _run([_row("reference"), _row("torch._grouped_mm", source="peer"),
                _row("ascend_sim", kind="estimate", time_s=5e-6)])
    groups = plots.panel_groups(run, run.rows)
    assert [w for w, _ in groups] == [
        f"measured on this machine's CPU ({torch.get_num_threads()} threads, wall clock)",
        "ESTIMATED by the ascend910b2 cost model (Ascend simulator), not measured"]
    assert [[r.impl for r in g] for _, g in groups] == [["reference", "torch._grouped_mm"], ["ascend_sim"]]


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                    reason="matplotlib not installed (scripts/setup.sh installs it)")
def test_plot_axes_fit_the_data(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    assert plots._fit(ax, [0.002, 0.004], [("profile:ascend910b2", 1600.0)]) == ["profile:ascend910b2 1600"]
    assert ax.get_ylim()[1] == pytest.approx(0.004 * 1.15)          # a far ceiling is not drawn
    fig2, ax2 = plt.subplots()
    assert plots._fit(ax2, [1000.0, 2000.0], [("cuda", 3000.0)]) == []
    assert ax2.get_ylim()[1] == pytest.approx(3000 * 1.15)          # a near one is
    plt.close(fig)
    plt.close(fig2)
    run = _run([_row("reference"), _row("torch._grouped_mm", source="peer"),
                _row("ascend_sim", kind="estimate", time_s=5e-6)])
    made, note = plots.write_all(run, tmp_path)
    assert [p.name for p in made] == ["bench_s.png"] and note == ""


def test_runs_accumulate_and_the_newest_is_on_top(capsys, tmp_path):
    args = ["parity", "--op", "grouped_gemm", "--case", "masked_bf16_g3", "--backend", "reference", "--out",
            str(tmp_path)]
    assert cli.main(args + ["--seed", "1"]) == 0
    assert cli.main(args + ["--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path}/runs/" in out and "lists every run" in out
    runs = report_runs.list_runs(tmp_path)
    assert len(runs) == 2 and all(r["kind"] == "parity" for r in runs)
    assert runs[0]["command"].endswith("--seed 2") and runs[1]["command"].endswith("--seed 1")
    assert runs[0]["command"].startswith("python -m dualops parity --op grouped_gemm")
    for r in runs:
        assert (tmp_path / "runs" / r["dir"] / "parity.json").is_file()
        assert (tmp_path / "runs" / r["dir"] / "index.html").is_file()
    assert json.loads((tmp_path / "parity.json").read_text())["seed"] == 2
    (tmp_path / "runs" / "20000101-000000-bench").mkdir()           # an interrupted run
    broken = report_runs.list_runs(tmp_path)[-1]
    assert broken["dir"] == "20000101-000000-bench" and "no readable run.json" in broken["result"]
    with pytest.raises(ValueError, match="kind must be one of parity, bench"):
        report_runs.new_run(tmp_path, "other")


def test_publish_replaces_the_previous_plots(tmp_path):
    old, new = report_runs.new_run(tmp_path, "bench"), report_runs.new_run(tmp_path, "bench")
    assert old != new and new.name.endswith("-bench-2")
    (old / "bench_a.png").write_bytes(b"a")
    report_runs.publish(tmp_path, old, "bench")
    (new / "bench_b.png").write_bytes(b"b")
    report_runs.publish(tmp_path, new, "bench")
    assert sorted(p.name for p in tmp_path.glob("bench_*.png")) == ["bench_b.png"]
    assert (old / "bench_a.png").is_file()                           # kept in its run folder


def test_atomic_writes_are_readable_by_others(tmp_path):
    p = store.write_atomic(tmp_path / "x.json", "{}")
    assert p.stat().st_mode & 0o777 == 0o666 & ~store._umask()   # 0644 under the usual umask, not 0600


def test_json_and_pt_messages_read_whole(tmp_path):
    (tmp_path / "manifest.json").write_text('{"format": "dualops-parity-set", "cases": ["unterminated')
    with pytest.raises(store.SavedSetError) as e:
        store.load_manifest(tmp_path)
    assert "is not valid JSON: Unterminated string starting at (line 1, column" in str(e.value)
    assert "at at" not in str(e.value)
    buf = io.BytesIO()
    torch.save({"inputs": {"x": torch.ones(1000)}}, buf)
    (tmp_path / "c.pt").write_bytes(buf.getvalue()[:300])
    with pytest.raises(store.SavedSetError) as e:
        store.load_case(tmp_path, {"op": "grouped_gemm", "case": "c", "file": "c.pt"})
    msg = str(e.value)
    assert "cannot be read as a saved case (truncated or not written by parity --save): " in msg
    assert msg.endswith("failed finding central directory"), msg     # a whole phrase, not cut


def test_backend_checks_name_the_op():
    q = torch.randn(2, 1, 8, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 32, 2, 64, dtype=torch.bfloat16)
    lens = torch.tensor([40, 3], dtype=torch.int32)
    for mode in (True, "full"):
        with pytest.raises(ValueError, match=r"^incre_flash_attention: kv_lens"):
            dualops.incre_flash_attention(q, k, k.clone(), kv_lens=lens, backend="reference", validate=mode)


def test_reports_from_before_run_folders_are_kept(capsys, tmp_path):
    """A report folder written before runs were kept: its parity report gets a run folder of its
    own when the next parity run is published, instead of being replaced unseen."""
    (tmp_path / "parity.json").write_text(json.dumps({"created": "2026-11-01T10:00:00+00:00", "seed": 7,
                                                      "summary": {"pass": 48}}))
    (tmp_path / "parity.md").write_text("# old\n")
    assert cli.main(["parity", "--op", "grouped_gemm", "--case", "masked_bf16_g3", "--backend", "reference",
                     "--seed", "1", "--out", str(tmp_path)]) == 0
    runs = report_runs.list_runs(tmp_path)
    assert [r["dir"] for r in runs][1] == "20261101-100000-parity-earlier"
    kept = tmp_path / "runs" / "20261101-100000-parity-earlier"
    assert json.loads((kept / "parity.json").read_text())["seed"] == 7 and (kept / "index.html").is_file()
    assert runs[1]["result"] == "kept from before this folder kept its runs"
    assert json.loads((tmp_path / "parity.json").read_text())["seed"] == 1
    assert cli.main(["parity", "--op", "grouped_gemm", "--case", "masked_bf16_g3", "--backend", "reference",
                     "--seed", "2", "--out", str(tmp_path)]) == 0
    assert len(report_runs.list_runs(tmp_path)) == 3               # adopted once, not again

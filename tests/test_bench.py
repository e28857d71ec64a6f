"""dualops.bench: sweeps and workloads, CPU timing, the simulator-estimate rows, reports,
--compare and plots (CPU only, tiny shapes)."""
import json

import pytest
import torch

from dualops import schema
from dualops.bench import compare, cpu_timing, plots, report, runner, sim_estimate, sweeps, workloads


def _tiny(op):
    return {"incre_flash_attention": dict(b=2, h_q=4, h_kv=2, d=64, s_kv=96),
            "mla_decode": dict(b=2, h_q=4, s_k=80),
            "grouped_gemm": dict(g=3, m=5, n=32, k=64)}[op]


# ----------------------------------------------------------------------------- sweeps


def test_every_named_sweep_normalizes_with_unique_labels():
    assert set(sweeps.GROUPS["quick"]) <= set(sweeps.SWEEPS)
    for s in sweeps.SWEEPS.values():
        mod = workloads.module(s.op)
        for shapes in (s.shapes, s.cpu_shapes or ()):
            labels = [mod.label(mod.normalize(shape)) for shape in shapes]
            assert len(labels) == len(set(labels)), f"{s.name}: duplicate configs"
            for shape in shapes:
                n = mod.normalize(shape)
                assert mod.flops(n) > 0 and mod.bytes_moved(n) > 0
        assert s.shapes, f"{s.name} is empty"


def test_sweeps_hold_the_standard_configs():
    mla = {(c["b"], c["h_q"], c.get("s_q", 1), c["s_k"]) for c in sweeps.SWEEPS["mla-flashmla"].shapes}
    assert {(b, h, q, 4096) for b in (64, 128) for h in (16, 64, 128) for q in (1, 2)} == mla
    gg = sweeps.SWEEPS["gg-deepseek-v3"].shapes
    assert {(c["n"], c["k"]) for c in gg} >= {(4096, 7168), (7168, 2048)}
    ifa = sweeps.SWEEPS["ifa-llama"].shapes
    assert {(c["h_q"], c["h_kv"]) for c in ifa} == {(32, 8), (64, 8), (8, 1)}
    assert sweeps.resolve(["quick", "quick-gg"]) == [sweeps.SWEEPS[n] for n in sweeps.GROUPS["quick"]]
    with pytest.raises(ValueError, match="unknown sweep"):
        sweeps.resolve(["nope"])
    assert "mla-flashmla" in sweeps.listing()


def test_parse_shape():
    assert sweeps.parse_shape("b=4, s_kv=8192,layout=paged,causal=true") == {
        "b": 4, "s_kv": 8192, "layout": "paged", "causal": True}
    with pytest.raises(ValueError, match="key=value"):
        sweeps.parse_shape("b4")


def test_normalize_names_bad_keys_and_values():
    mod = workloads.module("incre_flash_attention")
    with pytest.raises(ValueError, match="unknown key"):
        mod.normalize({"heads": 4})
    with pytest.raises(ValueError, match="multiple of h_kv"):
        mod.normalize({"h_q": 6, "h_kv": 4})
    with pytest.raises(ValueError, match="layout must be one of"):
        mod.normalize({"layout": "ragged"})
    with pytest.raises(ValueError, match="non-negative int"):
        workloads.module("grouped_gemm").normalize({"m": "many"})


@pytest.mark.parametrize("op", ["incre_flash_attention", "mla_decode", "grouped_gemm"])
def test_workloads_build_valid_calls_and_count_work(op):
    mod = workloads.module(op)
    s = mod.normalize(_tiny(op))
    inputs = mod.build(s, "cpu", torch.Generator().manual_seed(0))
    schema.validate(op, dict(inputs))
    out = mod.call(inputs, "reference")()
    assert all(torch.isfinite(t.float()).all() for t in (out if isinstance(out, tuple) else (out,)))
    peers = mod.peers(s, inputs)
    assert peers, "every op has at least one peer entry"
    for name, p in peers.items():
        if callable(p):
            p()
        else:
            assert isinstance(p, str) and p


def test_flops_and_bytes_formulas():
    ifa = workloads.module("incre_flash_attention")
    s = ifa.normalize(dict(b=2, h_q=8, h_kv=2, d=128, s_kv=1000))
    assert ifa.flops(s) == 4 * 2 * 8 * 1000 * 128
    assert ifa.bytes_moved(s) == 2 * 2 * 1000 * 2 * 128 * 2 + 2 * 2 * 8 * 128 * 2
    s8 = ifa.normalize(dict(b=2, h_q=8, h_kv=2, d=128, s_kv=1000, kv_dtype="int8"))
    assert ifa.bytes_moved(s8) < ifa.bytes_moved(s)
    mla = workloads.module("mla_decode")
    m = mla.normalize(dict(b=4, h_q=16, s_k=100))
    assert mla.flops(m) == 2 * 16 * 1 * 4 * 100 * (576 + 512)
    fp8 = mla.normalize(dict(b=4, h_q=16, s_k=100, kv_format="fp8_v32"))
    assert mla.bytes_moved(m) - mla.bytes_moved(fp8) == 4 * 100 * (1152 - 656)
    gg = workloads.module("grouped_gemm")
    g = gg.normalize(dict(g=2, m=3, n=4, k=5))
    assert gg.flops(g) == 2 * 2 * 3 * 4 * 5


# ----------------------------------------------------------------------------- timing


def test_wall_clock_statistics():
    calls = []
    t = cpu_timing.wall_clock([lambda: calls.append(0), lambda: calls.append(1)], warmup=2,
                              min_runs=4, max_runs=6, budget_s=0.0)
    assert t.runs == 4 and calls[:2] == [0, 1] and calls[2:] == [0, 1, 0, 1]
    assert t.p10_s <= t.median_s <= t.p90_s and t.method == "wall-clock"
    assert cpu_timing.quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    with pytest.raises(ValueError):
        cpu_timing.wall_clock([])


# ----------------------------------------------------------------------------- runs


def _run(sweep_names=("quick-gg",), **kw):
    kw.setdefault("backends", ["reference"])
    return runner.run(sweeps.resolve(list(sweep_names)), runs=3, budget_s=0.01, **kw)


def test_cpu_run_rows_and_cpu_limit():
    run = _run(("quick-gg", "quick-mla"))
    ours = [r for r in run.rows if r.source == "dualops"]
    assert len(ours) == 4 and all(r.status == "ok" and r.kind == "measured" for r in ours)
    assert all(r.time_s > 0 and r.tflops > 0 and r.gbs > 0 and r.pct_bw is None for r in ours)
    assert any(r.source == "peer" and r.impl == "torch._grouped_mm" and r.status == "ok" for r in run.rows)
    small = runner.run([sweeps.custom("grouped_gemm", ["g=2,m=64,n=256,k=512"])], backends=["reference"],
                       runs=3, budget_s=0.01, cpu_limit=0.001)
    assert {r.status for r in small.rows} == {"skipped"}
    assert "--cpu-limit" in small.rows[0].reason


def test_sim_estimate_rows_are_labelled_estimates(monkeypatch):
    monkeypatch.setattr(sim_estimate, "available", lambda: (True, ""))
    monkeypatch.setattr(sim_estimate, "estimate", lambda op, inputs, profile: sim_estimate.Estimate(
        2e-3, profile, {"bound": "gm"}))
    monkeypatch.setattr(runner.schema, "support_reason", lambda *a, **k: None)
    sweep = sweeps.custom("incre_flash_attention", ["b=2,h_q=4,h_kv=2,d=64,s_kv=128"])
    cfg = runner._Config(sweep, workloads.module(sweep.op), workloads.module(sweep.op).normalize(sweep.shapes[0]), 0)
    ceilings = {}
    row = runner._bench_backend(cfg, "ascend_sim", dict(graph=False, runs=3, budget_s=0.01, cpu_limit=2.0,
                                                        sim_profile="ascend910b3"), ceilings)
    assert row.status == "ok" and row.kind == "estimate" and row.time_s == 2e-3
    assert row.method == "estimate (cost model, ascend910b3)" and row.reason == "bound: gm"
    assert row.ceiling == "profile:ascend910b3" and "assumed" in ceilings[row.ceiling]["source"]
    assert row.pct_bw == pytest.approx(100 * row.gbs / ceilings[row.ceiling]["bandwidth_gbs"])
    run = runner.BenchRun(settings={"backends": ["ascend_sim"], "graph": True, "sweeps": ["custom"]},
                          backends={}, rows=[row], ceilings=ceilings)
    text = report.terminal(run)
    assert "estimate (cost model, ascend910b3)" in text and "not measurements" in text


def test_sim_row_is_a_real_estimate_or_says_why_not():
    """No monkeypatching: the simulator's own cost model when it is built, else an n/a row with
    the backend's reason."""
    sweep = sweeps.custom("incre_flash_attention", ["b=1,h_q=4,h_kv=1,d=64,s_kv=64,layout=paged,block_size=16"])
    mod = workloads.module(sweep.op)
    cfg = runner._Config(sweep, mod, mod.normalize(sweep.shapes[0]), 0)
    row = runner._bench_backend(cfg, "ascend_sim", dict(cpu_limit=2.0, sim_profile="ascend910b2"), {})
    ok, why = sim_estimate.available()
    if ok:
        assert row.status == "ok" and row.kind == "estimate" and row.time_s > 0, row.reason
        assert row.method == "estimate (cost model, ascend910b2)" and row.spread is None
    else:
        assert row.status == "n/a" and row.reason == why and why


def test_sim_without_estimate_is_na(monkeypatch):
    monkeypatch.setattr(sim_estimate, "available", lambda: (False, "no cost model here"))
    monkeypatch.setattr(runner.schema, "support_reason", lambda *a, **k: None)
    sweep = sweeps.custom("grouped_gemm", ["g=2,m=4,n=32,k=64"])
    mod = workloads.module(sweep.op)
    cfg = runner._Config(sweep, mod, mod.normalize(sweep.shapes[0]), 0)
    row = runner._bench_backend(cfg, "ascend_sim", dict(cpu_limit=2.0, sim_profile="ascend910b2"), {})
    assert row.status == "n/a" and row.reason == "no cost model here"


def test_compare_flags_a_planted_regression(tmp_path):
    run = _run()
    old = json.loads(json.dumps(run.to_json()))
    target = next(r for r in old["rows"] if r["impl"] == "reference" and r["status"] == "ok")
    target["time_s"] = run.rows[0].time_s / 2  # the old run was twice as fast on one config
    new = runner.BenchRun(settings=run.settings, backends=run.backends, rows=run.rows, sweeps=run.sweeps)
    summary = compare.apply(new, old, threshold=0.05, path="old.json")
    assert summary["regressions"] == 1 and summary["matched"] == sum(r.status == "ok" for r in run.rows)
    (reg,) = new.regressions
    assert reg.label == target["label"] and reg.ratio == pytest.approx(2.0, rel=1e-6)
    assert "REGRESSION" in report.terminal(new) and "vs old" in report.markdown(new)
    p = tmp_path / "x.json"
    p.write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a dualops bench report"):
        compare.load(p)


def test_reports_and_plots(tmp_path, monkeypatch):
    run = _run(("quick-gg",))
    paths = report.write(run, tmp_path, plots=True)
    data = json.loads(paths["json"].read_text())
    assert data["format"] == "dualops-bench-report" and len(data["rows"]) == len(run.rows)
    md = paths["markdown"].read_text()
    assert "## quick-gg" in md and "| config | impl |" in md
    if not plots.have_matplotlib():
        assert paths["plots"] == [] and "matplotlib is not installed" in paths["plots_note"]
    monkeypatch.setattr(plots, "have_matplotlib", lambda: False)
    assert plots.write_all(run, tmp_path) == ([], plots.MISSING)


def test_plot_series_group_by_impl_and_varying_keys():
    base = dict(sweep="s", op="grouped_gemm", source="dualops", device="cpu", status="ok", time_s=1.0, tflops=1.0)
    rows = [runner.Row(label=f"{n}{m}", shape=dict(m=m, n=n, recipe="bf16"), impl=impl, x=m, **base)
            for impl in ("reference", "torch._grouped_mm") for n in (1, 2) for m in (8, 16, 32)]
    s = plots.series(rows, "m", "tflops")
    assert set(s) == {f"{i} n={n}" for i in ("reference", "torch._grouped_mm") for n in (1, 2)}
    assert [p[0] for p in s["reference n=1"]] == [8, 16, 32]


def test_ifa_sweep_summary_reads_both_sdpa_ratios():
    """The IFA sweep's table and target summary (CPU: synthetic rows): SDPA is compared on each
    side's faster layout and on the same BSHD memory; paged / 8-bit ratios and the b1 s128k line."""
    from dualops.bench import incre_flash_attention as bi

    base = dict(h_q=8, h_kv=1, b=1, d=128, n_sets=3, p10_us=1.0, p90_us=1.0, splits=64, units=64)
    rows = [dict(variant="contiguous", s_kv=131072, us=24.0, best_us=23.0, sdpa_us=28.0, vs_sdpa=28.0 / 23.0,
                 vs_sdpa_same=0.95, kv_gbs=2800.0, pct_copy=65.0, layout="bhsd", sdpa_layout="bshd", **base),
            dict(variant="paged64", s_kv=131072, us=24.5, contig_over_paged=24.0 / 24.5, kv_gbs=2700.0,
                 pct_copy=64.0, **base),
            dict(variant="int8", s_kv=131072, us=14.0, vs_bf16=14.0 / 24.0, kv_gbs=2400.0, pct_copy=56.0, **base),
            dict(variant="int8 bhsd", s_kv=131072, us=13.5, vs_bf16=13.5 / 23.0, kv_gbs=2480.0, pct_copy=58.0,
                 **base)]
    text = bi.summarize({"rows": rows})
    assert "each on its faster layout): min 1.217x" in text and "1/1 >= 1.0x" in text
    assert "same BSHD memory): min 0.950x" in text and "0/1 >= 1.0x" in text
    assert "paged64 / contiguous speed: min 0.980 (1/1 >= 0.95)" in text
    assert "int8 time / bf16: max 0.583 (1/1 <= 0.6)" in text
    assert "int8 time / bf16 (both BHSD): max 0.587 (1/1 <= 0.6)" in text
    assert "b1 s131072 h8/1: 2800 GB/s = 65.0% of copy (64 splits)" in text
    table = bi.format_rows(rows)
    assert "xSDPAmem" in table.splitlines()[0] and "0.950" in table.splitlines()[1]
    md = bi.markdown_table({"rows": rows}).splitlines()
    assert md[0].startswith("| h_q/h_kv | b | s_kv | splits |") and md[1].startswith("|---|---:|")
    # one line per contiguous config: its paged / 8-bit rows become ratio columns, "–" where absent
    assert md[2] == ("| 8/1 | 1 | 131072 | 64 | 24.0 | 23.0 (BHSD) | 28.0 | 1.22 | 0.95 | 2800 | 65 | 0.98 | – | "
                     "0.58 | – | 0.59 | – |")
    assert len(md) == 3


def test_rounds_keep_each_implementation_median_round():
    """--rounds: every implementation of a config keeps its median round (same-run ratios less
    exposed to the order the implementations run in)."""
    from dualops.bench.runner import Row, _median_rows

    def row(impl, t):
        return Row("s", "op", "l", {}, impl, "dualops", "cpu", "ok" if t else "n/a", time_s=t)

    rounds = [[row("a", 3.0), row("b", 1.0), row("c", None)],
              [row("a", 1.0), row("b", 5.0), row("c", None)],
              [row("a", 2.0), row("b", 2.0), row("c", None)]]
    got = _median_rows(rounds)
    assert [r.time_s for r in got] == [2.0, 2.0, None]
    assert got[2] is rounds[0][2]
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        from dualops.bench.runner import run

        run([], rounds=0)

"""``python -m dualops`` in-process on the CPU: exit codes, reports on disk, planted failures and
regressions, the saved-set round trip, the main job."""
import importlib
import json
import shlex


import dualops
from dualops import cli

REF_BACKEND = importlib.import_module("dualops.backends.reference")
# The CPU backends of this machine (the simulator joins when it is built).
CPU_BACKENDS = ",".join(b for b in ("reference", "ascend_sim") if dualops.backends()[b]["available"])


def _main(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_info_text_and_json(capsys):
    rc, out, _ = _main(capsys, "info")
    assert rc == 0
    for word in ("backends:", "reference", "available", "capability matrix", "incre_flash_attention",
                 "native module dualops._C", "ascend_sim models ascend910b2"):
        assert word in out
    rc, out, _ = _main(capsys, "info", "--json")
    d = json.loads(out)
    assert rc == 0 and d["backends"]["reference"]["available"] is True
    assert set(d["capabilities"]) == {"incre_flash_attention", "mla_decode", "grouped_gemm"}
    assert d["machine"]["torch"]


def test_parity_passes_and_writes_reports(capsys, tmp_path):
    rc, out, _ = _main(capsys, "parity", "--op", "grouped_gemm", "--op", "mla_decode", "--backend",
                       CPU_BACKENDS, "--seed", 1, "--out", tmp_path)
    assert rc == 0, out
    assert "contig_bf16_g4_empty" in out and "dense_fp8_model1_h16" in out and "0 fail, 0 error" in out
    data = json.loads((tmp_path / "parity.json").read_text())
    assert data["seed"] == 1 and data["summary"]["fail"] == 0 and data["summary"]["pass"] > 0
    assert {r["op"] for r in data["results"]} == {"grouped_gemm", "mla_decode"}
    md = (tmp_path / "parity.md").read_text()
    assert "## grouped_gemm" in md and "| case | backend |" in md and "## Cases" in md
    rc, out, _ = _main(capsys, "parity", "--case", "paged64_mqa5_d64_fp16", "--backend", CPU_BACKENDS,
                       "--seed", 1, "--out", tmp_path)
    assert rc == 0, out
    rows = json.loads((tmp_path / "parity.json").read_text())["results"]
    assert {r["backend"] for r in rows} == set(CPU_BACKENDS.split(",")) and rows[0]["op"] == "incre_flash_attention"


def test_planted_failure_exits_nonzero_with_a_working_repro(capsys, tmp_path, monkeypatch):
    orig = REF_BACKEND.grouped_gemm
    monkeypatch.setattr(REF_BACKEND, "grouped_gemm", lambda *a, **kw: orig(*a, **kw) * 1.02)
    rc, out, err = _main(capsys, "parity", "--op", "grouped_gemm", "--backend", "reference", "--seed", 9,
                       "--out", tmp_path)
    assert rc == 1 and "FAIL" in out, err
    repro = [line.split("#")[0].strip() for line in out.splitlines()
             if line.strip().startswith("python -m dualops parity --op grouped_gemm --case")]
    assert repro and all(r.endswith("--backend reference --seed 9") for r in repro)
    assert json.loads((tmp_path / "parity.json").read_text())["summary"]["fail"] == len(repro)
    # the printed command reruns exactly that case, and it still fails
    argv = shlex.split(repro[0])[3:]
    rc, out2, _ = _main(capsys, *argv, "--out", tmp_path / "repro")
    assert rc == 1
    again = json.loads((tmp_path / "repro" / "parity.json").read_text())
    assert len(again["results"]) == 1 and again["results"][0]["status"] == "fail"
    assert again["results"][0]["case"] == shlex.split(repro[0])[shlex.split(repro[0]).index("--case") + 1]


def test_save_and_against_round_trip(capsys, tmp_path, monkeypatch):
    saved = tmp_path / "set"
    rc, out, _ = _main(capsys, "parity", "--op", "grouped_gemm", "--backend", "reference", "--seed", 3,
                       "--out", tmp_path / "a", "--save", saved)
    assert rc == 0 and f"--against {saved}" in out
    assert (saved / "manifest.json").is_file() and len(list(saved.glob("*.pt"))) == 8
    rc, out, _ = _main(capsys, "parity", "--against", saved, "--backend", "reference", "--out", tmp_path / "b")
    assert rc == 0 and "saved:reference" in out
    rep = json.loads((tmp_path / "b" / "parity.json").read_text())
    assert rep["against"]["dir"] == str(saved) and rep["summary"]["fail"] == 0
    orig = REF_BACKEND.grouped_gemm
    monkeypatch.setattr(REF_BACKEND, "grouped_gemm", lambda *a, **kw: orig(*a, **kw) * 0.97)
    rc, out, _ = _main(capsys, "parity", "--against", saved, "--backend", "reference", "--case",
                       "masked_bf16_g3", "--out", tmp_path / "c")
    assert rc == 1 and f"--case masked_bf16_g3 --backend reference --against {saved}" in out


def test_bench_writes_reports_and_compare_flags_regression(capsys, tmp_path):
    common = ("--backend", "reference", "--runs", 3, "--budget", 0.01, "--no-plots")
    rc, out, _ = _main(capsys, "bench", "--sweep", "quick-gg", *common, "--out", tmp_path / "old")
    assert rc == 0 and "quick-gg" in out and "reference" in out
    old = json.loads((tmp_path / "old" / "bench.json").read_text())
    assert old["format"] == "dualops-bench-report" and (tmp_path / "old" / "bench.md").is_file()
    for r in old["rows"]:  # plant: the previous run was 10x faster everywhere
        if r["time_s"]:
            r["time_s"] /= 10
    (tmp_path / "old.json").write_text(json.dumps(old))
    rc, out, _ = _main(capsys, "bench", "--sweep", "quick-gg", *common, "--out", tmp_path / "new",
                       "--compare", tmp_path / "old.json", "--fail-on-regression")
    assert rc == 3 and "REGRESSION" in out and "regression(s) beyond 5%" in out
    for r in old["rows"]:  # and now 10x slower everywhere: no regression whatever the load here
        if r["time_s"]:
            r["time_s"] *= 100
    (tmp_path / "old_slow.json").write_text(json.dumps(old))
    rc, out, _ = _main(capsys, "bench", "--sweep", "quick-gg", *common, "--out", tmp_path / "new",
                       "--compare", tmp_path / "old_slow.json", "--threshold", 100)
    assert rc == 0 and "0 regressions" in out


def test_bench_list_custom_shapes_and_errors(capsys, tmp_path):
    rc, out, _ = _main(capsys, "bench", "--list")
    assert rc == 0 and "mla-flashmla" in out and "gg-deepseek-v3" in out and "quick" in out
    rc, out, _ = _main(capsys, "bench", "--op", "grouped_gemm", "--shape", "g=2,m=4,n=32,k=64,recipe=fp8_blockwise",
                       "--backend", "reference", "--runs", 3, "--budget", 0.01, "--out", tmp_path, "--no-plots")
    assert rc == 0 and "g2 m4 n32 k64 fp8_blockwise" in out
    assert "`python -m dualops bench --op grouped_gemm --shape g=2,m=4,n=32,k=64,recipe=fp8_blockwise --backend " \
        "reference`" in (tmp_path / "bench.md").read_text()
    rc, _, err = _main(capsys, "bench", "--shape", "g=2", "--out", tmp_path)
    assert rc == 2 and "--shape needs --op" in err
    rc, _, err = _main(capsys, "bench", "--op", "grouped_gemm", "--shape", "g=2,bogus=1", "--backend", "reference",
                       "--out", tmp_path, "--no-plots")
    assert rc == 1  # the config is reported as an error row, the run goes on
    rc, _, err = _main(capsys, "parity", "--backend", "tpu", "--out", tmp_path)
    assert rc == 2 and "--backend must be among" in err
    unavailable = [b for b, s in dualops.backends().items() if not s["available"]]
    rc, _, err = _main(capsys, "parity", "--backend", unavailable[0], "--out", tmp_path)
    assert rc == 2 and "not available here" in err


def test_main_job_writes_all_reports(capsys, tmp_path, monkeypatch):
    """No subcommand: quick parity + quick bench. Kept to the reference backend and one op's cases
    here so it stays cheap (the other tests cover the rest)."""
    from dualops.bench import runner as bench_runner
    from dualops.parity import cases, runner as parity_runner

    monkeypatch.setattr(parity_runner, "select_backends",
                        lambda requested=None: (["reference"], dualops.backends()))
    monkeypatch.setattr(bench_runner, "select_backends",
                        lambda requested=None: (["reference"], dualops.backends()))
    monkeypatch.setitem(cases._ALL, "mla_decode", [])
    monkeypatch.setitem(cases._ALL, "incre_flash_attention", cases._ALL["incre_flash_attention"][:2])
    rc, out, _ = _main(capsys, "--out", tmp_path)
    assert rc == 0, out
    for name in ("parity.json", "parity.md", "bench.json", "bench.md", "index.html"):
        assert (tmp_path / name).is_file()
    assert f"open {tmp_path}/index.html" in out and "parity passed" in out
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert set(bench["settings"]["sweeps"]) == {"quick-ifa", "quick-mla", "quick-gg"}

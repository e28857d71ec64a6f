"""The command line with damaged files and bad flags: one line naming the file or flag and what
is wrong, exit status 2, never a traceback; saved sets written atomically; environment settings
that name the variable, the value and what is allowed."""
import json

import pytest
import torch

import dualops
from dualops import cli
from dualops.parity import store


def _main(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def saved_set(tmp_path_factory):
    """A small saved set: two grouped GEMM cases on the reference."""
    d = tmp_path_factory.mktemp("set")
    rc = cli.main(["parity", "--op", "grouped_gemm", "--case", "contig_bf16_g4_empty", "--case",
                   "masked_bf16_g3", "--backend", "reference", "--seed", "5", "--out", str(d / "rep"),
                   "--save", str(d / "set")])
    assert rc == 0
    return d / "set"


def _copy(saved_set, tmp_path):
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(saved_set, dst)
    return dst


def _against(capsys, d, tmp_path):
    return _main(capsys, "parity", "--against", d, "--backend", "reference", "--out", tmp_path / "rep")


def test_intact_set_passes(capsys, saved_set, tmp_path):
    rc, out, err = _against(capsys, saved_set, tmp_path)
    assert rc == 0, out + err


def _manifest(d):
    return json.loads((d / "manifest.json").read_text())


@pytest.mark.parametrize("damage,expect", [
    (lambda d: (d / "manifest.json").write_text("[]"), "manifest.json: holds a JSON list"),
    (lambda d: (d / "manifest.json").write_text("{\"format\": "), "manifest.json: is not valid JSON"),
    (lambda d: (d / "manifest.json").write_bytes(b"\xff\xfe\x00garbage"), "manifest.json: is not text"),
    (lambda d: (d / "manifest.json").write_text(json.dumps({k: v for k, v in _manifest(d).items() if k != "cases"})),
     "manifest.json: has no 'cases' list"),
    (lambda d: (d / "manifest.json").write_text(json.dumps({**_manifest(d), "cases": {"a": 1}})),
     "'cases' is a dict, expected a list"),
    (lambda d: (d / "manifest.json").write_text(json.dumps(
        {**_manifest(d), "cases": [{k: v for k, v in e.items() if k != "file"} for e in _manifest(d)["cases"]]})),
     "cases[0] has no 'file' string"),
    (lambda d: (d / "manifest.json").write_text(json.dumps(
        {**_manifest(d), "cases": [{**e, "op": "conv2d"} for e in _manifest(d)["cases"]]})),
     "cases[0] names op 'conv2d'"),
    (lambda d: (d / "manifest.json").write_text(json.dumps(
        {**_manifest(d), "cases": [{**e, "file": "../../etc/passwd"} for e in _manifest(d)["cases"]]})),
     "is not a plain name"),
    (lambda d: (d / "manifest.json").write_text(json.dumps({**_manifest(d), "format": "other"})),
     "is not a dualops parity set"),
    (lambda d: (d / "manifest.json").unlink(), "manifest.json does not exist"),
    (lambda d: (d / "grouped_gemm__masked_bf16_g3.pt").unlink(), "grouped_gemm__masked_bf16_g3.pt: is missing"),
    (lambda d: (d / "grouped_gemm__masked_bf16_g3.pt").write_bytes(
        (d / "grouped_gemm__masked_bf16_g3.pt").read_bytes()[:300]),
     "grouped_gemm__masked_bf16_g3.pt: cannot be read as a saved case"),
    (lambda d: (d / "grouped_gemm__masked_bf16_g3.pt").write_bytes(b"not a torch file"),
     "grouped_gemm__masked_bf16_g3.pt: cannot be read as a saved case"),
    (lambda d: torch.save([1, 2, 3], d / "grouped_gemm__masked_bf16_g3.pt"),
     "grouped_gemm__masked_bf16_g3.pt: holds a list"),
    (lambda d: torch.save({"inputs": {}, "strided": []}, d / "grouped_gemm__masked_bf16_g3.pt"),
     "lacks 'outputs'"),
    (lambda d: torch.save({"inputs": {}, "strided": [], "outputs": {"reference": {"y": "text"}}},
                          d / "grouped_gemm__masked_bf16_g3.pt"),
     "'outputs' must map each backend to its output tensors"),
])
def test_damaged_set_is_one_line_naming_the_file(capsys, saved_set, tmp_path, damage, expect):
    d = _copy(saved_set, tmp_path)
    damage(d)
    rc, out, err = _against(capsys, d, tmp_path)
    line = _one_error_line(err)
    assert rc == 2 and expect in line, line
    assert str(d) in line


def test_against_a_file_or_missing_folder(capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    for target in (tmp_path / "f", tmp_path / "nope"):
        rc, _, err = _against(capsys, target, tmp_path)
        assert rc == 2 and "is not a folder" in _one_error_line(err)


def test_save_is_atomic(tmp_path, monkeypatch):
    """An interrupted save leaves neither a half-written file nor a manifest that --against trusts,
    also over an older set in the same folder."""
    d = tmp_path / "set"
    s = store.Saver(d, seed=1)
    s.add("grouped_gemm", "a", {"x": torch.ones(2)}, [], {"reference": {"y": torch.ones(2)}})
    s.finish()
    assert store.load_manifest(d)["cases"][0]["case"] == "a"

    s = store.Saver(d, seed=2)      # a new save over it, interrupted while writing a case
    assert not (d / "manifest.json").exists()

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(store.os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        s.add("grouped_gemm", "a", {"x": torch.zeros(2)}, [], {"reference": {"y": torch.zeros(2)}})
    monkeypatch.undo()
    assert not list(d.glob(".*.tmp")), "temporary files left behind"
    assert torch.load(d / "grouped_gemm__a.pt")["inputs"]["x"].sum() == 2   # old file whole
    with pytest.raises(FileNotFoundError, match="interrupted"):
        store.load_manifest(d)


def test_compare_with_bad_files(capsys, tmp_path):
    bad = {"list.json": "[1, 2]", "corrupt.json": "{\"rows\": [", "other.json": json.dumps({"format": "x"}),
           "rows.json": json.dumps({"format": "dualops-bench-report", "rows": [{"op": 1}]}),
           "norows.json": json.dumps({"format": "dualops-bench-report"})}
    want = {"list.json": "holds a JSON list", "corrupt.json": "is not valid JSON",
            "other.json": "is not a dualops bench report", "rows.json": "rows[0] is not a bench row",
            "norows.json": "'rows' is missing"}
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
        rc, out, err = _main(capsys, "bench", "--sweep", "quick-gg", "--backend", "reference", "--no-plots",
                             "--compare", tmp_path / name, "--out", tmp_path / "rep")
        line = _one_error_line(err)
        assert rc == 2 and want[name] in line and str(tmp_path / name) in line, line
        assert not (tmp_path / "rep" / "bench.json").exists()   # refused before the run
    rc, _, err = _main(capsys, "bench", "--compare", tmp_path / "missing.json", "--out", tmp_path / "rep")
    assert rc == 2 and "does not exist" in _one_error_line(err)


@pytest.mark.parametrize("argv", [("parity", "--op", "grouped_gemm", "--backend", "reference"),
                                  ("bench", "--sweep", "quick-gg", "--backend", "reference"),
                                  ()])
def test_out_pointing_at_a_file(capsys, tmp_path, argv):
    f = tmp_path / "report.txt"
    f.write_text("keep me")
    rc, _, err = _main(capsys, *argv, "--out", f) if argv else _main(capsys, "--out", f)
    line = _one_error_line(err)
    assert rc == 2 and "--out" in line and "is an existing file" in line
    assert f.read_text() == "keep me"
    rc, _, err = _main(capsys, *(argv or ("parity",)), "--out", f / "sub")
    assert rc == 2 and "is a file" in _one_error_line(err)


def test_save_pointing_at_a_file(capsys, tmp_path):
    f = tmp_path / "x"
    f.write_text("")
    rc, _, err = _main(capsys, "parity", "--op", "grouped_gemm", "--backend", "reference", "--save", f,
                       "--out", tmp_path / "rep")
    assert rc == 2 and "--save" in _one_error_line(err)


@pytest.mark.parametrize("flag,value,expect", [("--runs", "-1", "must be >= 1"), ("--runs", "0", "must be >= 1"),
                                               ("--runs", "x", "whole number"), ("--budget", "-2", ">= 0"),
                                               ("--budget", "0", "> 0"), ("--threshold", "-0.1", ">= 0"),
                                               ("--cpu-limit", "nan", "finite"), ("--budget", "inf", "finite")])
def test_bench_numbers_checked_at_parse_time(capsys, flag, value, expect):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", flag, value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and flag in err and expect in err


@pytest.mark.parametrize("var,value,expect", [
    ("DUALOPS_ASCEND_SIM_PROFILE", "h100", "one of ascend910b2"),
    ("DUALOPS_ASCEND_SIM_PROFILE", "910x", "one of ascend910b2"),
    ("DUALOPS_ASCEND_SIM_CORES", "abc", "a whole number >= 1 and <= 24"),
    ("DUALOPS_ASCEND_SIM_CORES", "0", "a whole number >= 1"),
    ("DUALOPS_ASCEND_SIM_CORES", "99", "<= 24"),
])
def test_sim_environment_settings(monkeypatch, var, value, expect):
    from dualops.backends.ascend_sim import _common

    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as e:
        _common.active_profile()
    msg = str(e.value)
    assert var in msg and repr(value) in msg and expect in msg
    ok, why = dualops.backends.status("ascend_sim")
    assert not ok and var in why


def test_sim_timeout_setting(monkeypatch):
    from dualops import devices
    from dualops.backends.ascend_sim import _common

    for bad in ("-1", "soon", "inf"):
        monkeypatch.setenv("DUALOPS_ASCEND_SIM_TIMEOUT_S", bad)
        with pytest.raises(ValueError, match=f"DUALOPS_ASCEND_SIM_TIMEOUT_S='{bad}'.*finite number > 0"):
            _common.launch_profile(devices.profile("ascend910b2"))
    monkeypatch.setenv("DUALOPS_ASCEND_SIM_TIMEOUT_S", "2.5")
    assert _common.launch_profile(devices.profile("ascend910b2"))["timeout_s"] == 2.5


def test_native_path_setting(monkeypatch, tmp_path):
    from dualops import native

    monkeypatch.setenv("DUALOPS_C_PATH", str(tmp_path / "nope.so"))
    native.load.cache_clear()
    import sys
    saved = sys.modules.pop("dualops._C", None)
    try:
        mod, why = native.load()
        if mod is None:      # no installed dualops._C: the variable decides, and is named
            assert "DUALOPS_C_PATH" in why and "nope.so" in why
    finally:
        if saved is not None:
            sys.modules["dualops._C"] = saved
        native.load.cache_clear()


def test_every_variable_read_is_listed():
    """Each environment variable the package reads is listed once in dualops.settings."""
    import pathlib
    import re

    from dualops import settings

    root = pathlib.Path(dualops.__file__).parent
    found = set()
    for p in root.rglob("*.py"):
        found |= set(re.findall(r"[\"'](DUALOPS_[A-Z0-9_]+)[\"']", p.read_text()))
    assert found <= set(settings.VARIABLES), found - set(settings.VARIABLES)


def test_setup_refuses_a_bad_cuda_setting():
    """scripts/setup.sh names the variable, the value and what is allowed, before installing anything."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(["bash", os.path.join(root, "scripts", "setup.sh")], capture_output=True, text=True,
                          env={**os.environ, "DUALOPS_CUDA": "maybe"}, timeout=60)
    assert done.returncode == 2
    assert "DUALOPS_CUDA=maybe is not allowed: auto, on or off" in done.stdout

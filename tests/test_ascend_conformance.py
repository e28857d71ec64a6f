"""The Ascend C kernels (backends/ascend outside sim/) against CANN's published AscendC API: an
AscendC conformance tool kept outside this repository, named by the environment variable
DUALOPS_ASCENDC_CONFORMANCE (the path of its script, run as `python SCRIPT . --lint` from the
repository root), must report no unknown name, arity, field or limit and no lint finding (host
functions called from __aicore__ code, generic pointers cast to __gm__, vector code without
PipeBarrier<PIPE_V>). Without that setting, or with a path that is no file, the test is skipped
and the skip says why (docs/ascend_sim.md, "Checked against CANN")."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETTING = "DUALOPS_ASCENDC_CONFORMANCE"


def _tool():
    path = os.environ.get(SETTING, "")
    if not path:
        pytest.skip(f"{SETTING} is not set: no AscendC conformance tool to run (docs/ascend_sim.md)")
    tool = pathlib.Path(path).expanduser()
    if not tool.is_file():
        pytest.skip(f"{SETTING}={path} names no file: no AscendC conformance tool to run")
    return tool


def test_ascend_kernels_conform_to_cann_api():
    r = subprocess.run([sys.executable, str(_tool()), ".", "--lint"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    findings = [ln for ln in r.stdout.splitlines() if ": unknown:" in ln or ": lint:" in ln]
    assert r.returncode == 0 and not findings, r.stdout + r.stderr
    assert " 0 unknown, 0 lint findings" in r.stdout, r.stdout

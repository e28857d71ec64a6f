"""The Ascend C kernels (backends/ascend outside sim/) against CANN's published AscendC API: the
conformance tool of the shared checkout (../shared/tools/ascendc_conformance.py, from the
repository root) must report no unknown name, arity, field or limit and no lint finding (host
functions called from __aicore__ code, generic pointers cast to __gm__, vector code without
PipeBarrier<PIPE_V>). Skipped where ../shared is not there."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOOL = ROOT.parent / "shared" / "tools" / "ascendc_conformance.py"


@pytest.mark.skipif(not TOOL.is_file(), reason=f"{TOOL} not present (no ../shared checkout)")
def test_ascend_kernels_conform_to_cann_api():
    r = subprocess.run([sys.executable, str(TOOL), ".", "--lint"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    findings = [ln for ln in r.stdout.splitlines() if ": unknown:" in ln or ": lint:" in ln]
    assert r.returncode == 0 and not findings, r.stdout + r.stderr
    assert " 0 unknown, 0 lint findings" in r.stdout, r.stdout

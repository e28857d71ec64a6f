"""scripts/setup.sh's CUDA decision (``--cuda-decision`` prints it without building): auto builds
the CUDA kernels only where nvcc is AND a GPU is visible, on wherever nvcc is, off never. The
machine is faked with a PATH holding only stand-ins for nvcc / nvidia-smi and the few tools the
decision uses."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup.sh"
GPU_LINE = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"

pytestmark = pytest.mark.skipif(os.path.exists("/dev/nvidia0"),
                                reason="this machine has /dev/nvidia0: the no-GPU cases cannot be faked")


def _fake_path(tmp_path, *, nvcc: bool, smi: str | None) -> str:
    """A PATH of one folder: the tools the decision needs, plus fake nvcc / nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("find", "wc", "nproc", "grep", "dirname"):
        real = shutil.which(tool)
        assert real, f"{tool} is needed by this test"
        (bin_dir / tool).symlink_to(real)
    if nvcc:
        (bin_dir / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8'\n")
        (bin_dir / "nvcc").chmod(0o755)
    if smi is not None:
        (bin_dir / "nvidia-smi").write_text(smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
    return str(bin_dir)


def _decide(tmp_path, mode, **fake) -> str:
    env = {"PATH": _fake_path(tmp_path, **fake), "CMAKE_BUILD_PARALLEL_LEVEL": "2", "HOME": str(tmp_path)}
    if mode is not None:
        env["DUALOPS_CUDA"] = mode
    done = subprocess.run([shutil.which("bash"), str(SETUP), "--cuda-decision"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_auto_without_a_gpu_does_not_compile(tmp_path):
    for smi in (None, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the "
                      "NVIDIA driver'\nexit 9\n", "#!/bin/sh\necho 'No devices found.'\n"):
        out = _decide(tmp_path / str(hash(smi) & 0xFFFF), None, nvcc=True, smi=smi)
        assert out.startswith("no: nvcc is here but no NVIDIA GPU is visible"), out
        assert "DUALOPS_CUDA=on compiles them anyway" in out
        assert re.search(r"about \d+ min on 2 idle cores", out), out


def test_auto_with_a_gpu_compiles(tmp_path):
    assert _decide(tmp_path, "auto", nvcc=True, smi=f"#!/bin/sh\necho '{GPU_LINE}'\n") == "yes"


def test_auto_without_nvcc(tmp_path):
    out = _decide(tmp_path, "auto", nvcc=False, smi=f"#!/bin/sh\necho '{GPU_LINE}'\n")
    assert out.startswith("no: no nvcc on PATH"), out


def test_on_compiles_wherever_nvcc_is_and_off_never(tmp_path):
    assert _decide(tmp_path, "on", nvcc=True, smi=None) == "yes"
    assert _decide(tmp_path / "b", "on", nvcc=False, smi=None) == "error"   # setup.sh stops with a message
    assert _decide(tmp_path / "c", "off", nvcc=True, smi=f"#!/bin/sh\necho '{GPU_LINE}'\n").startswith(
        "no: DUALOPS_CUDA=off")


def test_ci_asks_for_the_cuda_build():
    text = (ROOT / ".ci" / "run").read_text()
    assert "export DUALOPS_CUDA=${DUALOPS_CUDA:-on}" in text

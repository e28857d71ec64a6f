"""The native module is built, and built with what scripts/setup.sh decides for this machine:
CUDA kernels with DUALOPS_CUDA=on wherever nvcc is (CI sets it, so the CPU-only CI still compiles
every .cu file), with auto (the default) where nvcc is and a GPU is visible, never with off."""
import os
import subprocess
from pathlib import Path

from dualops import native

SETUP = Path(__file__).resolve().parents[1] / "scripts" / "setup.sh"


def test_native_module_loads():
    mod, reason = native.load()
    assert mod is not None, reason
    assert mod.built["ascend_sim"] is True


def test_cuda_built_as_setup_decides():
    mod, reason = native.load()
    assert mod is not None, reason
    done = subprocess.run(["bash", str(SETUP), "--cuda-decision"], capture_output=True, text=True, timeout=60)
    decision = done.stdout.strip()
    assert done.returncode == 0 and decision, done.stderr
    mode = os.environ.get("DUALOPS_CUDA", "auto")
    if decision == "yes":
        assert mod.built["cuda"] is True, f"DUALOPS_CUDA={mode} builds the CUDA kernels here, but dualops._C " \
                                          f"was built without them"
        assert hasattr(mod, "cuda_incre_flash_attention")
    else:
        assert mod.built["cuda"] is False, f"DUALOPS_CUDA={mode} here: {decision}"

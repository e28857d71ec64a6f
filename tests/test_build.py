"""The native module is built, and built with what this machine offers: CUDA kernels are
compiled whenever nvcc is present (so the CPU-only CI still compiles every .cu file)."""
import os
import shutil

from dualops import native


def test_native_module_loads():
    mod, reason = native.load()
    assert mod is not None, reason
    assert mod.built["ascend_sim"] is True


def test_cuda_compiled_when_nvcc_present():
    mod, reason = native.load()
    assert mod is not None, reason
    if shutil.which("nvcc") and os.environ.get("DUALOPS_CUDA", "auto") != "off":
        assert mod.built["cuda"] is True, "nvcc is here but dualops._C was built without CUDA"
        assert hasattr(mod, "cuda_incre_flash_attention")
    else:
        assert mod.built["cuda"] is False

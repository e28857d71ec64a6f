"""Huawei Ascend NPU through torch_npu and CANN-built kernels.

torch_npu is an optional extra (``pip install dualops[npu]`` on a machine with CANN): never
install it elsewhere, as ``import torch`` then fails. The NPU build of the Ascend C kernels
goes through CANN's toolchain (CMake detects ASCEND_HOME_PATH); on this backend no op is
implemented yet, so dualops.supports(op, "npu") is False for every op (the schema's capability
matrix has no "npu" entry) and the simulator (backend "ascend_sim") runs the same kernel source.
"""
from __future__ import annotations

import importlib.util

NAME = "npu"


def status():
    if importlib.util.find_spec("torch_npu") is None:
        return False, "torch_npu is not installed (it needs CANN; use backend='ascend_sim' to run the Ascend C kernels on the CPU)"
    from .. import native

    mod, reason = native.load()
    if mod is None:
        return False, reason
    if not mod.built.get("cann"):
        return False, "dualops was built without CANN (ASCEND_HOME_PATH was not set at build time)"
    import torch

    if not (hasattr(torch, "npu") and torch.npu.is_available()):
        return False, "torch_npu is installed but no NPU is visible"
    return True, "torch_npu with CANN-built kernels"

"""The CUDA backend: Hopper (sm_90a) kernels in ``dualops._C``, one module per op
(``incre_flash_attention``, ...) over the shared glue of ``_common``.

Each op module turns validated tensors into its packed params struct (device addresses and
strides), takes the plan (made from the shapes when the caller passes none), allocates outputs
and workspace on the tensors' device and launches on torch's current stream. Nothing reads
device values or synchronizes, so a call can be captured in a CUDA graph.
"""
from __future__ import annotations

import functools

import torch

from ... import native

NAME = "cuda"

# What the kernels are built for (CMake: sm_90a).
_ARCH = (9, 0)


@functools.lru_cache(maxsize=1)
def status():
    """Read once per process (every dispatch asks): the GPU and the build do not change."""
    if not torch.cuda.is_available():
        return False, "torch.cuda is not available (no CUDA device, or a CPU build of torch)"
    mod, reason = native.load()
    if mod is None:
        return False, reason
    if not hasattr(mod, "cuda_ops"):
        return False, "dualops._C was built without CUDA (no nvcc at build time; set DUALOPS_CUDA=on to require it)"
    cap = torch.cuda.get_device_capability()
    if tuple(cap) != _ARCH:
        return False, f"the kernels are built for sm_90a (Hopper); this GPU is sm_{cap[0]}{cap[1]}"
    return True, f"sm_90a kernels on {torch.cuda.get_device_name()}"


def built_ops() -> tuple[str, ...]:
    """The ops whose CUDA kernels this build of dualops._C holds."""
    mod, _ = native.load()
    return tuple(getattr(mod, "cuda_ops", ())) if mod is not None else ()

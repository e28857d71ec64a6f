"""Glue shared by the NPU op modules: the device's profile and the launch on torch_npu's current
stream. The op modules reuse the simulator's glue through its ``Target`` (ascend_sim/_common.py)."""
from __future__ import annotations

import functools

import torch

from ... import devices, native
from ..ascend_sim._common import Target

NAME = "npu"


def _torch_npu():
    import torch_npu  # noqa: F401  (registers torch.npu)

    if not (hasattr(torch, "npu") and torch.npu.is_available()):
        raise RuntimeError("torch_npu is installed but no NPU is visible")
    return torch.npu


@functools.lru_cache(maxsize=None)
def _device_info(index: int) -> dict:
    npu = _torch_npu()
    npu.set_device(index)   # the runtime answers for the current device
    return dict(native.require().npu_device_info())


def device_info() -> dict:
    """The current NPU as CANN's runtime reports it: soc, ai_cores, vector_cores, cann_version,
    and built_soc, the SoC the kernels were compiled for."""
    return _device_info(_torch_npu().current_device())


def profile() -> devices.DeviceProfile:
    """The profile plans are made for: the SoC's, with the AI-core count the runtime reports."""
    info = device_info()
    name = (info["soc"] or devices.DEFAULT_NPU_PROFILE).lower()
    p = devices.profile(name) if name in devices.PROFILES else devices.profile(devices.DEFAULT_NPU_PROFILE)
    cores = info["ai_cores"]
    return devices.with_cores(p, cores) if cores and 0 < cores < p.num_cores else p


def current_stream() -> int:
    """torch_npu's current stream as an aclrtStream handle (an integer)."""
    return int(_torch_npu().current_stream().npu_stream)


def launch(op: str, kernel: str, num_cores: int, args: list[int], regions, prof, plan) -> None:
    """Launch the CANN-built kernel on the current stream. `regions` (the simulator's bounds
    list) is not used: the NPU's own memory protection applies."""
    native.require().npu_launch(kernel, int(num_cores), current_stream(), [int(a) for a in args])


TARGET = Target(NAME, "npu", profile, launch)


def on_npu(fn):
    """The simulator glue's op function `fn` (docs/internals.md "Backend module interface") with
    its buffers on the NPU and the kernel launched there."""

    @functools.wraps(fn)
    def op(*args, **kwargs):
        return fn(*args, **kwargs, _target=TARGET)

    return op

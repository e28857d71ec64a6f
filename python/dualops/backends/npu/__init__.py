"""The NPU backend: the Ascend C kernels of ``backends/ascend`` built by CANN (``ascendc_library``,
CMake's CANN branch) and launched through ``dualops._C.npu_launch`` on torch_npu's current stream,
one module per op over the shared glue of ``_common``.

Each op module is the simulator's glue (``backends/ascend_sim/<op>.py``: checks, plan for this
NPU's profile, tiling, packed params, workspace sizes) with outputs, workspace, params and tiling
allocated on the NPU and the kernel launched by CANN's generated ``aclrtlaunch_<kernel>``.

torch_npu is an optional extra (``pip install dualops[npu]`` on a machine with CANN): never
install it elsewhere, as ``import torch`` then fails. This backend has not yet run on NPU
hardware; what is checked without one is listed in docs/npu.md.
"""
from __future__ import annotations

import functools
import importlib.util

from ... import native

NAME = "npu"
# As on the simulator: the kernels trust device values, so the API checks them on every call.
CHECK_VALUES = True


def _cann_install_version() -> str | None:
    """CANN's version from the toolkit's install record (ASCEND_HOME_PATH), without torch_npu."""
    import pathlib

    from ... import settings

    home = settings.raw("ASCEND_HOME_PATH")
    if home is None:
        return None
    for name in ("ascend_toolkit_install.info", "version.cfg", "compiler/version.info"):
        f = pathlib.Path(home) / name
        if f.is_file():
            for line in f.read_text(errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip().lower() in ("version", "toolkit_installed_version") and value.strip():
                    return value.strip().strip('"').split(":")[-1]
    return None


@functools.lru_cache(maxsize=1)
def status():
    """Read once per process: torch_npu, the build and the device do not change."""
    cann = _cann_install_version()
    cann_txt = f"CANN {cann} is installed" if cann else "no CANN found (ASCEND_HOME_PATH is not set)"
    if importlib.util.find_spec("torch_npu") is None:
        return False, (f"torch_npu is not installed; {cann_txt} (on an Ascend host: pip install dualops[npu]; "
                       f"backend='ascend_sim' runs the same Ascend C kernels on the CPU)")
    mod, reason = native.load()
    if mod is None:
        return False, reason
    if not hasattr(mod, "npu_launch"):
        return False, ("dualops._C was built without CANN (ASCEND_HOME_PATH was not set at build time; "
                       f"{cann_txt}): rebuild on the Ascend host, docs/npu.md")
    from . import _common

    try:
        info = _common.device_info()
    except Exception as e:  # torch_npu or the runtime failing to answer: not available, and why
        return False, f"the NPU did not answer the device queries: {type(e).__name__}: {e}"
    built, soc = info["built_soc"], (info["soc"] or "?")
    if soc.lower() != built.lower():
        return False, f"the kernels are built for {built}, this NPU is {soc}: rebuild with DUALOPS_SOC={soc.lower()}"
    return True, (f"Ascend C kernels built by CANN {info['cann_version'] or cann or '?'} for {built} on {soc} "
                  f"({info['ai_cores']} AI cores, {info['vector_cores']} vector cores)")


def built_ops() -> tuple[str, ...]:
    """The ops whose NPU kernels this build of dualops._C holds."""
    mod, _ = native.load()
    return tuple(mod.npu_kernels()) if mod is not None and hasattr(mod, "npu_kernels") else ()

"""What this machine is and what dualops can run on it: recorded in every parity and bench
report, and printed by ``python -m dualops info``."""
from __future__ import annotations

import datetime
import platform
import socket

import torch

_BACKEND_DEVICE = {"reference": "cpu", "ascend_sim": "cpu", "cuda": "cuda", "npu": "npu"}


def backend_device(backend: str) -> str:
    """The device type a backend's tensors live on."""
    if backend not in _BACKEND_DEVICE:
        raise ValueError(f"backend must be one of {sorted(_BACKEND_DEVICE)}, got {backend!r}")
    return _BACKEND_DEVICE[backend]


def accelerator() -> str | None:
    """The accelerator device type torch sees here ("cuda", "npu") or None, whether or not a
    dualops backend for it is available (peers can be timed on it either way)."""
    if torch.cuda.is_available():
        return "cuda"
    npu = getattr(torch, "npu", None)
    if npu is not None and callable(getattr(npu, "is_available", None)) and npu.is_available():
        return "npu"
    return None


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def cuda_devices() -> list[dict]:
    if not torch.cuda.is_available():
        return []
    from .. import devices

    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        try:
            prof = devices.from_cuda_properties(p)
            profile = {"name": prof.name, "describe": prof.describe()}
        except (ValueError, TypeError) as e:
            profile = {"name": None, "describe": f"no profile: {e}"}
        out.append({"index": i, "name": p.name, "sms": p.multi_processor_count,
                    "memory_gib": round(p.total_memory / 2 ** 30, 1),
                    "capability": f"{p.major}.{p.minor}", "profile": profile})
    return out


def machine() -> dict:
    import dualops

    return {"host": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "dualops": dualops.__version__,
            "cpu_threads": torch.get_num_threads(), "cuda_devices": cuda_devices()}


def describe_machine(m: dict) -> str:
    gpus = ", ".join(f"{d['name']} ({d['sms']} SMs)" for d in m.get("cuda_devices", [])) or "no CUDA device"
    return f"{m['host']}: torch {m['torch']}, Python {m['python']}, {gpus}"


def native_build() -> dict:
    """The native module's state: built or not (with the reason) and its build flags."""
    from .. import native

    mod, reason = native.load()
    if mod is None:
        return {"built": False, "reason": reason, "flags": {}}
    flags = dict(getattr(mod, "built", {}) or {})
    for extra in ("build_info", "build_flags"):
        val = getattr(mod, extra, None)
        if isinstance(val, dict):
            flags.update(val)
    return {"built": True, "reason": reason, "flags": flags}


def sim_profile() -> dict:
    """The 910B profile the Ascend simulator models (and its cost model estimates for)."""
    from .. import devices

    p = devices.profile(devices.DEFAULT_SIM_PROFILE)
    return {"name": p.name, "describe": p.describe()}


def capabilities() -> dict:
    """{op: {backend: {feature: rule}}} from the op schemas."""
    from .. import schema

    return {op: schema.load(op).capabilities for op in schema.OPS}


def info() -> dict:
    import dualops

    return {"created": now(), "machine": machine(), "backends": dualops.backends(),
            "native": native_build(), "sim_profile": sim_profile(), "npu_profile": _npu_profile(),
            "capabilities": capabilities()}


def _npu_profile() -> str:
    from .. import devices

    return devices.DEFAULT_NPU_PROFILE


def format_info(d: dict) -> str:
    """``python -m dualops info`` as text."""
    m = d["machine"]
    lines = [f"dualops {m['dualops']} on {m['host']} ({m['platform']})",
             f"torch {m['torch']} (CUDA {m['torch_cuda'] or 'none'}), Python {m['python']}, "
             f"{m['cpu_threads']} CPU threads", "", "backends:"]
    for name, s in d["backends"].items():
        lines.append(f"  {name:<11} {'available' if s['available'] else 'unavailable':<12} {s['reason']}")
    lines += ["", "devices:"]
    if not m["cuda_devices"]:
        lines.append("  no CUDA device")
    for g in m["cuda_devices"]:
        lines.append(f"  cuda:{g['index']} {g['name']}: {g['sms']} SMs, {g['memory_gib']} GiB, "
                     f"sm_{g['capability'].replace('.', '')}; profile {g['profile']['describe']}")
    lines.append(f"  ascend_sim models {d['sim_profile']['describe']}")
    lines.append(f"  npu plans use the {d['npu_profile']} profile (torch_npu does not report the SoC)")
    n = d["native"]
    lines += ["", f"native module dualops._C: {'built' if n['built'] else 'not built'}"]
    if n["built"]:
        lines += [f"  {k} = {v}" for k, v in sorted(n["flags"].items())]
    else:
        lines.append(f"  {n['reason']}")
    lines += ["", "capability matrix (ops/*.yaml; features a backend does not list are unrestricted):"]
    for op, caps in d["capabilities"].items():
        lines.append(f"  {op}:")
        for backend in ("reference", "cuda", "ascend_sim", "npu"):
            if backend not in caps:
                lines.append(f"    {backend:<11} not implemented")
                continue
            rules = caps[backend] or {}
            shown = ", ".join(f"{k} {v}" for k, v in rules.items()) or "every variant"
            lines.append(f"    {backend:<11} {shown}")
    return "\n".join(lines)

"""``python -m dualops info --op OP --shape K=V,...``: the plan a call of that shape gets and every
launch choice it holds, so a user can see why a call runs as it does.

The shape uses the bench vocabulary (``python -m dualops bench --list``; e.g. ``b=64,h_q=16,s_k=4096``
for mla_decode). The plan is made by the op's planner for the device profile the backend runs on
(``--device`` names another: h100, h200, ascend910b2, ...), exactly as a call would make it."""
from __future__ import annotations

import dataclasses
import math

from . import devices


def _profile(backend: str, device: str | None):
    """(DeviceProfile, how it was chosen)."""
    if device:
        return devices.detect(device) if device in ("cpu", "npu", "ascend_sim") else devices.profile(device), \
            "given by --device"
    if backend == "cuda":
        import torch

        if torch.cuda.is_available():
            return devices.detect(torch.device("cuda")), "this machine's GPU"
        return devices.profile("h100"), "no GPU here: the H100 profile (pass --device h200 for the other)"
    if backend == "ascend_sim":
        from .backends.ascend_sim import _common

        return _common.active_profile(), "the profile the simulator runs (DUALOPS_ASCEND_SIM_PROFILE / _CORES)"
    if backend == "npu":
        return devices.profile(devices.DEFAULT_NPU_PROFILE), "the NPU default profile"
    return devices.profile(devices.DEFAULT_CPU_PROFILE), "the reference runs no plan; shown for the CPU default"


def _default_backend() -> str:
    import dualops

    st = dualops.backends()
    for b in ("cuda", "npu", "ascend_sim"):
        if st[b]["available"]:
            return b
    return "reference"


def make_plan(op: str, s: dict, profile):
    """The planner's plan for a normalized bench shape ``s`` of ``op`` on ``profile``."""
    from . import tiling

    if op == "incre_flash_attention":
        paged = s["layout"] == "paged"
        bs = s["block_size"] if paged else 0
        max_kv = math.ceil(s["s_kv"] / bs) * bs if paged else s["s_kv"]
        return tiling.plan_incre_flash_attention(
            batch=s["b"], s_q=s["s_q"], h_q=s["h_q"], h_kv=s["h_kv"], head_dim=s["d"], max_kv_len=max_kv,
            block_size=bs, kv_dtype_bytes=1 if s["kv_dtype"] in ("int8", "fp8") else 2, device=profile)
    if op == "mla_decode":
        return tiling.plan_mla_decode([s["s_k"]] * s["b"], num_heads_q=s["h_q"], num_heads_k=1, s_q=s["s_q"],
                                      kv_format=s["kv_format"], topk=s["topk"] or None,
                                      page_block_size=s["page"], device=profile)
    from .bench.grouped_gemm import RECIPES

    dtype, mode = RECIPES[s["recipe"]]
    if s["layout"] == "masked":
        return tiling.plan_grouped_gemm(layout="masked", m_max=s["m"], num_groups=s["g"], n=s["n"], k=s["k"],
                                        dtype=dtype, scale_mode=mode, device=profile)
    return tiling.plan_grouped_gemm([s["m"]] * s["g"], n=s["n"], k=s["k"], dtype=dtype, scale_mode=mode,
                                    device=profile)


def _fields(plan) -> list[tuple[str, str]]:
    """Every scalar field of the plan (arrays summarised by their length)."""
    out = []
    for f in dataclasses.fields(plan):
        v = getattr(plan, f.name)
        if isinstance(v, (tuple, list)):
            v = f"[{len(v)} ints]"
        out.append((f.name, str(v)))
    return out


def explain(op: str, shape_text: str, *, backend: str | None = None, device: str | None = None) -> str:
    from . import schema
    from .bench import sweeps, workloads

    if op not in schema.OPS:
        raise ValueError(f"--op must be one of {', '.join(schema.OPS)}, got {op!r}")
    mod = workloads.module(op)
    s = mod.normalize(sweeps.parse_shape(shape_text or ""))
    if backend is None and device:
        kind = _profile("reference", device)[0]
        backend = "cuda" if kind.is_cuda else ("npu" if _default_backend() == "npu" else "ascend_sim")
    backend = backend or _default_backend()
    profile, why = _profile(backend, device)
    plan = make_plan(op, s, profile)
    lines = [f"{op} {mod.label(s)} on backend {backend}",
             f"device profile: {profile.describe() if hasattr(profile, 'describe') else profile.name} ({why})",
             f"plan: {plan.describe()}"]
    choices = getattr(plan, "launch_choices", None)
    if callable(choices):
        lines.append("launch choices:")
        lines += [f"  {k}: {v}" for k, v in choices().items()]
    lines.append("plan fields:")
    width = max(len(k) for k, _ in _fields(plan))
    lines += [f"  {k:<{width}}  {v}" for k, v in _fields(plan)]
    if op == "mla_decode":
        lines.append("per part (begin_req, end_req, begin_token, end_token, begin_split, first/last split):")
        for p in range(min(plan.num_sm_parts, 8)):
            rec = plan.part(p)
            lines.append(f"  part {p}: " + ", ".join(f"{k}={v}" for k, v in rec.items()))
        if plan.num_sm_parts > 8:
            lines.append(f"  ... {plan.num_sm_parts - 8} more parts")
        splits = [plan.splits_of(r) for r in range(plan.batch)]
        lines.append(f"splits per request: {splits[:16]}{' ...' if len(splits) > 16 else ''} "
                     f"(partials: {plan.workspace_floats()[0] * 4 / 2**20:.2f} MiB o_accum)")
    if backend == "reference":
        lines.append("note: the reference backend computes in plain torch and reads no plan")
    return "\n".join(lines)

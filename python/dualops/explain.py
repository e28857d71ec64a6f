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
    """Every scalar field of the plan (arrays summarised by their length, a device profile by
    its name)."""
    out = []
    for f in dataclasses.fields(plan):
        v = getattr(plan, f.name)
        if isinstance(v, (tuple, list)):
            v = f"[{len(v)} ints]"
        elif isinstance(v, devices.DeviceProfile):
            v = f"profile {v.name}"
        out.append((f.name, str(v)))
    return out


def device_words(profile) -> str:
    """A device profile in words: what it is and the figures plans use."""
    if profile.is_cuda:
        cores = f"{profile.num_cores} SMs, {profile.smem_per_core_bytes // 1024} KiB shared memory per block"
    else:
        cores = f"{profile.num_cores} AI cores (cube) and {profile.num_vector_cores} vector cores"
    return (f"{profile.name} ({'NVIDIA GPU' if profile.is_cuda else 'Ascend NPU'}): {cores}, "
            f"{profile.hbm_bandwidth_gbs:g} GB/s HBM, {profile.peak_bf16_tflops:.0f} bf16 TFLOPS")


_MLA_KERNEL_WORDS = {"wgmma": "Hopper wgmma split kernel (KV tiles double-buffered)",
                     "wgmma_t": "transposed-tile wgmma split kernel (tokens on the 64-row side; splits merged "
                                "in the kernel)",
                     "wgmma_seesaw": "wgmma split kernel with the seesaw tile loop (TMA copies)"}


def kernel_and_choices(op: str, backend: str, s: dict, plan, profile) -> tuple[str, list[tuple[str, str]]]:
    """(the kernel a call runs, in words; [(launch choice, value)]) for ``backend``."""
    if backend == "reference":
        return ("none: the reference computes in plain torch (fp32); pass --device h100 or --device "
                "ascend910b2 for the kernel and launch choices there"), []
    ascend = backend in ("ascend_sim", "npu")
    where = "on the CPU simulator" if backend == "ascend_sim" else "on the NPU"
    if op == "mla_decode":
        from .heuristics import cuda as H
        from .tiling import mla_decode as t

        choices = [("parts (one per core group)", str(plan.num_sm_parts)), ("m-blocks per request", str(plan.num_m_blocks)),
                   ("splits over all requests", str(plan.total_splits)),
                   ("blocks per part (payload)", f"{plan.payload} of {plan.block_tokens} tokens")]
        if ascend:
            return f"Ascend C mla_decode kernel {where} (cube Q K^T and P V, vector online softmax)", choices
        rows = s["h_q"] if s["topk"] else s["s_q"] * s["h_q"]
        k = H.cuda_mla_kernel(profile, kv_format=s["kv_format"], q_rows=rows, page_block_size=s["page"],
                              sparse=bool(s["topk"]))
        choices.insert(0, ("split kernel", k))
        choices.append(("fixed cost per request piece", f"{t.mla_fixed_overhead(profile, q_rows=rows)} blocks"))
        if s["topk"]:
            choices.append(("sort key lists", str(H.cuda_mla_sort_keys(kv_format=s["kv_format"], h_q=s["h_q"],
                                                                        topk=s["topk"]))))
        merge = "none (one split per request)" if plan.total_splits <= plan.batch else \
            ("in the split kernel" if k == "wgmma_t" else "combine kernel")
        choices.append(("merge of split partials", merge))
        return f"CUDA {_MLA_KERNEL_WORDS[k]} ({k})", choices
    if op == "incre_flash_attention":
        choices = [("kv tile", str(plan.kv_tile)), ("q tile rows", f"{plan.q_tile_rows} of {plan.q_rows}"),
                   ("split-KV", f"{plan.num_splits} splits of {plan.split_len} keys"),
                   ("work units", f"{plan.num_units} on {plan.num_cores} cores")]
        if ascend:
            return f"Ascend C incre_flash_attention kernel {where} (cube Q K^T and P V, vector online softmax)", \
                choices
        from .heuristics import cuda as H

        launch = plan.launch
        named = {"variant": H.VARIANT_NAMES, "merge": H.MERGE_NAMES, "merge_fallback": H.MERGE_NAMES}
        for f in plan.LAUNCH_FIELDS:
            v = getattr(launch, f)
            choices.append((f, named[f][v] if f in named and v in named[f] else str(v)))

        return f"CUDA IFA {H.describe_ifa_launch(launch).removeprefix('cuda: ') or 'split kernel'}", choices
    choices = [("tile", f"{plan.tile_m} x {plan.tile_n} x {plan.tile_k}"), ("stages", str(plan.stages)),
               ("work items", f"{plan.num_items} on {plan.num_cores} cores")]
    if ascend:
        return f"Ascend C grouped_gemm cube kernel {where}" + (f" ({plan.onchip})" if plan.onchip else ""), choices
    k = plan.cuda_kernel
    choices.insert(0, ("kernel", k))
    if k != "mma":
        choices.append(("tile order", "along N" if plan.cuda_raster == "n" else "along M"))
    words = "own mma.sync grouped GEMM kernel (every case)" if k == "mma" else \
        f"CUTLASS grouped TMA + wgmma kernel {k}"
    return f"CUDA {words}", choices


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
    kernel, choices = kernel_and_choices(op, backend, s, plan, profile)
    lines = [f"{op} {mod.label(s)} on backend {backend}",
             f"device: {device_words(profile)} ({why})",
             f"kernel: {kernel}",
             f"plan: {plan.describe()}"]
    if choices:
        lines.append("launch choices (made by the planner; docs/tuning.md lists those a user can override):")
        width = max(len(k) for k, _ in choices)
        lines += [f"  {k:<{width}}  {v}" for k, v in choices]
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

"""``python -m dualops info --plan SPEC``: the plan a planner makes for a problem written as text,
with every launch choice it carries (and the header it packs to)."""
from __future__ import annotations

from .. import devices, tuning

_DTYPES = {"bfloat16": (2, 2), "bf16": (2, 2), "float16": (2, 1), "fp16": (2, 1), "f16": (2, 1),
           "int8": (1, 3), "float8_e4m3fn": (1, 4), "fp8": (1, 4)}


def _pairs(text: str, what: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise ValueError(f"{what}: expected KEY=VALUE items separated by commas, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _value(v: str):
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(v)
    except ValueError:
        return v


def plan_from_spec(spec: str, device: str = "h100", tune: str = ""):
    """The IFA plan of `spec` ("batch=1,s_q=1,h_q=8,h_kv=1,head_dim=128,max_kv_len=131072[,block_size=64]
    [,kv_dtype=int8][,num_splits=N][,split_len=N][,whole_groups=N]") on profile `device`, under the
    tuning overrides `tune` ("ifa_merge=kernel,ifa_pdl=false"). Forced split fields re-plan the launch."""
    args = _pairs(spec, "--plan")
    op = args.pop("op", "incre_flash_attention")
    if op != "incre_flash_attention":
        raise ValueError(f"--plan: only op=incre_flash_attention has launch choices to show, got {op!r}")
    kv = args.pop("kv_dtype", "bfloat16")
    if kv not in _DTYPES:
        raise ValueError(f"--plan: kv_dtype must be one of {', '.join(_DTYPES)}, got {kv!r}")
    kv_bytes, code = _DTYPES[kv]
    forced = {k: int(args.pop(k)) for k in ("num_splits", "split_len", "whole_groups") if k in args}
    from .incre_flash_attention import plan_incre_flash_attention
    with tuning.override(**{k: _value(v) for k, v in _pairs(tune, "--tune").items()}):
        plan = plan_incre_flash_attention(**{k: int(v) for k, v in args.items()}, kv_dtype_bytes=kv_bytes,
                                          kv_dtype=code, device=devices.profile(device))
        if forced:
            plan = plan.with_splits(forced.get("num_splits"), split_len=forced.get("split_len"),
                                    whole_groups=forced.get("whole_groups", 0))
    return plan


def format_plan(plan, header: bool = False) -> str:
    if header:
        return " ".join(str(v) for v in plan.header())
    lines = [plan.describe()] + [f"  {k} = {v}" for k, v in plan.header_dict().items()]
    return "\n".join(lines)

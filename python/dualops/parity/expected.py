"""The ground truth of a parity check: ``dualops.reference`` in fp32 on the *dequantized* inputs
(docs/parity.md), so quantization error never hides a kernel bug and the reference's own
dequant code is not trusted blindly either: the dequantization here is written independently.

Also the per-op plumbing the runner needs: how to call the public op, what its outputs are
named, which tolerances each output gets and the rounding budget the reference computes for it."""
from __future__ import annotations

import torch

from .. import quant, reference
from ..testing import LSE_TOLERANCE, tolerance_for

OUTPUTS = {"incre_flash_attention": ("out", "lse"), "mla_decode": ("out", "lse"),
           "grouped_gemm": ("y",)}
_QUANT_KV = (torch.int8, torch.float8_e4m3fn)


def dequantized(op: str, inputs: dict) -> dict:
    """The same call with every quantized tensor replaced by its fp32 dequantized values."""
    a = dict(inputs)
    if op == "incre_flash_attention" and a["k_cache"].dtype in _QUANT_KV:
        for n in ("k", "v"):
            a[f"{n}_cache"] = quant.dequantize_kv(a[f"{n}_cache"], a.pop(f"{n}_scale"),
                                                  a.pop(f"{n}_offset", None), out_dtype=torch.float32)
    elif op == "mla_decode" and a.get("kv_format", "bf16") != "bf16":
        fmt = a["kv_format"]
        a["kv_cache"] = quant.unpack_mla_kv(a["kv_cache"], fmt, out_dtype=torch.float32)
        if a.get("extra_kv_cache") is not None:
            a["extra_kv_cache"] = quant.unpack_mla_kv(a["extra_kv_cache"], fmt, out_dtype=torch.float32)
        a["kv_format"] = "bf16"
    elif op == "grouped_gemm" and a.get("scale_mode", "none") != "none":
        a["x"], a["w"] = _dequant_gg(a)
        a.update(scale_mode="none", x_scale=None, w_scale=None)
    return a


def _expand_blocks(scale: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    return scale.repeat_interleave(128, dim=dim).narrow(dim, 0, size)


def _dequant_gg(a: dict):
    x, w = a["x"].to(torch.float32), a["w"].to(torch.float32)
    xs, ws, mode = a.get("x_scale"), a["w_scale"], a["scale_mode"]
    if mode == "per_tensor":
        w = w * ws.view(-1, 1, 1)
        if xs is not None:
            x = x * xs.reshape(())
    elif mode == "rowwise":
        x = x * xs.unsqueeze(-1)
        w = w * ws.unsqueeze(-1)
    elif mode == "blockwise":
        K, N = x.shape[-1], w.shape[1]
        x = x * _expand_blocks(xs, -1, K)
        w = w * _expand_blocks(_expand_blocks(ws, 1, N), 2, K)
    else:
        raise ValueError(f"scale_mode must be none/per_tensor/rowwise/blockwise, got {mode!r}")
    return x, w


def expected(op: str, inputs: dict) -> dict[str, torch.Tensor]:
    """Reference outputs (fp32, CPU) of the call, by output name."""
    return expected_with_budget(op, inputs)[0]


def expected_with_budget(op: str, inputs: dict) -> tuple[dict, dict]:
    """(reference outputs, their rounding budgets), each by output name (fp32, CPU): the budgets
    of docs/parity.md for kernels that round their matrix-unit operands once to q's 16-bit
    type (attention: P, and the dequantized cache), computed on the dequantized inputs. Grouped
    GEMM operands are 16-bit or 8-bit values, exact as MMA operands: its budget is 0."""
    a = dequantized(op, {k: v for k, v in inputs.items() if k != "plan"})
    fn = getattr(reference, op)
    if op == "grouped_gemm":
        y = fn(**a, compute_dtype=torch.float32)
        if inputs.get("scale_mode", "none") != "none":
            return {"y": y}, {"y": torch.zeros_like(y)}
        y, budget = fn(**a, compute_dtype=torch.float32, return_budget=True)
        return {"y": y}, {"y": budget}
    out, lse, budget = fn(**a, compute_dtype=torch.float32, return_budget=True,
                          rounding_dtype=inputs["q"].dtype)
    return {"out": out, "lse": lse}, {"out": budget.out, "lse": budget.lse}


def tolerance(op: str, output: str, inputs: dict) -> tuple[float, float, float]:
    """(atol, rtol, cos_eps) for one output: lse gets LSE_TOLERANCE; attention outputs the tolerances
    of q's dtype; grouped GEMM the looser of the output dtype's tolerances and the inputs' (an fp32
    output of fp16 products still carries fp16-product accumulation error; fp8 / int8 inputs
    count as bf16)."""
    if output == "lse":
        return LSE_TOLERANCE
    if op != "grouped_gemm":
        return tolerance_for(inputs["q"].dtype)
    x_dtype = inputs["x"].dtype
    x_budget = tolerance_for(x_dtype if x_dtype in (torch.float16, torch.bfloat16) else torch.bfloat16)
    out_budget = tolerance_for(inputs.get("out_dtype") or torch.bfloat16)
    return tuple(max(a, b) for a, b in zip(x_budget, out_budget))


def call(op: str, inputs: dict, backend: str) -> dict[str, torch.Tensor]:
    """Run the public op on ``backend``; outputs by name."""
    import dualops

    if op == "incre_flash_attention":
        out, lse = dualops.incre_flash_attention(**inputs, return_lse=True, backend=backend)
        return {"out": out, "lse": lse}
    if op == "mla_decode":
        out, lse = dualops.mla_decode(**inputs, backend=backend)
        return {"out": out, "lse": lse}
    return {"y": dualops.grouped_gemm(**inputs, backend=backend)}


def mla_plan(inputs: dict):
    """The scheduler plan for an MLA call, made on its tensors' device as a user would make it
    (so the backends run with the plan of the shared planner, not one of their own)."""
    import dualops

    q = inputs["q"]
    idx, extra = inputs.get("indices"), inputs.get("extra_indices")
    return dualops.get_mla_metadata(
        inputs["cache_seqlens"], num_heads_q=q.shape[2], num_heads_k=1, s_q=q.shape[1],
        kv_format=inputs.get("kv_format", "bf16"), topk=None if idx is None else idx.shape[-1],
        extra_topk=None if extra is None else extra.shape[-1],
        page_block_size=inputs["kv_cache"].shape[1])

"""The public functions (README.md, docs/ops.md). Each one hands its arguments, by name, to the
op's eager implementation (``ops.run``), or to the custom op ``torch.ops.dualops.<op>`` while
torch.compile traces it; both validate against the schema, pick the backend and run it."""
from __future__ import annotations

import torch

from . import backends as _backends
from . import ops as _ops
from . import schema

# validate=: True / "basic" (the default: shapes, dtypes, layouts), "full" (also device values,
# a sync), False / "none" (the cheapest mode: as "basic", whose checks are cached per signature
# and keep every kernel in bounds, so nothing cheaper is safe).
_VALIDATE = {True: "basic", "basic": "basic", "full": "full", False: "none", "none": "none"}


def _call(op: str, given: dict):
    """Run ``op`` with the arguments of ``given``: a public function's ``locals()``, taken first
    thing in its body, so it holds the schema arguments plus backend / validate (/ return_lse)."""
    if torch.compiler.is_compiling():
        values = {name: given[name] for name in _ops.ARG_NAMES[op]}
        plan = values.get("plan")
        if plan is not None and not isinstance(plan, torch.Tensor):
            values["plan"] = _packed_plan(plan)
        return getattr(torch.ops.dualops, op)(*values.values(), given["backend"] or "",
                                              _mode(given["validate"]))
    backend = given.pop("backend") or ""
    validate = _mode(given.pop("validate"))
    given.pop("return_lse", None)
    return _ops.run(op, given, backend, validate)


def _mode(validate) -> str:
    try:
        return _VALIDATE[validate]
    except (KeyError, TypeError):
        raise ValueError(f"validate must be True, False, 'basic', 'full' or 'none', got {validate!r}") from None


def _packed_plan(plan):
    packed = getattr(plan, "_dualops_packed", None)
    if packed is None:
        if not hasattr(plan, "pack"):
            raise TypeError(f"plan must come from dualops.get_mla_metadata, got {type(plan).__name__}")
        packed = plan.pack()
    return packed


def incre_flash_attention(q, k_cache, v_cache, *, kv_lens=None, block_table=None,
                          softmax_scale=None, causal=False, atten_mask=None, pse_shift=None,
                          k_scale=None, v_scale=None, k_offset=None, v_offset=None,
                          return_lse=False, backend=None, validate=True):
    """Decode attention over a KV cache (native layout BSND).

    q [B, S_q, H_q, D] bf16/fp16; k_cache/v_cache contiguous [B, S_max, H_kv, D] or paged
    [num_blocks, block_size, H_kv, D] (bf16/fp16/int8/fp8 e4m3) with ``block_table`` [B, max_blocks]
    int32 and ``kv_lens`` [B] int32. See ``ops/incre_flash_attention.yaml`` for every argument.
    Returns out [B, S_q, H_q, D] (and lse [B, H_q, S_q] fp32 with ``return_lse=True``).
    ``validate="full"`` also checks kv_lens and block ids against the cache (a device sync)."""
    if not isinstance(return_lse, bool):
        raise TypeError(f"incre_flash_attention: return_lse must be a bool, got {type(return_lse).__name__}")
    out, lse = _call("incre_flash_attention", locals())
    return (out, lse) if return_lse else out


def get_mla_metadata(cache_seqlens, num_heads_q, num_heads_k=1, s_q=1, *, kv_format="bf16",
                     topk=None, extra_topk=None, page_block_size=64, device=None):
    """The MLA scheduler plan for one decode step (FlashMLA's get_mla_metadata); reuse it for every
    layer of the step. Reads cache_seqlens' values (a host sync when they live on a device)."""
    from . import devices
    from .tiling import plan_mla_decode

    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dtype != torch.int32 or cache_seqlens.dim() != 1:
        raise TypeError("get_mla_metadata: cache_seqlens must be an int32 tensor [B]")
    profile = device if isinstance(device, devices.DeviceProfile) else devices.detect(
        cache_seqlens.device if device is None else torch.device(device))
    plan = plan_mla_decode(cache_seqlens, num_heads_q=num_heads_q, num_heads_k=num_heads_k, s_q=s_q,
                           kv_format=kv_format, topk=topk, extra_topk=extra_topk,
                           page_block_size=page_block_size,
                           device=profile)
    object.__setattr__(plan, "_dualops_packed", plan.pack())
    return plan


def mla_decode(q, kv_cache, block_table, cache_seqlens, *, head_dim_v=512, plan=None,
               softmax_scale=None, causal=False, kv_format="bf16", indices=None, topk_length=None,
               attn_sink=None, extra_kv_cache=None, extra_indices=None, extra_topk_length=None,
               backend=None, validate=True):
    """MLA decode with FlashMLA semantics. Returns (out [B, S_q, H_q, 512], lse [B, H_q, S_q] fp32).
    See ``ops/mla_decode.yaml``."""
    if plan is not None and not hasattr(plan, "pack") and not isinstance(plan, torch.Tensor):
        raise TypeError(f"mla_decode: plan must come from dualops.get_mla_metadata, got {type(plan).__name__}")
    return _call("mla_decode", locals())


def grouped_gemm(x, w, *, group_offsets=None, masked_m=None, scale_mode="none", x_scale=None,
                 w_scale=None, out_dtype=torch.bfloat16, backend=None, validate=True):
    """Grouped GEMM, NT layout: y[rows of group g] = x[rows of group g] @ w[g].T.
    Contiguous layout (x [M, K] + group_offsets [G+1]) or masked (x [G, M_max, K] + masked_m [G]).
    See ``ops/grouped_gemm.yaml``."""
    return _call("grouped_gemm", locals())


def supports(op: str, backend: str, **variant) -> bool:
    """Whether ``backend`` implements ``op`` for the variant features (see the ``features`` of
    ``ops/<op>.yaml``), e.g. ``supports("incre_flash_attention", "cuda", kv_dtype="int8", head_dim=128)``.
    Says nothing of whether the backend is available on this machine (see ``dualops.backends()``)."""
    if backend not in _backends.NAMES:
        raise ValueError(f"supports: backend must be one of {_backends.NAMES}, got {backend!r}")
    return schema.supports(op, backend, **variant)

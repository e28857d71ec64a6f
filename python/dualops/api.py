"""The public functions (README.md, docs/ops.md). Each one hands its arguments, in the schema's
order, to the custom op ``torch.ops.dualops.<op>`` (eager calls and torch.compile alike), whose
kernel validates them, picks the backend and runs it (``ops.run``)."""
from __future__ import annotations

import torch

from . import backends as _backends
from . import ops as _ops
from . import schema

# validate=: True / "basic" (the default: shapes, dtypes, layouts), "full" (also device values,
# a sync), False / "none" (the cheapest mode: as "basic", whose checks are cached per signature
# and keep every kernel in bounds, so nothing cheaper is safe).
_VALIDATE = {True: "basic", "basic": "basic", "full": "full", False: "none", "none": "none"}
_OPS = _ops.OPS
# The same ops as the dispatcher's callables (what OpOverload.__call__ calls: one Python frame
# less per eager call); torch.compile traces the OpOverload.
_EAGER = {op: overload._op for op, overload in _OPS.items()}


def _call(op: str, args: tuple, backend, validate):
    """``torch.ops.dualops.<op>`` on ``args`` (the op's schema arguments in order, an object
    argument already packed), with errors that name the op and the argument."""
    try:
        mode = _VALIDATE[validate]
    except (KeyError, TypeError):
        raise ValueError(f"validate must be True, False, 'basic', 'full' or 'none', got {validate!r}") from None
    try:
        return (_OPS if torch.compiler.is_compiling() else _EAGER)[op](*args, backend or "", mode)
    except (ValueError, TypeError, NotImplementedError, RuntimeError) as e:
        raise _explained(op, args, e) from None


def _explained(op: str, args: tuple, e: Exception) -> Exception:
    """``e`` with its message prefixed by the op's name, as the schema's own messages are (a
    backend's message says only what is wrong). The dispatcher's refusal of an argument's type
    (a RuntimeError) becomes the schema's TypeError naming the argument."""
    if torch.compiler.is_compiling():
        return e
    if type(e) is RuntimeError:
        try:
            schema.check_kinds(op, dict(zip(_ops.ARG_NAMES[op], args)))
        except TypeError as clear:
            return clear
        return e
    msg = str(e)
    if type(e) not in (ValueError, TypeError, NotImplementedError) or msg.startswith(f"{op}:"):
        return e
    return type(e)(f"{op}: {msg}").with_traceback(e.__traceback__)


def _packed_plan(plan):
    """A plan object as the custom op takes it: its packed int32 tensor, which carries the
    object (``ops.plan_memo``)."""
    packed = getattr(plan, "_dualops_packed", None)
    if packed is None:
        if not hasattr(plan, "pack"):
            raise TypeError(f"plan must come from dualops.get_mla_metadata, got {type(plan).__name__}")
        packed = plan.pack()
        if not torch.compiler.is_compiling():
            _ops.plan_memo(packed, plan)
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
    out, lse = _call("incre_flash_attention", (
        q, k_cache, v_cache, kv_lens, block_table, softmax_scale, causal, atten_mask, pse_shift,
        k_scale, v_scale, k_offset, v_offset, return_lse), backend, validate)
    return (out, lse) if return_lse else out


def get_mla_metadata(cache_seqlens, num_heads_q, num_heads_k=1, s_q=1, *, kv_format="bf16",
                     topk=None, extra_topk=None, page_block_size=64, device=None, on_device=False):
    """The MLA scheduler plan for one decode step (FlashMLA's get_mla_metadata); reuse it for every
    layer of the step. Reads cache_seqlens' values (a host sync when they live on a device), unless
    ``on_device=True``: then the plan is computed on the GPU from a CUDA ``cache_seqlens`` (CUDA
    backend; no host sync, so it can be captured in a CUDA graph with the layers). Sparse decode
    (``topk``): every request's length comes from topk / extra_topk, cache_seqlens gives the batch."""
    from .tiling import plan_mla_decode

    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dtype != torch.int32 or cache_seqlens.dim() != 1:
        raise TypeError("get_mla_metadata: cache_seqlens must be an int32 tensor [B]")
    if on_device:
        if cache_seqlens.device.type != "cuda":
            raise ValueError(f"get_mla_metadata(on_device=True) needs a CUDA cache_seqlens, got {cache_seqlens.device}")
        from .backends.cuda.mla_decode import plan_on_device

        return plan_on_device(cache_seqlens, num_heads_q=num_heads_q, num_heads_k=num_heads_k, s_q=s_q,
                              kv_format=kv_format, page_block_size=page_block_size, topk=topk,
                              extra_topk=extra_topk)
    profile = _plan_profile(device, cache_seqlens)
    plan = plan_mla_decode(cache_seqlens, num_heads_q=num_heads_q, num_heads_k=num_heads_k, s_q=s_q,
                           kv_format=kv_format, topk=topk, extra_topk=extra_topk,
                           page_block_size=page_block_size,
                           device=profile)
    packed = plan.pack()
    object.__setattr__(plan, "_dualops_packed", packed)
    _ops.plan_memo(packed, plan)
    return plan


def _plan_profile(device, cache_seqlens):
    """get_mla_metadata's device=: None (cache_seqlens' device), a DeviceProfile, a profile name
    ("h100", "ascend910b2", ...), a torch.device or a device string ("cuda:0", "cpu", "npu")."""
    from . import devices

    if device is None:
        return devices.detect(cache_seqlens.device)
    if isinstance(device, devices.DeviceProfile):
        return device
    allowed = (f"None (cache_seqlens' device), a dualops.devices.DeviceProfile, a profile name "
               f"({', '.join(devices.PROFILES)}), a torch.device or a device string such as 'cuda:0', "
               f"'cpu', 'npu', 'ascend_sim'")
    if isinstance(device, str):
        try:
            return devices.profile(device)
        except ValueError:
            pass
        if device.strip().lower().split(":")[0] in ("ascend_sim", "sim", "npu"):
            return devices.detect(device.split(":")[0])
        try:
            device = torch.device(device)
        except RuntimeError:
            raise ValueError(f"get_mla_metadata: device must be {allowed}; got {device!r}") from None
    if isinstance(device, torch.device):
        return devices.detect(device)
    raise TypeError(f"get_mla_metadata: device must be {allowed}; got {type(device).__name__}")


def _is_mla_plan(plan) -> bool:
    """A host MLA plan or one made on the GPU (not, say, another op's plan)."""
    from .tiling.mla_decode import MlaPlan

    if isinstance(plan, MlaPlan):
        return True
    from .backends.cuda.mla_decode import MlaDevicePlan

    return isinstance(plan, MlaDevicePlan)


def mla_decode(q, kv_cache, block_table, cache_seqlens, *, head_dim_v=512, plan=None,
               softmax_scale=None, causal=False, kv_format="bf16", indices=None, topk_length=None,
               attn_sink=None, extra_kv_cache=None, extra_indices=None, extra_topk_length=None,
               backend=None, validate=True):
    """MLA decode with FlashMLA semantics. Returns (out [B, S_q, H_q, 512], lse [B, H_q, S_q] fp32).
    See ``ops/mla_decode.yaml``."""
    if plan is not None and not isinstance(plan, torch.Tensor):
        packed = getattr(plan, "_dualops_packed", None)   # get_mla_metadata's plans carry it
        if packed is None:
            if not _is_mla_plan(plan):
                raise TypeError(f"mla_decode: plan must come from dualops.get_mla_metadata, got {type(plan).__name__}")
            packed = _packed_plan(plan)
        plan = packed
    return _call("mla_decode", (
        q, kv_cache, block_table, cache_seqlens, head_dim_v, plan, softmax_scale, causal, kv_format, indices,
        topk_length, attn_sink, extra_kv_cache, extra_indices, extra_topk_length), backend, validate)


def grouped_gemm(x, w, *, group_offsets=None, masked_m=None, scale_mode="none", x_scale=None,
                 w_scale=None, out_dtype=torch.bfloat16, backend=None, validate=True):
    """Grouped GEMM, NT layout: y[rows of group g] = x[rows of group g] @ w[g].T.
    Contiguous layout (x [M, K] + group_offsets [G+1]) or masked (x [G, M_max, K] + masked_m [G]).
    See ``ops/grouped_gemm.yaml``."""
    return _call("grouped_gemm", (x, w, group_offsets, masked_m, scale_mode, x_scale, w_scale, out_dtype),
                 backend, validate)


def supports(op: str, backend: str, **variant) -> bool:
    """Whether ``backend`` implements ``op`` for the variant features (see the ``features`` of
    ``ops/<op>.yaml``), e.g. ``supports("incre_flash_attention", "cuda", kv_dtype="int8", head_dim=128)``.
    Says nothing of whether the backend is available on this machine (see ``dualops.backends()``)."""
    if backend not in _backends.NAMES:
        raise ValueError(f"supports: backend must be one of {_backends.NAMES}, got {backend!r}")
    return schema.supports(op, backend, **variant)

"""CUDA incremental flash attention: the glue of the split-KV kernels in ``dualops._C``."""
from __future__ import annotations

import functools

import torch

from ... import native, schema
from ...devices import detect
from ...tiling.incre_flash_attention import IfaPlan, check_plan_for_tensors, plan_for_tensors
from . import status  # noqa: F401  (the backend's status, for callers holding this module)
from ._common import current_stream as _current_stream
from ._common import f32 as _f32
from ._common import MergeCounters, fields_template, params_struct, ptr_head, ptr_run
from ._common import ptr as _ptr
from ._common import strides4 as _strides4

_OP = "incre_flash_attention"
_QUANT = (torch.int8, torch.float8_e4m3fn)

# ----------------------------------------------------------------------------- packing


def pack_ifa_params(**values) -> bytes:
    """Fast equivalent of ``schema.pack_params("incre_flash_attention", "cuda", **values)``."""
    return params_struct(_OP)[0].pack(*fields_template(_OP, **values))


# In-kernel merge counters (a capture on a stream without them runs the combine kernel).
_MERGE_COUNTERS = MergeCounters(in_capture=False)


@functools.lru_cache(maxsize=1024)
def _plan_bytes(plan: IfaPlan) -> bytes:
    """The plan as the CUDA launcher reads it: IncreFlashAttentionCudaTiling (the shared header,
    then the CUDA launch fields)."""
    return plan.pack("cuda").numpy().tobytes()


def make_ifa_plan(q, k_cache, block_table):
    """The plan for these shapes on q's device (cached by the planner)."""
    return plan_for_tensors(q, k_cache, block_table, detect(q.device))


# ----------------------------------------------------------------------------- the op

class IfaLaunch:
    """What a CUDA IFA call's shapes, dtypes, strides and flags fix: the plan and its bytes, the
    constant fields of the params struct, the output and workspace sizes. ``ops.py`` keeps one per
    call signature, so a decode loop's repeated calls only gather pointers, allocate the outputs
    and launch (BENCHMARKS.md, "Host overhead of an eager call")."""

    __slots__ = ("C", "plan", "plan_bytes", "mid", "rest", "out_shape", "lse_shape", "n_o", "n_ws",
                 "convert_kv_lens", "convert_block_table", "float_pse", "quant", "splits")

    def __init__(self, q, k_cache, v_cache, *, kv_lens, block_table, softmax_scale, causal,
                 atten_mask, pse_shift, k_scale, v_scale, k_offset, v_offset, plan):
        if plan is None:
            plan = make_ifa_plan(q, k_cache, block_table)
        else:   # a plan handed to the backend directly (the API has no IFA plan argument)
            check_plan_for_tensors(plan, q, k_cache, block_table)
        B, S_q, H_q, D = q.shape
        self.plan, self.plan_bytes = plan, _plan_bytes(plan)
        self.out_shape, self.lse_shape = (B, S_q, H_q, D), (B, H_q, S_q)  # out: q's dtype
        n_o, n_l = plan.workspace_floats()
        self.n_o, self.n_ws, self.splits = n_o, n_o + n_l, plan.num_splits > 1
        dev = q.device
        self.convert_kv_lens = not (kv_lens.device == dev and kv_lens.dtype == torch.int32 and kv_lens.is_contiguous())
        self.convert_block_table = block_table is not None and (
            block_table.stride(-1) != 1 or block_table.dtype != torch.int32)
        self.float_pse = pse_shift is not None and pse_shift.dtype != torch.float32
        self.quant = k_cache.dtype in _QUANT
        # Every field but the pointers (filled per call by __call__): same strides as these
        # tensors, which the signature guarantees for every later call through this object.
        bt_stride = 0 if block_table is None else (block_table.stride(0) if not self.convert_block_table
                                                   else int(block_table.shape[1]))
        ms, ps = _strides4(atten_mask), _strides4(pse_shift)
        out_strides = (S_q * H_q * D, H_q * D, D)  # torch.empty(B, S_q, H_q, D)
        self.C = native.require()
        # Every field but the pointers, packed once (the shared pointers lead the struct:
        # _ptr_head; the merge counters follow the shared fields: _call_ptrs).
        full = params_struct(_OP)[0].pack(*fields_template(_OP,
            q_stride_b=q.stride(0), q_stride_s=q.stride(1), q_stride_h=q.stride(2),
            k_stride_0=k_cache.stride(0), k_stride_1=k_cache.stride(1), k_stride_2=k_cache.stride(2),
            v_stride_0=v_cache.stride(0), v_stride_1=v_cache.stride(1), v_stride_2=v_cache.stride(2),
            out_stride_b=out_strides[0], out_stride_s=out_strides[1], out_stride_h=out_strides[2],
            block_table_stride=bt_stride,
            mask_stride_b=ms[0], mask_stride_h=ms[1], mask_stride_q=ms[2], mask_stride_k=ms[3],
            pse_stride_b=ps[0], pse_stride_h=ps[1], pse_stride_q=ps[2], pse_stride_k=ps[3],
            num_blocks=int(k_cache.shape[0]) if block_table is not None else 0,
            softmax_scale=float(softmax_scale), causal=int(bool(causal)),
            q_dtype=schema.dtype_code(q.dtype), kv_dtype=schema.dtype_code(k_cache.dtype)))
        call_ptrs, off = _call_ptrs()
        self.mid, self.rest = full[_ptr_head().size:off], full[off + call_ptrs.size:]

    def __call__(self, q, k_cache, v_cache, *, kv_lens, block_table, atten_mask, pse_shift,
                 k_scale, v_scale, k_offset, v_offset, **_fixed):
        """Launch on the current stream. The tensors must have the shapes, dtypes and strides of
        the ones this object was made from (``_fixed``: the scalars it already holds). The
        caches' alignment and strides are checked by the host entry (incre_flash_attention_check)."""
        C = self.C
        dev = q.device
        if self.convert_kv_lens:
            kv_lens = kv_lens.to(device=dev, dtype=torch.int32).contiguous()
        if self.convert_block_table:
            block_table = block_table.to(torch.int32).contiguous()
        if self.float_pse:
            pse_shift = pse_shift.float()
        out = q.new_empty(self.out_shape)
        lse = q.new_empty(self.lse_shape, dtype=torch.float32)
        # split-KV partials: o_accum then lse_accum in one buffer, alive until the launch is queued
        work = q.new_empty(self.n_ws, dtype=torch.float32) if self.n_ws else None
        ws = _ptr(work)
        dev_index = q.get_device()
        stream = _current_stream(dev_index)
        if self.quant:
            k_scale, v_scale, k_offset, v_offset = (_f32(t, dev) for t in (k_scale, v_scale, k_offset, v_offset))
        else:
            k_scale = v_scale = k_offset = v_offset = None
        params = _ptr_head().pack(
            q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), lse.data_ptr(),
            kv_lens.data_ptr(), _ptr(block_table), _ptr(atten_mask), _ptr(pse_shift), _ptr(k_scale),
            _ptr(v_scale), _ptr(k_offset), _ptr(v_offset), ws, ws + 4 * self.n_o if ws else 0) + self.mid \
            + _call_ptrs()[0].pack(_MERGE_COUNTERS.get(dev, stream, C.cuda_ifa_merge_groups) if self.splits else 0) \
            + self.rest
        C.cuda_incre_flash_attention(params, self.plan_bytes, stream)
        return out, lse


# The params fields holding device addresses, in the order IfaLaunch.__call__ packs them: the
# shared struct's leading pointers, then IncreFlashAttentionCudaParams' own.
_PTR_FIELDS = ("q", "k", "v", "out", "lse", "kv_lens", "block_table", "atten_mask", "pse_shift",
               "k_scale", "v_scale", "k_offset", "v_offset", "o_accum", "lse_accum")
_CALL_PTR_FIELDS = ("merge_counters",)


def _ptr_head():
    """The struct's leading pointer fields (IfaLaunch packs them per call, and the rest once)."""
    return ptr_head(_OP, _PTR_FIELDS)


def _call_ptrs():
    """(packer, byte offset) of the CUDA-only pointer fields, packed per call."""
    return ptr_run(_OP, _CALL_PTR_FIELDS)


def prepare_incre_flash_attention(q, k_cache, v_cache, **kw) -> IfaLaunch:
    """The reusable part of ``incre_flash_attention`` for these tensors' signature (ops.py caches
    it per signature); call the result with the tensors to launch."""
    return IfaLaunch(q, k_cache, v_cache, **kw)


def incre_flash_attention(q, k_cache, v_cache, *, kv_lens, block_table, softmax_scale, causal,
                          atten_mask, pse_shift, k_scale, v_scale, k_offset, v_offset, plan=None):
    """docs/internals.md "Backend module interface". Returns (out, lse)."""
    kw = dict(kv_lens=kv_lens, block_table=block_table, atten_mask=atten_mask, pse_shift=pse_shift,
              k_scale=k_scale, v_scale=v_scale, k_offset=k_offset, v_offset=v_offset)
    launch = IfaLaunch(q, k_cache, v_cache, softmax_scale=softmax_scale, causal=causal, plan=plan, **kw)
    return launch(q, k_cache, v_cache, **kw)

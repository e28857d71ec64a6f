"""CUDA MLA decode: the glue of the sm_90a kernels in ``dualops._C`` (docs/mla_decode_cuda.md).

The kernels read the packed MLA plan (header, parts, num_splits) from device memory. A plan can be
* an ``MlaPlan`` made on the host by ``dualops.get_mla_metadata`` (its device copy is made once,
  asynchronously from pinned memory, and reused by every layer of the step);
* a plan made on the device by :func:`plan_on_device` (``dualops.get_mla_metadata(...,
  on_device=True)``): no host sync, so a whole decode step can be captured in a CUDA graph and
  replayed with new lengths;
* ``None``: the call makes a device plan itself (same schedule as the host planner).
Nothing on the launch path reads device values. Sparse decode (``indices``) runs a small kernel
first that compacts each query token's valid indices into the key list the split kernel reads
(docs/mla_decode_cuda.md "Sparse decode").
"""
from __future__ import annotations

import functools
import struct

import torch

from ... import native, ops, schema
from ...devices import detect
from ...heuristics.cuda import MLA_CUDA_KERNELS, cuda_mla_kernel, cuda_mla_sort_keys
from ...tiling.mla_decode import (KV_FORMATS, MLA_BLOCK_TOKENS, MLA_Q_BLOCK_ROWS, MLA_VERSION, PART_STRIDE, MlaPlan,
                                  mla_fixed_overhead, num_sm_parts_for, request_lengths)
from . import status  # noqa: F401  (the backend's status, for callers holding this module)
from ._common import MergeCounters, current_stream, f32, fields_template, params_struct, ptr, ptr_head, ptr_run

_OP = "mla_decode"
HEADER_INTS = len(MlaPlan.FIELDS)
_HEADER = struct.Struct("<" + "i" * HEADER_INTS)
D_V = 512


@functools.lru_cache(maxsize=16)
def _profile(dev_index: int):
    return detect(torch.device("cuda", dev_index))


class MlaDevicePlan:
    """An MLA plan whose packed form lives on the GPU (made there by the device planner, or a host
    plan's packed tensor moved there). The host knows its shape fields only: the split count is
    bounded by batch + num_sm_parts - 1 and every split request is merged (in the
    `wgmma_t` kernel, or by the combine kernel, which then always runs)."""

    __slots__ = ("packed", "_dualops_packed", "batch", "s_q", "h_q", "h_kv", "num_sm_parts",
                 "kv_format", "page_block_size", "sparse", "topk", "extra_topk", "header_bytes")

    def __init__(self, packed, *, batch, s_q, h_q, h_kv, num_sm_parts, kv_format, page_block_size, fixed_overhead,
                 topk=None, extra_topk=None):
        self.packed = self._dualops_packed = packed
        ops.plan_memo(packed, self)    # a call handed the packed tensor gets this object back
        self.batch, self.s_q, self.h_q, self.h_kv = batch, s_q, h_q, h_kv
        self.num_sm_parts, self.kv_format, self.page_block_size = num_sm_parts, kv_format, page_block_size
        self.sparse, self.topk, self.extra_topk = int(topk is not None), topk or 0, extra_topk or 0
        q_rows = s_q * h_q // h_kv
        header = dict(version=MLA_VERSION, batch=batch, s_q=s_q, h_q=h_q, h_kv=h_kv, q_rows=q_rows,
                      num_m_blocks=-(-q_rows // MLA_Q_BLOCK_ROWS), num_sm_parts=num_sm_parts,
                      block_tokens=MLA_BLOCK_TOKENS, fixed_overhead=fixed_overhead, payload=0, total_splits=-1,
                      part_stride=PART_STRIDE, kv_format=kv_format, sparse=self.sparse, topk=self.topk,
                      extra_topk=self.extra_topk, page_block_size=page_block_size)
        self.header_bytes = _HEADER.pack(*(header[f] for f in MlaPlan.FIELDS))

    def pack(self) -> torch.Tensor:
        """The packed plan (int32, on the GPU)."""
        return self.packed

    def __repr__(self):
        return (f"MlaDevicePlan(batch={self.batch}, s_q={self.s_q}, h_q={self.h_q}, "
                f"num_sm_parts={self.num_sm_parts}, device={self.packed.device})")


def packed_numel(batch: int, num_sm_parts: int) -> int:
    return HEADER_INTS + num_sm_parts * PART_STRIDE + batch + 1


def plan_on_device(cache_seqlens, *, num_heads_q: int, num_heads_k: int = 1, s_q: int = 1,
                   kv_format: str = "bf16", page_block_size: int = 64, topk: int | None = None,
                   extra_topk: int | None = None) -> MlaDevicePlan:
    """The MLA schedule of ``plan_mla_decode`` computed on the GPU from a device int32
    ``cache_seqlens`` (no host sync; CUDA-graph capturable). Negative lengths count as 0.
    Sparse decode (``topk``, ``extra_topk``): every request has the index lists' length
    (``request_lengths``); cache_seqlens gives the batch size only."""
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.device.type != "cuda" \
            or cache_seqlens.dtype != torch.int32 or cache_seqlens.dim() != 1:
        raise TypeError("plan_on_device: cache_seqlens must be an int32 CUDA tensor [B]")
    if num_heads_k != 1:
        raise ValueError(f"plan_on_device: MLA decode has one latent KV head, got num_heads_k={num_heads_k}")
    if kv_format not in KV_FORMATS:
        raise ValueError(f"plan_on_device: kv_format must be one of {sorted(KV_FORMATS)}, got {kv_format!r}")
    optional = (("topk", topk, 1), ("extra_topk", extra_topk, 0))
    for name, v, low in (("num_heads_q", num_heads_q, 1), ("s_q", s_q, 1), ("page_block_size", page_block_size, 1),
                         *((n, v, lo) for n, v, lo in optional if v is not None)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ValueError(f"plan_on_device: {name} must be an int >= {low}, got {v!r}")
    if extra_topk is not None and topk is None:
        raise ValueError("plan_on_device: extra_topk needs topk (an extra pool is a sparse-decode feature)")
    batch = cache_seqlens.shape[0]
    if batch < 1:
        raise ValueError("plan_on_device: cache_seqlens must hold at least one request")
    dev = cache_seqlens.device
    profile = _profile(dev.index if dev.index is not None else torch.cuda.current_device())
    parts = num_sm_parts_for(profile, s_q=s_q, h_q=num_heads_q, h_kv=1)
    if topk is None:
        seq = cache_seqlens.contiguous()
    else:
        span = request_lengths([0], topk=topk, extra_topk=extra_topk)[0]
        seq = torch.full((batch,), span, dtype=torch.int32, device=dev)
    buf = torch.empty(packed_numel(batch, parts), dtype=torch.int32, device=dev)
    plan = MlaDevicePlan(buf, batch=batch, s_q=s_q, h_q=num_heads_q, h_kv=1, num_sm_parts=parts,
                         kv_format=KV_FORMATS[kv_format], page_block_size=page_block_size,
                         fixed_overhead=mla_fixed_overhead(profile, q_rows=s_q * num_heads_q),
                         topk=topk, extra_topk=extra_topk)
    native.require().cuda_mla_plan(seq.data_ptr(), buf.data_ptr(), plan.header_bytes,
                                   current_stream(buf.get_device()))
    return plan


# Device copies of host plans (a step's plan is reused by every layer): kept on the plan object
# (one attribute look-up per call) and, by value, here: a CUDA graph captured with a host plan
# reads its copy at every replay, so many are kept alive, whatever becomes of the plan object.
_DEVICE_COPIES: dict = {}
_DEVICE_COPIES_MAX = 256


def _device_copy(plan: MlaPlan, dev) -> tuple[torch.Tensor, bytes]:
    """(the packed plan on `dev`, its header bytes), made once per plan."""
    mine = plan.__dict__.get("_dualops_device_copy")
    if mine is not None and mine[0] == dev:
        return mine[1]
    key = (plan, dev)
    t = _DEVICE_COPIES.get(key)
    if t is None:
        if torch.cuda.is_current_stream_capturing():
            raise ValueError("mla_decode: plan: a host plan's device copy cannot be made inside a CUDA-graph "
                             "capture; call once with this plan before capturing, or capture "
                             "dualops.get_mla_metadata(..., on_device=True)")
        t = (plan.pack().pin_memory().to(dev, non_blocking=True), _HEADER.pack(*plan.header()))
        if len(_DEVICE_COPIES) >= _DEVICE_COPIES_MAX:
            _DEVICE_COPIES.pop(next(iter(_DEVICE_COPIES)))
        _DEVICE_COPIES[key] = t
    object.__setattr__(plan, "_dualops_device_copy", (dev, t))
    return t


# Arrival counters of the in-kernel split merge (`wgmma_t`): at least batch * num_m_blocks per
# call; made inside a capture too, so captured calls merge in the kernel as well.
_MERGE_COUNTERS = MergeCounters(in_capture=True)


def _resolve_plan(plan, q, cache_seqlens, kv_format, pbs, topk=None, extra_topk=None):
    """(plan header bytes, device plan tensor, partial-buffer rows or 0). topk / extra_topk:
    sparse decode's index widths (None: dense; extra_topk None: no extra pool). A given plan was
    checked against the call by the API (tiling.mla_decode.check_plan_for_call); a bare packed
    device plan takes the call's shapes, and only its size is checked here (the kernel reads
    that many ints)."""
    B, S_q, H_q, _ = q.shape
    dev = q.device
    if plan is None:
        plan = plan_on_device(cache_seqlens, num_heads_q=H_q, s_q=S_q, kv_format=kv_format,
                              page_block_size=pbs, topk=topk, extra_topk=extra_topk)
    elif isinstance(plan, torch.Tensor):  # a packed plan already on the GPU
        if plan.device != dev or plan.dtype != torch.int32 or plan.dim() != 1:
            raise ValueError(f"mla_decode: plan: a packed device plan must be a 1-D int32 tensor on {dev}, "
                             f"got {plan.dtype} {tuple(plan.shape)} on {plan.device}")
        profile = _profile(dev.index)
        parts = num_sm_parts_for(profile, s_q=S_q, h_q=H_q, h_kv=1)
        if plan.numel() != packed_numel(B, parts):
            raise ValueError(f"mla_decode: plan: packed device plan holds {plan.numel()} ints, a plan for "
                             f"batch {B}, s_q {S_q}, h_q {H_q} on this GPU holds {packed_numel(B, parts)}")
        plan = MlaDevicePlan(plan.contiguous(), batch=B, s_q=S_q, h_q=H_q, h_kv=1, num_sm_parts=parts,
                             kv_format=KV_FORMATS[kv_format], page_block_size=pbs,
                             fixed_overhead=mla_fixed_overhead(profile, q_rows=S_q * H_q), topk=topk,
                             extra_topk=extra_topk)
    if isinstance(plan, MlaDevicePlan):
        return plan.header_bytes, plan.packed, B + plan.num_sm_parts
    rows = plan.total_splits if plan.total_splits > plan.batch else 0
    packed, header = _device_copy(plan, dev)
    return header, packed, rows


# The params fields holding device addresses, in the order MlaLaunch.__call__ packs them: the
# shared struct's leading pointers, then MlaDecodeCudaParams' own (merge counters, key lists, plan).
_PTR_FIELDS = ("q", "kv_cache", "block_table", "cache_seqlens", "indices", "topk_length", "attn_sink",
               "extra_kv_cache", "extra_indices", "extra_topk_length", "out", "lse", "o_accum", "lse_accum")
_CALL_PTR_FIELDS = ("merge_counters", "key_rows", "plan")


class MlaLaunch:
    """What a CUDA MLA decode call's shapes, dtypes, strides and flags fix: the split kernel, the conversions its tensors need and the constant fields of the params struct.
    ``ops.py`` keeps one per call signature, so the layers of a decode step only resolve their
    plan, gather pointers, allocate the outputs and launch."""

    __slots__ = ("C", "dev", "dev_index", "shape", "kv_format", "pbs", "q_rows", "m_blocks", "kernel",
                 "copy_q", "convert_table", "convert_lens", "mid", "mid_copied", "rest", "topk", "extra_topk")

    def __init__(self, q, kv_cache, block_table, cache_seqlens, *, head_dim_v=512, softmax_scale=None,
                 causal=False, kv_format="bf16", indices=None, extra_kv_cache=None, extra_indices=None, **_unused):
        sparse = indices is not None
        extra = sparse and extra_kv_cache is not None and extra_indices is not None and extra_indices.shape[-1] > 0
        # sparse decode: the index widths (the plan's topk / extra_topk); None: dense, no extra pool
        self.topk = int(indices.shape[-1]) if sparse else None
        self.extra_topk = int(extra_indices.shape[-1]) if extra else None
        if kv_format == "bf16" and kv_cache.dtype != q.dtype:   # a variant the kernels do not have
            raise NotImplementedError(f"mla_decode on backend 'cuda' needs a kv_cache of q's dtype for kv_format "
                                      f"'bf16' (q {q.dtype}, kv_cache {kv_cache.dtype})")
        B, S_q, H_q, D = q.shape
        self.dev, self.dev_index, self.shape = q.device, q.get_device(), (B, S_q, H_q)
        self.kv_format, self.pbs = kv_format, int(kv_cache.shape[1])
        self.q_rows = S_q * H_q
        # the split kernel's row blocks (sparse: one query token's heads each)
        self.m_blocks = S_q * -(-H_q // 64) if sparse else -(-self.q_rows // 64)
        kernel = cuda_mla_kernel(_profile(self.dev_index), kv_format=kv_format,
                                 q_rows=H_q if sparse else self.q_rows, page_block_size=self.pbs, sparse=sparse)
        self.kernel = kernel
        self.copy_q = any(st % 8 for st in q.stride()[:3]) or q.stride(3) != 1
        self.convert_table = block_table.dtype != torch.int32 or block_table.stride(-1) != 1 \
            or block_table.device != self.dev
        self.convert_lens = cache_seqlens.dtype != torch.int32 or not cache_seqlens.is_contiguous() \
            or cache_seqlens.device != self.dev
        self.C = native.require()
        table_stride = int(block_table.shape[1]) if self.convert_table else block_table.stride(0)
        contiguous = (S_q * H_q * D, H_q * D, D)
        # Every field but the pointers, packed once (for q as it comes and for a contiguous copy
        # of it); the pointers are packed per call.
        head = ptr_head(_OP, _PTR_FIELDS).size
        call_ptrs, off = ptr_run(_OP, _CALL_PTR_FIELDS)

        def consts(strides):
            full = params_struct(_OP)[0].pack(*fields_template(
                _OP, q_stride_b=strides[0], q_stride_s=strides[1], q_stride_h=strides[2],
                block_table_stride=table_stride, num_blocks=int(kv_cache.shape[0]),
                softmax_scale=float(D ** -0.5 if softmax_scale is None else softmax_scale),
                causal=int(bool(causal)), kv_format=KV_FORMATS[kv_format], q_dtype=schema.dtype_code(q.dtype),
                head_dim=D, page_block_size=self.pbs, max_blocks=int(block_table.shape[1]),
                kernel=MLA_CUDA_KERNELS[kernel], topk=self.topk or 0, extra_topk=self.extra_topk or 0,
                extra_num_blocks=int(extra_kv_cache.shape[0]) if extra else 0,
                extra_page_block_size=int(extra_kv_cache.shape[1]) if extra else 0,
                sort_keys=int(sparse and cuda_mla_sort_keys(kv_format=kv_format, h_q=H_q, topk=self.topk))))
            return full[head:off], full[off + call_ptrs.size:]

        self.mid, self.rest = consts(contiguous if self.copy_q else q.stride()[:3])
        self.mid_copied = consts(contiguous)[0]

    def __call__(self, q, kv_cache, block_table, cache_seqlens, *, plan=None, attn_sink=None, indices=None,
                 topk_length=None, extra_kv_cache=None, extra_indices=None, extra_topk_length=None, **_fixed):
        """Launch on the current stream. The tensors must have the shapes, dtypes and strides of
        the ones this object was made from (``_fixed``: the scalars it already holds). The cache
        addresses' alignment is checked by the host entry (mla_decode_check)."""
        sparse = self.topk is not None
        if sparse:
            if self.extra_topk is None:
                extra_kv_cache = extra_indices = extra_topk_length = None
            indices, topk_length, extra_indices, extra_topk_length = (
                None if t is None else _int32_on(t, self.dev)
                for t in (indices, topk_length, extra_indices, extra_topk_length))
        dev = self.dev
        mid = self.mid
        if self.copy_q:
            q = q.clone(memory_format=torch.contiguous_format)
        elif q.data_ptr() % 16:
            q, mid = q.clone(memory_format=torch.contiguous_format), self.mid_copied
        if self.convert_table:
            block_table = block_table.to(device=dev, dtype=torch.int32).contiguous()
        if self.convert_lens:
            cache_seqlens = cache_seqlens.to(device=dev, dtype=torch.int32).contiguous()
        if attn_sink is not None:
            attn_sink = f32(attn_sink, dev)
        header, plan_dev, rows = _resolve_plan(plan, q, cache_seqlens, self.kv_format, self.pbs, self.topk,
                                               self.extra_topk)
        B, S_q, H_q = self.shape
        # sparse: the compacted key lists [B * S_q, topk + extra_topk], then their lengths [B * S_q]
        key_rows = q.new_empty(B * S_q * (self.topk + (self.extra_topk or 0) + 1), dtype=torch.int32) \
            if sparse else None
        out = q.new_empty((B, S_q, H_q, D_V))
        lse = q.new_empty((B, H_q, S_q), dtype=torch.float32)
        q_rows = self.q_rows
        work = q.new_empty(rows * q_rows * (D_V + 1), dtype=torch.float32) if rows else None
        o_acc = work.data_ptr() if work is not None else 0
        l_acc = o_acc + 4 * rows * q_rows * D_V if work is not None else 0
        stream = current_stream(self.dev_index)
        counters = _MERGE_COUNTERS.get(dev, stream, B * self.m_blocks) if rows and self.kernel == "wgmma_t" else 0
        params = ptr_head(_OP, _PTR_FIELDS).pack(
            q.data_ptr(), kv_cache.data_ptr(), block_table.data_ptr(), cache_seqlens.data_ptr(), ptr(indices),
            ptr(topk_length), ptr(attn_sink), ptr(extra_kv_cache), ptr(extra_indices), ptr(extra_topk_length),
            out.data_ptr(), lse.data_ptr(), o_acc, l_acc) \
            + mid + ptr_run(_OP, _CALL_PTR_FIELDS)[0].pack(counters, ptr(key_rows), plan_dev.data_ptr()) + self.rest
        self.C.cuda_mla_decode(params, header, stream)
        return out, lse


def _int32_on(t, dev):
    """An index tensor as the kernels read it: int32, contiguous, on the call's GPU."""
    if t.dtype == torch.int32 and t.device == dev and t.is_contiguous():
        return t
    return t.to(device=dev, dtype=torch.int32).contiguous()


def prepare_mla_decode(q, kv_cache, block_table, cache_seqlens, **kw) -> MlaLaunch:
    """The reusable part of ``mla_decode`` for these tensors' signature (ops.py keeps it per
    signature, with or without a plan); call the result with the tensors (and the call's plan) to
    launch."""
    kw.pop("plan", None)
    return MlaLaunch(q, kv_cache, block_table, cache_seqlens, **kw)


def mla_decode(q, kv_cache, block_table, cache_seqlens, *, head_dim_v=512, plan=None, softmax_scale=None,
               causal=False, kv_format="bf16", indices=None, topk_length=None, attn_sink=None,
               extra_kv_cache=None, extra_indices=None, extra_topk_length=None):
    """docs/internals.md "Backend module interface". Returns (out, lse)."""
    launch = MlaLaunch(q, kv_cache, block_table, cache_seqlens, head_dim_v=head_dim_v, softmax_scale=softmax_scale,
                       causal=causal, kv_format=kv_format, indices=indices, extra_kv_cache=extra_kv_cache,
                       extra_indices=extra_indices)
    return launch(q, kv_cache, block_table, cache_seqlens, plan=plan, attn_sink=attn_sink, indices=indices,
                  topk_length=topk_length, extra_kv_cache=extra_kv_cache, extra_indices=extra_indices,
                  extra_topk_length=extra_topk_length)

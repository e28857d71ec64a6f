"""FlashMLA's Python interface (``flash_mla`` at commit 9241ae3) on dualops, any backend.

``get_mla_metadata(*args, **kwargs)`` returns ``(FlashMLASchedMeta(), None)`` with or without
FlashMLA's old arguments; the schedule is made on the first ``flash_mla_with_kvcache`` call that
takes it, and the same object serves later calls while the shapes and the lengths stay the same.
``flash_mla_with_kvcache`` takes FlashMLA's arguments and caches as FlashMLA does:

* FP8 caches as ``float8_e4m3fn``, ``uint8`` or ``int8`` views (656 bytes per token: the V3.2
  layout, 584: MODEL1), slices of padded buffers, any page size (see ``_mla_pools``);
* sparse calls with ``block_table=None, cache_seqlens=None``;
* dense caches with several KV heads: each KV head attended by its group of ``h_q / h_k``
  query heads, one dualops call per group (query heads split further where a backend takes
  fewer heads per call).

Extras over FlashMLA: ``backend=`` (keyword) picks the dualops backend; ``attn_sink`` also works
in dense decode; a sparse bf16 cache (``is_fp8_kvcache=False``) is accepted.
FlashMLA's prefill and training functions are not part of dualops: calling them raises
NotImplementedError naming the function.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from .. import api
from ..dispatch import _BY_DEVICE
from . import _mla_pools as pools


@dataclasses.dataclass
class FlashMLASchedMeta:
    """The schedule of one decode step: empty from ``get_mla_metadata``, filled by the first
    ``flash_mla_with_kvcache`` call, then checked against every later call."""

    @dataclasses.dataclass
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]
        extra_page_block_size: Optional[int]
        extra_topk: Optional[int]

    have_initialized: bool = False
    config: Optional[Config] = None
    tile_scheduler_metadata: Optional[torch.Tensor] = None  # the packed dualops plan (CUDA), else None
    num_splits: Optional[torch.Tensor] = None
    plans: dict = dataclasses.field(default_factory=dict, repr=False)  # dualops plans by query heads per call
    dummies: Optional[tuple] = dataclasses.field(default=None, repr=False)  # sparse: block_table, cache_seqlens


def get_mla_metadata(*args, **kwargs):
    """FlashMLA's current form: no arguments needed; the old ones (cache_seqlens,
    num_q_tokens_per_head_k, num_heads_k, ...) are accepted and not used. Returns
    ``(FlashMLASchedMeta(), None)``."""
    return FlashMLASchedMeta(), None


def _not_in_dualops(name: str, what: str):
    def f(*args, **kwargs):
        raise NotImplementedError(f"flash_mla.{name} ({what}) is not implemented by dualops.compat.flash_mla: "
                                  f"dualops covers decode (flash_mla_with_kvcache) only")
    f.__name__ = name
    f.__doc__ = f"FlashMLA's {name} ({what}): not in dualops; raises NotImplementedError."
    return f


flash_mla_sparse_fwd = _not_in_dualops("flash_mla_sparse_fwd", "sparse prefill")
flash_attn_varlen_func = _not_in_dualops("flash_attn_varlen_func", "varlen dense attention, SM100")
flash_attn_varlen_qkvpacked_func = _not_in_dualops("flash_attn_varlen_qkvpacked_func", "varlen dense attention, SM100")
flash_attn_varlen_kvpacked_func = _not_in_dualops("flash_attn_varlen_kvpacked_func", "varlen dense attention, SM100")


def _check_config(meta: FlashMLASchedMeta, cfg: "FlashMLASchedMeta.Config") -> None:
    if not meta.have_initialized:
        meta.have_initialized, meta.config = True, cfg
        return
    diffs = [f"{f.name}: the schedule has {getattr(meta.config, f.name)!r}, this call {getattr(cfg, f.name)!r}"
             for f in dataclasses.fields(cfg) if getattr(meta.config, f.name) != getattr(cfg, f.name)]
    if diffs:
        raise ValueError("flash_mla_with_kvcache: tile_scheduler_metadata was filled by a call with other "
                         "arguments (" + "; ".join(diffs) + "); use a new get_mla_metadata() for these")


def _heads_per_call(backend: str, group: int) -> int:
    """The most query heads per call (a divisor of the group) the backend takes."""
    for c in range(group, 0, -1):
        if group % c == 0 and api.supports("mla_decode", backend, h_q=c):
            return c
    raise NotImplementedError(f"flash_mla_with_kvcache: backend {backend!r} takes no head count dividing {group}")


def _plan(meta, backend, heads, seqlens, s_q, fmt, page, topk, extra_topk):
    """A CUDA device plan made once per schedule (the other backends plan inside the call)."""
    if meta is None or backend != "cuda":
        return None
    plan = meta.plans.get(heads)
    if plan is None:
        plan = api.get_mla_metadata(seqlens, num_heads_q=heads, num_heads_k=1, s_q=s_q, kv_format=fmt,
                                    topk=topk, extra_topk=extra_topk, page_block_size=page,
                                    on_device=True).packed
        meta.plans[heads] = plan
        if meta.tile_scheduler_metadata is None:
            meta.tile_scheduler_metadata = plan
    return plan


def _check_dense_args(block_table, cache_seqlens, named: dict) -> None:
    given = [n for n, v in named.items() if v is not None]
    if given:
        raise ValueError(f"flash_mla_with_kvcache: {', '.join(given)} need sparse decode (indices); "
                         f"got them with indices=None")
    if block_table is None or cache_seqlens is None:
        raise ValueError("flash_mla_with_kvcache: dense decode (indices=None) needs block_table and cache_seqlens")


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata=None,
                           num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=False,
                           indices=None, attn_sink=None, extra_k_cache=None, extra_indices_in_kvcache=None,
                           topk_length=None, extra_topk_length=None, *, backend=None):
    """FlashMLA's decode entry point: returns (out [b, s_q, h_q, head_dim_v], lse [b, h_q, s_q] fp32).
    ``tile_scheduler_metadata``: a ``FlashMLASchedMeta`` from ``get_mla_metadata`` (None: no reuse)."""
    meta = tile_scheduler_metadata
    if meta is not None and not isinstance(meta, FlashMLASchedMeta):
        raise TypeError(f"flash_mla_with_kvcache: tile_scheduler_metadata must be the FlashMLASchedMeta from "
                        f"get_mla_metadata(), got {type(meta).__name__}")
    if num_splits is not None:
        raise ValueError(f"flash_mla_with_kvcache: num_splits must be None (FlashMLA's current interface), "
                         f"got {type(num_splits).__name__}")
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError(f"flash_mla_with_kvcache: q must be [batch, s_q, h_q, head_dim], got "
                         f"{list(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__}")
    sparse = indices is not None
    fmt, cache = pools.cache_format(k_cache, is_fp8_kvcache)
    B, s_q, h_q, _ = q.shape
    h_k = int(k_cache.shape[2])
    if h_k < 1 or h_q % h_k:
        raise ValueError(f"flash_mla_with_kvcache: num_heads_q ({h_q}) must be a multiple of num_heads_k "
                         f"(k_cache.shape[2] = {h_k})")
    if sparse and causal:
        raise ValueError("flash_mla_with_kvcache: causal must be False when indices is given (sparse decode)")
    if sparse and h_k != 1:
        raise ValueError(f"flash_mla_with_kvcache: sparse decode has one KV head, got k_cache.shape[2] = {h_k}")
    if not sparse:
        _check_dense_args(block_table, cache_seqlens, {
            "extra_k_cache": extra_k_cache, "extra_indices_in_kvcache": extra_indices_in_kvcache,
            "topk_length": topk_length, "extra_topk_length": extra_topk_length})
    elif (extra_k_cache is None) != (extra_indices_in_kvcache is None):
        raise ValueError("flash_mla_with_kvcache: extra_k_cache and extra_indices_in_kvcache go together")
    topk = int(indices.shape[-1]) if sparse else None
    extra_topk = int(extra_indices_in_kvcache.shape[-1]) if extra_indices_in_kvcache is not None else None
    if meta is not None:
        _check_config(meta, FlashMLASchedMeta.Config(
            B, s_q, h_q, int(k_cache.shape[1]), h_k, bool(causal), bool(is_fp8_kvcache), topk,
            int(extra_k_cache.shape[1]) if extra_k_cache is not None else None, extra_topk))
    backend = backend or _BY_DEVICE.get(q.device.type, "reference")
    if q.stride(-1) != 1:
        q = q.contiguous()
    common = dict(head_dim_v=head_dim_v, softmax_scale=softmax_scale, kv_format=fmt, backend=backend)

    if sparse:
        cache, idx = pools.sparse_pool(cache, fmt, indices, backend)
        extra = extra_idx = None
        if extra_k_cache is not None:
            fmt2, extra = pools.cache_format(extra_k_cache, is_fp8_kvcache, "extra_k_cache")
            if fmt2 != fmt:
                raise ValueError(f"flash_mla_with_kvcache: extra_k_cache ({fmt2}) must have k_cache's format ({fmt})")
            extra, extra_idx = pools.sparse_pool(extra, fmt, extra_indices_in_kvcache, backend)
        if meta is not None and meta.dummies is not None:
            table, lens = meta.dummies
        else:
            table = torch.zeros(B, 1, dtype=torch.int32, device=q.device)
            lens = torch.zeros(B, dtype=torch.int32, device=q.device)
            if meta is not None:
                meta.dummies = (table, lens)
        common.update(indices=idx, topk_length=topk_length, extra_kv_cache=extra, extra_indices=extra_idx,
                      extra_topk_length=extra_topk_length)
        caches = [(cache, table)]
    else:
        lens = cache_seqlens
        caches = [pools.dense_pool(cache[:, :, j:j + 1] if h_k > 1 else cache, fmt, block_table, lens, backend)
                  for j in range(h_k)]
        common.update(causal=causal)
    group = h_q // h_k
    per_call = _heads_per_call(backend, group)
    outs, lses = [], []
    for j, (kv, table) in enumerate(caches):
        page = int(kv.shape[1])
        plan = _plan(meta, backend, per_call, lens, s_q, fmt, page, topk, extra_topk)
        for h0 in range(j * group, (j + 1) * group, per_call):
            sink = attn_sink[h0:h0 + per_call] if attn_sink is not None else None
            o, lse = api.mla_decode(q[:, :, h0:h0 + per_call], kv, table, lens, plan=plan, attn_sink=sink, **common)
            outs.append(o)
            lses.append(lse)
    if len(outs) == 1:
        return outs[0], lses[0]
    return torch.cat(outs, dim=2), torch.cat(lses, dim=1)


__all__ = ["FlashMLASchedMeta", "get_mla_metadata", "flash_mla_with_kvcache", "flash_mla_sparse_fwd",
           "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func"]

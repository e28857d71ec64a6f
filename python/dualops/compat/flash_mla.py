"""FlashMLA's Python interface on dualops: ``get_mla_metadata`` returns
(tile_scheduler_metadata, num_splits) tensors and ``flash_mla_with_kvcache`` takes them back.
The metadata tensor is dualops' packed MLA plan (it includes num_splits)."""
from __future__ import annotations

import torch

from .. import api


def get_mla_metadata(cache_seqlens: torch.Tensor, num_q_tokens_per_head_k: int, num_heads_k: int,
                     num_heads_q: int | None = None, is_fp8_kvcache: bool = False,
                     topk: int | None = None):
    """FlashMLA: ``num_q_tokens_per_head_k = s_q * h_q // h_k``. Without ``num_heads_q`` the
    query length is taken as 1 (h_q = num_q_tokens_per_head_k * h_k), as FlashMLA's scheduler
    only uses the product."""
    if num_heads_q is None:
        num_heads_q, s_q = num_q_tokens_per_head_k * num_heads_k, 1
    else:
        s_q = max(num_q_tokens_per_head_k * num_heads_k // num_heads_q, 1)
    if cache_seqlens.is_cuda and num_heads_k == 1:
        # On the GPU: planned there (no host sync, like FlashMLA's metadata kernel).
        plan = api.get_mla_metadata(cache_seqlens, num_heads_q=num_heads_q, num_heads_k=num_heads_k,
                                    s_q=s_q, kv_format="fp8_v32" if is_fp8_kvcache else "bf16", topk=topk,
                                    on_device=True)
        return plan.packed, plan.packed[-(cache_seqlens.shape[0] + 1):]
    plan = api.get_mla_metadata(cache_seqlens, num_heads_q=num_heads_q, num_heads_k=num_heads_k,
                                s_q=s_q, kv_format="fp8_v32" if is_fp8_kvcache else "bf16", topk=topk)
    num_splits = torch.tensor(plan.num_splits, dtype=torch.int32, device=cache_seqlens.device)
    return plan._dualops_packed.to(cache_seqlens.device), num_splits


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                           tile_scheduler_metadata=None, num_splits=None, softmax_scale=None,
                           causal=False, is_fp8_kvcache=False, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None):
    """FlashMLA's decode entry point: returns (out [b, s_q, h_q, dv], lse [b, h_q, s_q])."""
    if is_fp8_kvcache:
        kv_format = "fp8_v32" if k_cache.shape[-1] == 656 else "fp8_model1"
    else:
        kv_format = "bf16"
    plan = None
    if tile_scheduler_metadata is not None and tile_scheduler_metadata.is_cuda and q.is_cuda:
        plan = tile_scheduler_metadata  # a packed plan on the GPU: read by the CUDA kernels as it is
    elif tile_scheduler_metadata is not None:
        import dataclasses

        from ..tiling.mla_decode import KV_FORMATS, MlaPlan

        # FlashMLA's metadata is made without the cache's page size or exact format, which do not
        # change the schedule: take them from the call (mla_decode checks every other field).
        plan = dataclasses.replace(MlaPlan.from_packed(tile_scheduler_metadata.cpu()),
                                   page_block_size=int(k_cache.shape[1]), kv_format=KV_FORMATS[kv_format])
    return api.mla_decode(q, k_cache, block_table, cache_seqlens, head_dim_v=head_dim_v, plan=plan,
                          softmax_scale=softmax_scale, causal=causal, kv_format=kv_format,
                          indices=indices, topk_length=topk_length, attn_sink=attn_sink,
                          extra_kv_cache=extra_k_cache, extra_indices=extra_indices_in_kvcache,
                          extra_topk_length=extra_topk_length)

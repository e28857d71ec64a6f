"""Reference MLA decode (FlashMLA semantics), plain torch.

One latent KV head: K is the whole d_qk vector of a token, V its first head_dim_v dims.
Quantized caches (FP8, int8) are dequantized token by token with ``quant.gather_mla_kv``
(only the tokens attended are read), then attended exactly like a bf16 cache.

* Dense mode: request b attends tokens 0..cache_seqlens[b]-1 through block_table; with
  causal and S_q > 1, query i sees keys < cache_seqlens[b] - S_q + i + 1.
* Sparse mode (``indices`` given): query (b, i) attends the cache slots indices[b, i, :]
  (block_idx * page_block_size + offset); -1 and any entry outside the cache are ignored;
  topk_length[b] keeps the leftmost entries only.  An extra pool (extra_kv_cache,
  extra_indices, extra_topk_length; same format, its own page size) is attended in the
  same softmax.  block_table and cache_seqlens are not used.
* attn_sink [H_q]: out *= exp(lse) / (exp(lse) + exp(sink)); lse is unchanged.
* Nothing to attend: out 0, lse +inf.
"""

import math

import torch

from ..quant import gather_mla_kv, mla_cache_d_qk
from ._common import AttentionBudget, attention_budget, rounding_type, weighted_values


def _check_int(t, name, shape):
    if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype == torch.bool:
        raise TypeError(f"{name} must be an int32 tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    if t.dim() != len(shape) or any(s is not None and s != n for s, n in zip(shape, t.shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must be {want}, got {tuple(t.shape)}")


def _attend(q, keys, head_dim_v, scale, hidden=None, rounding=None):
    """q [S, H, d], keys [L, d], hidden bool [S, 1, L] or None -> (out [S, H, dv], lse [S, H],
    budget (out, lse) or None). With ``rounding`` (a 16-bit dtype), the rounding terms of
    ``attention_budget`` too.

    lse is -inf for rows that see nothing (their out is 0)."""
    s = torch.einsum("shd,ld->shl", q, keys) * scale
    if hidden is not None:
        s = s.masked_fill(hidden, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    seen = lse != -math.inf
    p = torch.exp(s - torch.where(seen, lse, torch.zeros_like(lse)).unsqueeze(-1))
    p = p.masked_fill(~seen.unsqueeze(-1), 0.0)
    o = weighted_values(p, keys[:, :head_dim_v], hidden)
    if rounding is None:
        return o, lse, None
    return o, lse, attention_budget(q, keys, keys[:, :head_dim_v], p, hidden, scale, o, rounding)


def _sparse_keys(cache, kv_format, idx, length, compute_dtype):
    """Dequantized keys of one query row's index list (invalid entries dropped)."""
    idx = idx[:length].to(torch.int64)
    capacity = cache.shape[0] * cache.shape[1]
    idx = idx[(idx >= 0) & (idx < capacity)]
    return gather_mla_kv(cache, kv_format, idx, compute_dtype)


def mla_decode(q, kv_cache, block_table, cache_seqlens, *, head_dim_v=512, softmax_scale=None,
               causal=False, kv_format="bf16", indices=None, topk_length=None, attn_sink=None,
               extra_kv_cache=None, extra_indices=None, extra_topk_length=None,
               compute_dtype=torch.float32, return_budget=False, rounding_dtype=None):
    """Ground-truth MLA decode.

    q [B, S_q, H_q, d_qk]; kv_cache bf16/fp16 [num_blocks, page_block_size, 1, d_qk] or uint8
    "fp8_v32" / "fp8_model1" / "int8_v32" (see dualops.quant).  Returns (out [B, S_q, H_q, head_dim_v],
    lse [B, H_q, S_q]) in ``compute_dtype`` (fp32 or fp64) on q's device.

    ``return_budget=True`` adds a third result, an ``AttentionBudget(out, lse)`` of the same
    shapes: the rounding terms of docs/parity.md for a kernel whose matrix-unit operands (P, and
    the dequantized cache) are rounded once to ``rounding_dtype`` (default: q's dtype).
    """
    if compute_dtype not in (torch.float32, torch.float64):
        raise ValueError(f"compute_dtype must be torch.float32 or torch.float64, got {compute_dtype}")
    if q.dim() != 4:
        raise ValueError(f"q must be [B, S_q, H_q, d_qk], got shape {tuple(q.shape)}")
    B, S_q, H_q, d_qk = q.shape
    cache_d = mla_cache_d_qk(kv_cache, kv_format)
    if cache_d != d_qk:
        raise ValueError(f"q head dim {d_qk} does not match kv_cache d_qk {cache_d} ({kv_format})")
    if not 0 < head_dim_v <= d_qk:
        raise ValueError(f"head_dim_v must be in (0, {d_qk}], got {head_dim_v}")
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(d_qk)
    sparse = indices is not None
    if attn_sink is not None:
        if not isinstance(attn_sink, torch.Tensor) or tuple(attn_sink.shape) != (H_q,):
            raise ValueError(f"attn_sink must be a float [H_q={H_q}] tensor, got "
                             f"{tuple(attn_sink.shape) if isinstance(attn_sink, torch.Tensor) else attn_sink!r}")

    out = torch.zeros(B, S_q, H_q, head_dim_v, dtype=compute_dtype, device=q.device)
    lse = torch.full((B, S_q, H_q), -math.inf, dtype=compute_dtype, device=q.device)
    qc = q.to(compute_dtype)
    rounding = rounding_type(rounding_dtype or q.dtype) if return_budget else None
    out_b, lse_b = torch.zeros_like(out), torch.zeros_like(lse)

    if sparse:
        if causal:
            raise ValueError("causal applies to dense decode only; in sparse mode indices decide what each query sees")
        _check_int(indices, "indices", (B, S_q, None))
        extra = extra_kv_cache is not None
        if extra:
            if mla_cache_d_qk(extra_kv_cache, kv_format) != d_qk:
                raise ValueError(f"extra_kv_cache d_qk must be {d_qk} like kv_cache")
            if extra_indices is None:
                raise ValueError("extra_indices is required with extra_kv_cache")
            _check_int(extra_indices, "extra_indices", (B, S_q, None))
        elif extra_indices is not None or extra_topk_length is not None:
            raise ValueError("extra_indices / extra_topk_length need extra_kv_cache")
        lens = _topk_lengths(topk_length, "topk_length", B, indices.shape[-1])
        extra_lens = _topk_lengths(extra_topk_length, "extra_topk_length", B,
                                   extra_indices.shape[-1] if extra else 0)
        for b in range(B):
            for i in range(S_q):
                keys = _sparse_keys(kv_cache, kv_format, indices[b, i], lens[b], compute_dtype)
                if extra:
                    more = _sparse_keys(extra_kv_cache, kv_format, extra_indices[b, i], extra_lens[b], compute_dtype)
                    keys = torch.cat([keys, more])
                o, l, bud = _attend(qc[b, i:i + 1], keys.to(q.device), head_dim_v, scale, rounding=rounding)
                out[b, i], lse[b, i] = o[0], l[0]
                if bud is not None:
                    out_b[b, i], lse_b[b, i] = bud[0][0], bud[1][0]
    else:
        sparse_only = {"topk_length": topk_length, "extra_kv_cache": extra_kv_cache,
                       "extra_indices": extra_indices, "extra_topk_length": extra_topk_length}
        for name, value in sparse_only.items():
            if value is not None:
                raise ValueError(f"{name} needs sparse mode (indices)")
        _check_int(block_table, "block_table", (B, None))
        _check_int(cache_seqlens, "cache_seqlens", (B,))
        nb, pbs = kv_cache.shape[0], kv_cache.shape[1]
        capacity = block_table.shape[1] * pbs
        bt = block_table.to(torch.int64)
        for b, L in enumerate(int(x) for x in cache_seqlens.tolist()):
            if not 0 <= L <= capacity:
                raise ValueError(f"cache_seqlens[{b}] = {L} outside [0, {capacity}] (block_table width x page size)")
            if L == 0:
                continue
            pos = torch.arange(L, device=bt.device)
            blocks = bt[b, pos // pbs]
            if int(blocks.min()) < 0 or int(blocks.max()) >= nb:
                raise ValueError(f"block_table[{b}] holds block ids outside [0, {nb}) within cache_seqlens[{b}] = {L}")
            keys = gather_mla_kv(kv_cache, kv_format, blocks * pbs + pos % pbs, compute_dtype).to(q.device)
            hidden = None
            if causal:
                limit = L - S_q + 1 + torch.arange(S_q, device=q.device)  # query i sees keys < limit[i]
                hidden = torch.arange(L, device=q.device).view(1, 1, L) >= limit.view(S_q, 1, 1)
            out[b], lse[b], bud = _attend(qc[b], keys, head_dim_v, scale, hidden, rounding)
            if bud is not None:
                out_b[b], lse_b[b] = bud

    seen = lse != -math.inf
    if attn_sink is not None:
        sink = attn_sink.to(device=q.device, dtype=compute_dtype).view(1, 1, H_q)
        factor = torch.sigmoid(lse - sink)  # = exp(lse) / (exp(lse) + exp(sink))
        factor = torch.where(seen, factor, torch.ones_like(factor)).unsqueeze(-1)
        out = out * factor
        # d(out * f(lse)) = f d(out) + out f (1 - f) d(lse)
        out_b = out_b * factor + out.abs() * (1 - factor) * lse_b.unsqueeze(-1)
    lse = torch.where(seen, lse, torch.full_like(lse, math.inf))
    if return_budget:
        return out, lse.transpose(1, 2).contiguous(), AttentionBudget(out_b, lse_b.transpose(1, 2).contiguous())
    return out, lse.transpose(1, 2).contiguous()


def _topk_lengths(t, name, B, topk):
    if t is None:
        return [topk] * B
    _check_int(t, name, (B,))
    return [max(0, min(int(x), topk)) for x in t.tolist()]

"""Reference incremental (decode) flash attention, plain torch.

Semantics (docs/internals.md): score = (q . k^T) * softmax_scale + pse_shift; a key is
masked out when atten_mask is True, when causal and key >= kv_len - S_q + i + 1 (query i),
or when key >= kv_len; softmax over the rest; out = p . v.  Query head h reads KV head
h // (H_q / H_kv).  A query row that sees no key gets out 0 and lse +inf.

Only the valid keys (positions < kv_len) are gathered, so whatever the unused cache slots
hold (NaN included) never reaches the arithmetic; masked keys' scores are replaced by -inf and
their values never enter p . v (docs/values.md: non-finite values).
"""

import math

import torch

from ..quant import dequantize_kv
from ._common import AttentionBudget, attention_budget, rounding_type, weighted_values

_QUANT_DTYPES = (torch.int8, torch.float8_e4m3fn)


def _check_compute_dtype(compute_dtype):
    if compute_dtype not in (torch.float32, torch.float64):
        raise ValueError(f"compute_dtype must be torch.float32 or torch.float64, got {compute_dtype}")


def _dequant_fn(cache, scale, offset, name, compute_dtype):
    """Return f(gathered [L, H_kv, D]) -> compute_dtype, applying the cache's antiquant."""
    if cache.dtype in _QUANT_DTYPES:
        if scale is None:
            raise ValueError(f"{name}_scale is required for a {cache.dtype} {name}_cache")
        return lambda x: dequantize_kv(x, scale, offset, out_dtype=compute_dtype)
    if scale is not None or offset is not None:
        raise ValueError(f"{name}_scale / {name}_offset apply to int8 / float8_e4m3fn caches only, "
                         f"got a {cache.dtype} {name}_cache")
    return lambda x: x.to(compute_dtype)


def _broadcast_bias(t, name, shape, dtype_check):
    if t is None:
        return None
    if not isinstance(t, torch.Tensor) or not dtype_check(t.dtype):
        raise TypeError(f"{name} has the wrong dtype: got {getattr(t, 'dtype', type(t).__name__)}")
    try:
        return torch.broadcast_to(t, shape)
    except RuntimeError:
        raise ValueError(f"{name} must be broadcastable to [B, H_q, S_q, S_kv] = {list(shape)}, "
                         f"got {tuple(t.shape)}") from None


def incre_flash_attention(q, k_cache, v_cache, *, kv_lens=None, block_table=None, softmax_scale=None,
                          causal=False, atten_mask=None, pse_shift=None, k_scale=None, v_scale=None,
                          k_offset=None, v_offset=None, compute_dtype=torch.float32, return_budget=False,
                          rounding_dtype=None):
    """Ground-truth decode attention.

    q [B, S_q, H_q, D]; k_cache/v_cache contiguous [B, S_max, H_kv, D] or, with an int32
    block_table [B, max_blocks], paged [num_blocks, block_size, H_kv, D].  kv_lens [B]
    (default S_max; required when paged).  int8 caches dequantize as (x + offset) * scale,
    float8_e4m3fn caches as x * scale, with per-channel [H_kv, D] scale/offset.

    Returns (out [B, S_q, H_q, D], lse [B, H_q, S_q]), both in ``compute_dtype`` (fp32 or
    fp64) on q's device; the caller casts out to q.dtype. ``return_budget=True`` adds a third
    result, an ``AttentionBudget(out, lse)`` of the same shapes: the rounding terms of
    docs/parity.md for a kernel whose matrix-unit operands (P, and a dequantized cache) are
    rounded once to ``rounding_dtype`` (default: q's dtype).
    """
    _check_compute_dtype(compute_dtype)
    if q.dim() != 4:
        raise ValueError(f"q must be [B, S_q, H_q, D], got shape {tuple(q.shape)}")
    B, S_q, H_q, D = q.shape
    paged = block_table is not None
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if c.dim() != 4 or c.shape[-1] != D:
            raise ValueError(f"{name} must be 4-D with head dim {D}, got shape {tuple(c.shape)}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache shapes differ: {tuple(k_cache.shape)} vs {tuple(v_cache.shape)}")
    H_kv = k_cache.shape[2]
    if H_kv == 0 or H_q % H_kv:
        raise ValueError(f"H_q ({H_q}) must be a multiple of H_kv ({H_kv})")
    group = H_q // H_kv

    if paged:
        if block_table.dim() != 2 or block_table.shape[0] != B or block_table.dtype.is_floating_point:
            raise ValueError(f"block_table must be an integer [B={B}, max_blocks] tensor, "
                             f"got {block_table.dtype} {tuple(block_table.shape)}")
        if kv_lens is None:
            raise ValueError("kv_lens is required with a paged cache (block_table given)")
        num_blocks, block_size = k_cache.shape[0], k_cache.shape[1]
        s_kv = block_table.shape[1] * block_size
        bt = block_table.to(device=q.device, dtype=torch.int64)
    else:
        if k_cache.shape[0] != B:
            raise ValueError(f"contiguous k_cache batch {k_cache.shape[0]} != q batch {B}")
        s_kv = k_cache.shape[1]
    if kv_lens is None:
        lens = [s_kv] * B
    else:
        if kv_lens.shape != (B,) or kv_lens.dtype.is_floating_point:
            raise ValueError(f"kv_lens must be an integer [B={B}] tensor, got {kv_lens.dtype} {tuple(kv_lens.shape)}")
        lens = [int(x) for x in kv_lens.tolist()]
        if any(n < 0 or n > s_kv for n in lens):
            raise ValueError(f"kv_lens entries must be in [0, {s_kv}], got {lens}")

    full = (B, H_q, S_q, s_kv)
    mask = _broadcast_bias(atten_mask, "atten_mask", full, lambda d: d == torch.bool)
    pse = _broadcast_bias(pse_shift, "pse_shift", full, lambda d: d.is_floating_point)
    k_deq = _dequant_fn(k_cache, k_scale, k_offset, "k", compute_dtype)
    v_deq = _dequant_fn(v_cache, v_scale, v_offset, "v", compute_dtype)
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(D)

    out = torch.zeros(B, S_q, H_q, D, dtype=compute_dtype, device=q.device)
    lse = torch.full((B, H_q, S_q), math.inf, dtype=compute_dtype, device=q.device)
    budget = AttentionBudget(torch.zeros_like(out), torch.zeros_like(lse))
    rounding = rounding_type(rounding_dtype or q.dtype)
    for b, L in enumerate(lens):
        if L == 0:
            continue
        pos = torch.arange(L, device=q.device)
        if paged:
            blocks = bt[b, pos // block_size]
            if int(blocks.min()) < 0 or int(blocks.max()) >= num_blocks:
                raise ValueError(f"block_table[{b}] holds block ids outside [0, {num_blocks}) "
                                 f"within kv_lens[{b}] = {L}")
            k, v = k_cache[blocks, pos % block_size], v_cache[blocks, pos % block_size]
        else:
            k, v = k_cache[b, :L], v_cache[b, :L]
        k, v = k_deq(k.to(q.device)), v_deq(v.to(q.device))  # [L, H_kv, D]
        qb = q[b].to(compute_dtype).view(S_q, H_kv, group, D)
        # scores[kvh, g, i, l] -> [H_q, S_q, L] with h = kvh * group + g
        s = torch.einsum("ikgd,lkd->kgil", qb, k).reshape(H_q, S_q, L) * scale
        if pse is not None:
            s = s + pse[b, :, :, :L].to(device=q.device, dtype=compute_dtype)
        hidden = torch.zeros(H_q, S_q, L, dtype=torch.bool, device=q.device)
        if mask is not None:
            hidden |= mask[b, :, :, :L].to(q.device)
        if causal:
            limit = L - S_q + 1 + torch.arange(S_q, device=q.device)  # query i sees keys < limit[i]
            hidden |= pos.view(1, 1, L) >= limit.view(1, S_q, 1)
        s = s.masked_fill(hidden, -math.inf)
        row_lse = torch.logsumexp(s, dim=-1)  # -inf where the row sees nothing
        seen = row_lse != -math.inf  # NaN from NaN inputs stays NaN
        p = torch.exp(s - torch.where(seen, row_lse, torch.zeros_like(row_lse)).unsqueeze(-1))
        p = p.masked_fill(~seen.unsqueeze(-1), 0.0)
        # [H_kv, group * S_q, L] @ [H_kv, L, D]; hidden keys add nothing, whatever their value
        rows = (H_kv, group * S_q, L)
        vk = v.permute(1, 0, 2)
        o = weighted_values(p.reshape(rows), vk, hidden.reshape(rows))
        out[b] = _heads_last(o, group, S_q)
        lse[b] = torch.where(seen, row_lse, torch.full_like(row_lse, math.inf))
        if return_budget:
            q_rows = qb.permute(1, 2, 0, 3).reshape(H_kv, group * S_q, D)  # row g * S_q + i
            o_b, l_b = attention_budget(q_rows, k.permute(1, 0, 2), vk, p.reshape(rows), hidden.reshape(rows),
                                        scale, o, rounding)
            budget.out[b] = _heads_last(o_b, group, S_q)
            budget.lse[b] = l_b.reshape(H_q, S_q)
    return (out, lse, budget) if return_budget else (out, lse)


def _heads_last(o, group, S_q):
    """[H_kv, group * S_q, D] (row g * S_q + i of KV head kvh) -> [S_q, H_q, D]."""
    H_kv, _, D = o.shape
    return o.view(H_kv, group, S_q, D).permute(2, 0, 1, 3).reshape(S_q, H_kv * group, D)

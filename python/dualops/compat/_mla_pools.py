"""FlashMLA's cache tensors as dualops' mla_decode takes them (used by ``compat.flash_mla``).

FlashMLA accepts caches that dualops' kernels do not read directly: FP8 caches viewed as
``float8_e4m3fn``, caches that are slices of padded buffers (a block stride larger than the
block), and any page size. Here each such cache becomes an equivalent one, never a different
one: a byte view where that is enough, a re-view of the same memory with a page size the
backend takes (sparse decode addresses tokens one by one, so only the flat token index
matters), and a copy where no view exists. Out-of-range indices stay invalid (-1).
"""
from __future__ import annotations

import torch

from .. import api

FP8_BYTES = {656: "fp8_v32", 584: "fp8_model1"}
MODEL1_DATA = 576  # bytes of a fp8_model1 token's NoPE + RoPE record; the other 8 are scales
_PAGE_CANDIDATES = (64, 16, 32, 128)


def cache_format(k_cache: torch.Tensor, is_fp8_kvcache: bool, name: str = "k_cache"):
    """(kv_format, the cache as dualops reads it: uint8 bytes for FP8, the float view for bf16)."""
    if not isinstance(k_cache, torch.Tensor) or k_cache.dim() != 4:
        got = list(k_cache.shape) if isinstance(k_cache, torch.Tensor) else type(k_cache).__name__
        raise ValueError(f"flash_mla_with_kvcache: {name} must be [num_blocks, page_block_size, "
                         f"num_heads_k, head_dim], got {got}")
    if not is_fp8_kvcache:
        if k_cache.dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"flash_mla_with_kvcache: {name} must be bf16/fp16 without is_fp8_kvcache, "
                            f"got {k_cache.dtype}")
        return "bf16", k_cache
    if k_cache.element_size() != 1 or k_cache.dtype == torch.bool:
        raise TypeError(f"flash_mla_with_kvcache: an FP8 {name} must be a 1-byte view (float8_e4m3fn, "
                        f"uint8 or int8), got {k_cache.dtype}")
    fmt = FP8_BYTES.get(int(k_cache.shape[-1]))
    if fmt is None:
        raise ValueError(f"flash_mla_with_kvcache: an FP8 {name} holds 656 (V3.2 layout) or 584 (MODEL1 "
                         f"layout) bytes per token, got last dim {k_cache.shape[-1]}")
    return fmt, k_cache.view(torch.uint8)


def page_ok(backend: str, page_block_size: int) -> bool:
    return api.supports("mla_decode", backend, page_block_size=int(page_block_size))


def _page_for(backend: str, n_tokens: int | None = None) -> int:
    """A page size the backend takes (dividing n_tokens where one does)."""
    ok = [p for p in _PAGE_CANDIDATES if page_ok(backend, p)]
    if not ok:
        raise NotImplementedError(f"flash_mla_with_kvcache: backend {backend!r} takes none of the page "
                                  f"sizes {_PAGE_CANDIDATES} the shim can re-view a cache to")
    if n_tokens is not None:
        for p in ok:
            if n_tokens % p == 0:
                return p
    return ok[0]


def token_records(cache: torch.Tensor, fmt: str) -> torch.Tensor:
    """[num_blocks * page_block_size, bytes (or elems) per token], token t = block * pbs + offset."""
    nb, pbs, _, tb = cache.shape
    if fmt != "fp8_model1":
        return cache.reshape(nb * pbs, tb)
    blocks = cache.reshape(nb, pbs * tb)  # each block's byte run (a view when only the block stride is padded)
    data = blocks[:, :pbs * MODEL1_DATA].reshape(nb * pbs, MODEL1_DATA)
    scales = blocks[:, pbs * MODEL1_DATA:].reshape(nb * pbs, tb - MODEL1_DATA)
    return torch.cat([data, scales], dim=1)


def pool_from_records(records: torch.Tensor, fmt: str, page: int) -> torch.Tensor:
    """Token records -> a contiguous cache [ceil(n / page), page, 1, tb] in ``fmt``'s layout
    (the tail of the last page zeroed)."""
    n, tb = records.shape
    nb = max(-(-n // page), 1)
    if nb * page != n:
        records = torch.cat([records, records.new_zeros(nb * page - n, tb)])
    if fmt != "fp8_model1":
        return records.reshape(nb, page, 1, tb)
    per_block = records.view(nb, page, tb)
    out = torch.cat([per_block[:, :, :MODEL1_DATA].reshape(nb, page * MODEL1_DATA),
                     per_block[:, :, MODEL1_DATA:].reshape(nb, page * (tb - MODEL1_DATA))], dim=1)
    return out.view(nb, page, 1, tb)


def _invalid_to_minus_one(indices: torch.Tensor, capacity: int, new_ids: torch.Tensor | None = None):
    idx = indices.to(torch.int64)
    valid = (idx >= 0) & (idx < capacity)
    ids = idx if new_ids is None else new_ids
    return torch.where(valid, ids, torch.full_like(ids, -1)).to(torch.int32).contiguous()


def _rows_view(cache: torch.Tensor):
    """A per-token cache whose tokens are evenly spaced rows of one buffer: (rows per block, the
    number of rows a view over the storage may span), else None."""
    nb, pbs, h, tb = cache.shape
    if h != 1 or cache.stride(3) != 1 or cache.stride(1) != tb or cache.stride(0) % tb:
        return None
    rows_per_block = cache.stride(0) // tb
    if rows_per_block < pbs:
        return None
    storage_rows = (cache.untyped_storage().nbytes() // cache.element_size() - cache.storage_offset()) // tb
    return rows_per_block, storage_rows


def sparse_pool(cache: torch.Tensor, fmt: str, indices: torch.Tensor, backend: str):
    """(cache, indices) for a sparse call: the same tokens, in a cache the backend reads."""
    nb, pbs = int(cache.shape[0]), int(cache.shape[1])
    capacity = nb * pbs
    if cache.is_contiguous() and page_ok(backend, pbs):
        return cache, indices
    if fmt == "fp8_model1" and page_ok(backend, pbs):
        return cache.contiguous(), indices  # block-major: blocks keep their page size
    rows = _rows_view(cache) if fmt != "fp8_model1" else None
    if rows is not None:
        rows_per_block, storage_rows = rows
        span = (nb - 1) * rows_per_block + pbs
        page = _page_for(backend, span)
        n_rows = -(-span // page) * page
        if n_rows <= storage_rows:
            tb = int(cache.shape[3])
            view = cache.as_strided((n_rows // page, page, 1, tb), (page * tb, tb, tb, 1))
            if rows_per_block == pbs:
                return view, _invalid_to_minus_one(indices, capacity)
            idx = indices.to(torch.int64)
            moved = torch.div(idx, pbs, rounding_mode="floor") * rows_per_block + torch.remainder(idx, pbs)
            return view, _invalid_to_minus_one(indices, capacity, moved)
    page = _page_for(backend, capacity)
    return pool_from_records(token_records(cache, fmt), fmt, page), _invalid_to_minus_one(indices, capacity)


def dense_pool(cache: torch.Tensor, fmt: str, block_table: torch.Tensor, cache_seqlens: torch.Tensor,
               backend: str):
    """(cache, block_table) for a dense call: the cache itself when the backend reads it, a
    contiguous copy when only the layout differs, else each request's tokens gathered into
    pages of a size the backend takes (block ids past a request's length are never read)."""
    pbs = int(cache.shape[1])
    if page_ok(backend, pbs):
        return (cache if cache.is_contiguous() else cache.contiguous()), block_table
    B, max_blocks = int(block_table.shape[0]), int(block_table.shape[1])
    page = _page_for(backend)
    per_req = -(-max_blocks * pbs // page)
    dev = cache.device
    t = torch.arange(per_req * page, device=dev)
    bt = block_table.to(device=dev, dtype=torch.int64)
    lens = cache_seqlens.to(device=dev, dtype=torch.int64)
    used = t[None, :] < torch.minimum(lens, torch.tensor(max_blocks * pbs, device=dev))[:, None]
    col = torch.clamp(torch.div(t, pbs, rounding_mode="floor"), max=max_blocks - 1)
    src = bt[:, col] * pbs + torch.remainder(t, pbs)[None, :]
    src = torch.where(used, src, torch.zeros_like(src))
    records = token_records(cache, fmt)
    if bool(used.any()) and (int(src.max()) >= records.shape[0] or int(src.min()) < 0):
        raise ValueError(f"flash_mla_with_kvcache: block_table names blocks outside k_cache "
                         f"({cache.shape[0]} blocks) within cache_seqlens")
    gathered = records[src.reshape(-1)].reshape(B * per_req * page, -1)
    gathered = torch.where(used.reshape(-1, 1), gathered, torch.zeros_like(gathered))
    new_table = torch.arange(B * per_req, dtype=torch.int32, device=dev).view(B, per_req)
    return pool_from_records(gathered, fmt, page), new_table

"""Input construction for parity cases, by the method of docs/parity.md: fresh random values
(never zeros), unused cache slots poisoned (NaN, or the dtype's extreme where it has no NaN),
block tables randomly permuted, varlen batches, non-contiguous views whose hidden half is
poison too. Everything is built on the CPU from a seeded ``torch.Generator`` so a case is
reproduced exactly from (op, case name, seed)."""
from __future__ import annotations

import zlib

import torch

INT32_MIN = -(2 ** 31)
INT32_MAX = 2 ** 31 - 1


def generator(seed: int, op: str, case: str) -> torch.Generator:
    """One generator per case, independent of which other cases run (stable across processes)."""
    g = torch.Generator()
    g.manual_seed((int(seed) * 1_000_003 + zlib.crc32(f"{op}/{case}".encode())) % (2 ** 63))
    return g


def randn(g: torch.Generator, *shape, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def randint(g: torch.Generator, low: int, high: int, *shape) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=g)


def poison_value(dtype: torch.dtype) -> float:
    """What unused slots hold: NaN where the dtype has one, else a large in-range value that a
    kernel reading it would turn into a visibly wrong answer."""
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.uint8:
        return 255  # 0xFF is NaN as e4m3 data, as an fp32 scale and as a bf16 value
    return 127


def poisoned(shape, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, poison_value(dtype), dtype=torch.float32).to(dtype) \
        if dtype.is_floating_point else torch.full(shape, poison_value(dtype), dtype=dtype)


def poison_at(t: torch.Tensor, index) -> torch.Tensor:
    """A copy of t with t[index] (rows nobody may read) set to poison."""
    t = t.clone()
    t[index] = poison_value(t.dtype)
    return t


def nan_tail(cache: torch.Tensor, lens) -> torch.Tensor:
    """Contiguous cache [B, S, ...]: positions at or past lens[b] are poison."""
    cache = cache.clone()
    for b, n in enumerate(lens):
        cache[b, n:] = poison_value(cache.dtype)
    return cache


def page(caches, lens, block_size: int, g: torch.Generator, *, spare_blocks: int = 2,
         unused_id: int | None = None):
    """Scatter logical [B, S, ...] caches (e.g. k and v, sharing one block table) into randomly
    ordered blocks of ``block_size`` tokens.

    Returns (pools [num_blocks, block_size, ...] one per cache, block_table int32
    [B, ceil(S / block_size)]). Slots past lens[b] and the spare blocks are poison; the table
    entries a request does not need point at poisoned spare blocks (a kernel that reads them
    fails, without reading out of bounds), or hold ``unused_id`` when given (e.g. -1: a kernel
    that reads them reads out of bounds, which the sanitizer reports). Pools and table live on
    the caches' device."""
    B, S = caches[0].shape[0], caches[0].shape[1]
    per_req = -(-S // block_size)
    total = B * per_req + max(spare_blocks, 1)
    perm = torch.randperm(total, generator=g)
    pools = [poisoned((total, block_size, *c.shape[2:]), c.dtype).to(c.device) for c in caches]
    spare = perm[B * per_req:].tolist()
    table = torch.empty(B, per_req, dtype=torch.int32)
    for b in range(B):
        used = -(-int(lens[b]) // block_size)
        for j in range(per_req):
            if j >= used:
                table[b, j] = spare[(b + j) % len(spare)] if unused_id is None else unused_id
                continue
            blk = int(perm[b * per_req + j])
            table[b, j] = blk
            n = min(block_size, int(lens[b]) - j * block_size)
            for pool, c in zip(pools, caches):
                pool[blk, :n] = c[b, j * block_size: j * block_size + n]
    return pools, table.to(caches[0].device)


def strided_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view (last dim still stride 1): the tensor lives in
    the first half of a buffer whose last dim is twice as wide, the other half poison."""
    buf = poisoned((*t.shape[:-1], 2 * t.shape[-1]), t.dtype).to(t.device)
    buf[..., : t.shape[-1]] = t
    return buf[..., : t.shape[-1]]


def invalid_ids(capacity: int) -> list[int]:
    """Sparse indices that must be ignored: -1, int32 min, the capacity, int32 max."""
    return [-1, INT32_MIN, capacity, INT32_MAX]

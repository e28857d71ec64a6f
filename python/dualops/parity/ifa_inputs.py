"""The one builder of incremental flash attention inputs: the parity cases, the CUDA tests and the
simulator tests all make their calls with ``ifa_inputs``.

Unused cache slots are poison (NaN, or the 8-bit types' stand-ins: ``builders.poison_value``), so
a kernel that reads a key past ``kv_lens`` or a block the table does not name fails its check.
"""
from __future__ import annotations

import math

import torch

from .. import quant
from . import builders as bld

# Named broadcast shapes of atten_mask / pse_shift: which of the dims [B, H_q, S_q, S_kv] the
# tensor has (the others are 1). A dims string ("bk", "bhqk", ...) may be given instead.
SHAPES = {"full": "bhqk", "per_batch": "bk", "bcast": "bk", "per_head_q": "hqk", "per_head": "hk",
          "heads": "hk", "row": "bhq"}
KV_KINDS = ("same", "int8", "fp8")


def _kv_kind(kv, dtype):
    """(kind, 16-bit cache dtype): kv is "same", "int8", "fp8" or a torch dtype."""
    if kv is None or kv in KV_KINDS:
        return kv or "same", dtype
    if kv == torch.int8:
        return "int8", None
    if kv == torch.float8_e4m3fn:
        return "fp8", None
    if isinstance(kv, torch.dtype) and kv.is_floating_point and kv.itemsize == 2:
        return "same", kv
    raise ValueError(f"ifa_inputs: kv must be one of {KV_KINDS} or a cache dtype, got {kv!r}")


def ifa_inputs(gen, *, B=3, lens=None, h_q=8, h_kv=2, d=128, s_q=1, s_max=None, dtype=torch.bfloat16,
               kv="same", int8_offsets="kv", block_size=0, spare_blocks=2, unused_id=None,
               spare_table_cols=0, causal=False, mask=None, pse=None, pse_dtype=torch.float32,
               q_layout="contiguous", fused_kv=False, softmax_scale=None, q_bias=0.0, k_trend=0.0,
               k_jumps=0, device="cpu") -> dict:
    """Keyword arguments of one ``dualops.incre_flash_attention`` call, fresh random data.

    gen: a torch.Generator or an int seed. lens: kv_lens (None: [0, 1, s_max] then random, 96 keys
    by default). s_max: the contiguous cache's length (default: the longest request). kv: "same"
    or None (q's dtype), another 16-bit dtype, "int8" / torch.int8 or "fp8" / torch.float8_e4m3fn;
    int8_offsets: which caches carry offsets ("kv", "k" with v symmetric, "" both symmetric).
    block_size > 0: paged, blocks in random order, spare_blocks poisoned blocks, table entries a
    request does not need pointing at them (or holding unused_id, e.g. -1: reading one is then an
    out-of-bounds access the sanitizer reports), spare_table_cols extra table columns.
    mask / pse: a name of SHAPES or a dims string. q_layout: "contiguous", "slice" (a slice of a
    wider tensor) or "bhsd" (a transposed BHSD tensor). fused_kv: k and v interleaved in one
    tensor. q_bias: added to every channel of q. k_trend > 0: scores climb along the keys (q gets
    +-0.5 by channel parity, key j gains k_trend * j times the same signs); k_jumps: that many
    random keys jump 6 above their neighbours. Tensors are made on the CPU from ``gen``, then
    moved to ``device``."""
    if isinstance(gen, int):
        gen = torch.Generator().manual_seed(gen)
    dev = torch.device(device)
    kind, kv16 = _kv_kind(kv, dtype)
    if lens is None:
        s_max = s_max or 96
        rest = [int(x) for x in torch.randint(0, s_max + 1, (max(B - 3, 0),), generator=gen)]
        lens = ([0, 1, s_max] + rest)[:B]
    lens = list(lens)
    if len(lens) != B:
        raise ValueError(f"ifa_inputs: lens must have B = {B} entries, got {len(lens)}")
    S = s_max or max(max(lens), 1)
    if block_size:
        S = (math.ceil(S / block_size) + spare_table_cols) * block_size
    # q (made on the device first: .to(device) of a strided CPU view would make it contiguous)
    if q_layout == "slice":
        q = torch.randn(B, s_q, h_q, 2 * d, generator=gen).to(dtype).to(dev)[..., d // 2:d // 2 + d]
    elif q_layout == "bhsd":
        q = torch.randn(B, h_q, s_q, d, generator=gen).to(dtype).to(dev).transpose(1, 2)
    elif q_layout == "contiguous":
        q = torch.randn(B, s_q, h_q, d, generator=gen).to(dtype).to(dev)
    else:
        raise ValueError(f"ifa_inputs: q_layout must be 'contiguous', 'slice' or 'bhsd', got {q_layout!r}")
    if fused_kv:  # k and v interleaved: head rows strided by 2 * d
        kvf = torch.randn(B, S, h_kv, 2, d, generator=gen).to(dev)
        k, v = kvf[..., 0, :], kvf[..., 1, :]
    else:
        k = torch.randn(B, S, h_kv, d, generator=gen).to(dev)
        v = torch.randn(B, S, h_kv, d, generator=gen).to(dev)
    if q_bias:
        q = (q.float() + q_bias).to(dtype)
    if k_trend or k_jumps:
        sign = (1 - 2 * (torch.arange(d) % 2)).float().to(dev)
        q = (q.float() + 0.5 * sign).to(dtype)
        bump = k_trend * torch.arange(S, dtype=torch.float32)
        bump[torch.randint(0, S, (k_jumps,), generator=gen)] += 6.0
        k = k + bump.to(dev)[None, :, None, None] * sign
    extra = {}
    if kind == "int8":
        if int8_offsets not in ("kv", "k", ""):
            raise ValueError(f"ifa_inputs: int8_offsets must be 'kv', 'k' or '', got {int8_offsets!r}")
        k, ks, ko = quant.quantize_kv_int8(k, symmetric=not int8_offsets)
        v, vs, vo = quant.quantize_kv_int8(v, symmetric=int8_offsets != "kv")
        extra = dict(k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo)
        extra = {n: t for n, t in extra.items() if t is not None}
    elif kind == "fp8":
        k, ks = quant.quantize_kv_fp8(k)
        v, vs = quant.quantize_kv_fp8(v)
        extra = dict(k_scale=ks, v_scale=vs)
    else:
        k, v = k.to(kv16), v.to(kv16)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    if block_size:
        (k, v), table = bld.page((k, v), lens, block_size, gen, spare_blocks=spare_blocks, unused_id=unused_id)
        extra["block_table"] = table
        s_kv = table.shape[1] * block_size
    else:
        k, v = bld.nan_tail(k, lens), bld.nan_tail(v, lens)
        if fused_kv and kind == "same":
            both = torch.stack([k, v], dim=3)  # keep the strided layout after the poison fill
            k, v = both[..., 0, :], both[..., 1, :]
        s_kv = S
    full = (B, h_q, s_q, s_kv)

    def shaped(spec):
        dims = SHAPES.get(spec, spec)
        if not set(dims) <= set("bhqk"):
            raise ValueError(f"ifa_inputs: mask / pse must be one of {sorted(SHAPES)} or a dims string, got {spec!r}")
        return [n if dim in dims else 1 for dim, n in zip("bhqk", full)]
    if mask is not None:
        extra["atten_mask"] = (torch.rand(shaped(mask), generator=gen) < 0.3).to(dev)
    if pse is not None:
        extra["pse_shift"] = torch.randn(shaped(pse), generator=gen).to(pse_dtype).to(dev)
    if softmax_scale is not None:
        extra["softmax_scale"] = softmax_scale
    return dict(q=q, k_cache=k, v_cache=v, kv_lens=kv_lens, causal=causal, **extra)

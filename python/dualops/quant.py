"""Cache formats: the MLA quantized KV layouts (FlashMLA's FP8 "v32" and "model1", and the
int8 "v32" layout of CANN's quantized MLA kernels) and IFA's per-channel int8 / fp8 KV
quantization.

MLA caches are paged, ``[num_blocks, page_block_size, 1, d_qk]`` before packing.

* ``fp8_v32`` (d_qk 576), 656 bytes per token, token-major: bytes ``[0, 512)`` the 512
  NoPE values as e4m3, ``[512, 528)`` four fp32 scales (one per 128 values), ``[528, 656)``
  the 64 RoPE values as bf16 (not quantized).  Packed shape ``[num_blocks, page_block_size,
  1, 656]`` uint8, row ``t`` of a block is token ``t``.
* ``int8_v32`` (d_qk 576), 656 bytes per token: the ``fp8_v32`` layout with the 512 NoPE
  values as int8 in place of e4m3 (the format of Ascend A2 / A3, which have no FP8).
* ``fp8_model1`` (d_qk 512), 584 bytes per token, laid out per page block: first
  ``page_block_size * 576`` bytes hold each token's ``[448 e4m3 NoPE | 64 bf16 RoPE]``,
  then ``page_block_size * 8`` bytes of scales, per token 7 e8m0 exponents (one per 64
  NoPE values) and one zero pad byte.  Packed shape ``[num_blocks, page_block_size, 1,
  584]`` uint8, but that is only a view of each block's byte stream: row ``t`` is *not*
  token ``t``.  Readers take the block's bytes as one run (``reshape(num_blocks, -1)``),
  so a cache whose block stride is padded (FlashMLA pads blocks to a multiple of 576 B)
  works as long as each block's bytes are contiguous.

FP8 quantization (as FlashMLA's tests do it): per token and tile, scale = amax / 448, clamped
to >= 1e-4 and rounded *up* to a power of two; value = e4m3(x / scale).  Dequant is
e4m3 * scale, which is exact in bf16 and fp32 because the scale is a power of two.

int8 quantization (``int8_v32``): per token and 128-value tile, symmetric, scale = amax / 127
in fp32, value = clamp(round_half_even(x / scale), -127, 127); an all-zero tile stores scale 0
and zeros; a tile holding NaN or inf stores a NaN scale (and zeros), so it dequantizes to NaN.
Dequant is int8 * scale in fp32 (not exact in 16 bits: kernels round it once to q's dtype).
Readers accept any fp32 scale, whatever rule produced it.  ``convert_mla_kv`` moves a cache
between formats by dequantizing and requantizing.

IFA caches (``[..., H_kv, D]``, contiguous or paged) use per-channel ``[H_kv, D]`` fp32
scales over all tokens: int8 dequant = (q + offset) * scale (CANN's antiquant
convention), fp8 e4m3 dequant = q * scale.
"""

import torch

FP8_E4M3_MAX = 448.0
INT8_MAX = 127.0
MLA_SCALE_MIN = 1e-4  # FlashMLA's FP8 amax margin; keeps all-zero tiles finite.

# Bytes per token.  "bf16" is 2 * d_qk: 1152 for d_qk 576 (d_qk 512 gives 1024).
MLA_FORMATS = {"bf16": 1152, "fp8_v32": 656, "fp8_model1": 584, "int8_v32": 656}
# d_qk per format ("bf16" also accepts 512, the MODEL1 geometry).
MLA_D_QK = {"bf16": 576, "fp8_v32": 576, "fp8_model1": 512, "int8_v32": 576}
MLA_D_ROPE = 64

# kv_format -> (d_qk, d_nope, tile, num_tiles)
_FP8_LAYOUT = {"fp8_v32": (576, 512, 128, 4), "fp8_model1": (512, 448, 64, 7), "int8_v32": (576, 512, 128, 4)}
# The 656-byte v32 token layouts and the dtype of their NoPE values.
_V32_VALUES = {"fp8_v32": torch.float8_e4m3fn, "int8_v32": torch.int8}
_MODEL1_DATA_BYTES = 448 + 2 * MLA_D_ROPE  # 576
_MODEL1_SCALE_BYTES = 8  # 7 e8m0 + 1 pad
_E8M0_BIAS = 127


# ----------------------------------------------------------------------------- helpers

def check_mla_format(kv_format):
    if kv_format not in MLA_FORMATS:
        raise ValueError(f"kv_format must be one of {sorted(MLA_FORMATS)}, got {kv_format!r}")


def mla_bytes_per_token(kv_format, d_qk=None):
    """Bytes one token occupies in a cache of ``kv_format`` (bf16: 2 * d_qk)."""
    check_mla_format(kv_format)
    if kv_format == "bf16":
        return 2 * (d_qk if d_qk is not None else MLA_D_QK["bf16"])
    return MLA_FORMATS[kv_format]


def mla_cache_d_qk(kv_cache, kv_format):
    """Validate an MLA cache tensor against its format and return d_qk."""
    check_mla_format(kv_format)
    if not isinstance(kv_cache, torch.Tensor) or kv_cache.dim() != 4 or kv_cache.shape[2] != 1:
        got = tuple(kv_cache.shape) if isinstance(kv_cache, torch.Tensor) else type(kv_cache).__name__
        raise ValueError(f"kv_cache must be [num_blocks, page_block_size, 1, last], got {got}")
    last = kv_cache.shape[-1]
    if kv_format == "bf16":
        if not kv_cache.dtype.is_floating_point or kv_cache.element_size() < 2:
            raise TypeError(f"kv_cache for kv_format 'bf16' must be bf16/fp16/fp32, got {kv_cache.dtype}")
        if last not in (576, 512):
            raise ValueError(f"kv_cache for kv_format 'bf16' must have d_qk 576 or 512, got {last}")
        return last
    if kv_cache.dtype != torch.uint8:
        raise TypeError(f"kv_cache for kv_format {kv_format!r} must be uint8 (raw bytes), got {kv_cache.dtype}")
    if last != MLA_FORMATS[kv_format]:
        raise ValueError(f"kv_cache for kv_format {kv_format!r} must have {MLA_FORMATS[kv_format]} "
                         f"bytes per token in its last dim, got {last}")
    return MLA_D_QK[kv_format]


def pow2_scale_exponent(amax):
    """Smallest integer e with 2**e >= max(amax / 448, 1e-4), as int32 (same shape as amax)."""
    s = torch.clamp_min(amax.float() / FP8_E4M3_MAX, MLA_SCALE_MIN)
    # frexp: s = m * 2**e with m in [0.5, 1); s is an exact power of two iff m == 0.5.
    m, e = torch.frexp(s)
    return torch.where(m == 0.5, e - 1, e).to(torch.int32)


def quantize_fp8_pow2_tiles(x, tile):
    """Quantize the last dim of ``x`` in tiles of ``tile`` values with power-of-two scales.

    Returns (values e4m3 [..., n], exponents int32 [..., n // tile]); dequant is
    values * 2**exponent, tile by tile.
    """
    if x.shape[-1] % tile:
        raise ValueError(f"last dim {x.shape[-1]} is not a multiple of the tile {tile}")
    xt = x.float().unflatten(-1, (-1, tile))
    exp = pow2_scale_exponent(xt.abs().amax(dim=-1))
    scaled = xt / torch.exp2(exp.float()).unsqueeze(-1)  # exact: power-of-two divide
    q = scaled.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return q.flatten(-2), exp


def quantize_int8_tiles(x, tile):
    """Symmetric int8 quantization of the last dim of ``x`` in tiles of ``tile`` values.

    Returns (values int8 [..., n], scales fp32 [..., n // tile]); scale = amax / 127, value =
    clamp(round(x / scale), -127, 127), dequant values * scale.  All-zero tiles: scale 0;
    tiles with a NaN / inf: scale NaN (values 0), so they dequantize to NaN.
    """
    if x.shape[-1] % tile:
        raise ValueError(f"last dim {x.shape[-1]} is not a multiple of the tile {tile}")
    xt = x.float().unflatten(-1, (-1, tile))
    finite = torch.isfinite(xt).all(dim=-1)
    xt = torch.where(finite.unsqueeze(-1), xt, torch.zeros_like(xt))
    scale = xt.abs().amax(dim=-1) / INT8_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1)
    q = torch.round(xt / safe).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    scale = torch.where(finite, scale, torch.full_like(scale, float("nan")))
    return q.flatten(-2), scale


def _bytes(t):
    """Raw bytes of the last dim of ``t``."""
    return t.contiguous().view(torch.uint8)


# ------------------------------------------------------------------------- MLA pack

def pack_mla_kv(kv, kv_format="fp8_v32"):
    """Quantize a paged MLA cache ``[num_blocks, page_block_size, 1, d_qk]`` into a quantized
    format (``fp8_v32``, ``fp8_model1`` or ``int8_v32``).

    Returns a contiguous uint8 tensor ``[num_blocks, page_block_size, 1, bytes_per_token]``.
    """
    check_mla_format(kv_format)
    if kv_format == "bf16":
        raise ValueError("pack_mla_kv packs the quantized formats ('fp8_v32', 'fp8_model1', 'int8_v32'); "
                         "'bf16' needs no packing")
    d_qk, d_nope, tile, _ = _FP8_LAYOUT[kv_format]
    if not isinstance(kv, torch.Tensor) or not kv.dtype.is_floating_point:
        raise TypeError(f"kv must be a floating-point tensor, got {getattr(kv, 'dtype', type(kv).__name__)}")
    if kv.dim() != 4 or kv.shape[2] != 1 or kv.shape[3] != d_qk:
        raise ValueError(f"kv for {kv_format!r} must be [num_blocks, page_block_size, 1, {d_qk}], "
                         f"got {tuple(kv.shape)}")
    nb, pbs = kv.shape[0], kv.shape[1]
    tok = kv.reshape(nb, pbs, d_qk)
    rope_bytes = _bytes(tok[..., d_nope:].to(torch.bfloat16))  # [nb, pbs, 128]
    if kv_format == "int8_v32":
        q, scales = quantize_int8_tiles(tok[..., :d_nope], tile)
        out = torch.cat([q.view(torch.uint8), _bytes(scales), rope_bytes], dim=-1)
        return out.reshape(nb, pbs, 1, MLA_FORMATS[kv_format])
    q, exp = quantize_fp8_pow2_tiles(tok[..., :d_nope], tile)
    nope_bytes = q.view(torch.uint8)
    if kv_format == "fp8_v32":
        scale_bytes = _bytes(torch.exp2(exp.float()))  # 4 fp32 -> 16 bytes
        out = torch.cat([nope_bytes, scale_bytes, rope_bytes], dim=-1)
        return out.reshape(nb, pbs, 1, MLA_FORMATS[kv_format])
    data = torch.cat([nope_bytes, rope_bytes], dim=-1).reshape(nb, pbs * _MODEL1_DATA_BYTES)
    e8m0 = (exp + _E8M0_BIAS).to(torch.uint8)
    pad = torch.zeros(nb, pbs, 1, dtype=torch.uint8, device=kv.device)
    scales = torch.cat([e8m0, pad], dim=-1).reshape(nb, pbs * _MODEL1_SCALE_BYTES)
    return torch.cat([data, scales], dim=-1).reshape(nb, pbs, 1, MLA_FORMATS[kv_format])


# ----------------------------------------------------------------------- MLA unpack

def _dequant_v32_tokens(tok, out_dtype, values=torch.float8_e4m3fn):
    """[n, 656] uint8 -> [n, 576] (NoPE values of dtype ``values``: e4m3 or int8)."""
    nope = tok[:, :512].contiguous().view(values).float()
    scales = tok[:, 512:528].contiguous().view(torch.float32)  # [n, 4]
    rope = tok[:, 528:].contiguous().view(torch.bfloat16).float()
    nope = (nope.unflatten(-1, (4, 128)) * scales.unsqueeze(-1)).flatten(-2)
    return torch.cat([nope, rope], dim=-1).to(out_dtype)


def _dequant_model1_tokens(data, scale_bytes, out_dtype):
    """data [n, 576] uint8 + scale bytes [n, 8] -> [n, 512]."""
    nope = data[:, :448].contiguous().view(torch.float8_e4m3fn).float()
    rope = data[:, 448:].contiguous().view(torch.bfloat16).float()
    e = scale_bytes[:, :7].to(torch.int32)
    scales = torch.exp2((e - _E8M0_BIAS).float())
    scales = torch.where(e == 255, torch.full_like(scales, float("nan")), scales)  # e8m0 NaN code
    nope = (nope.unflatten(-1, (7, 64)) * scales.unsqueeze(-1)).flatten(-2)
    return torch.cat([nope, rope], dim=-1).to(out_dtype)


def gather_mla_kv(kv_cache, kv_format, token_ids, out_dtype=torch.float32):
    """Dequantized latent vectors of the given tokens: ``[n, d_qk]`` in ``out_dtype``.

    ``token_ids`` are ``block_idx * page_block_size + offset`` (any integer tensor, all in
    range).  Only the bytes of those tokens (and, for model1, their scales) are read.
    """
    d_qk = mla_cache_d_qk(kv_cache, kv_format)
    nb, pbs = kv_cache.shape[0], kv_cache.shape[1]
    ids = token_ids.reshape(-1).to(device=kv_cache.device, dtype=torch.int64)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= nb * pbs):
        raise ValueError(f"token ids must be in [0, {nb * pbs}) for a cache of {nb} blocks of {pbs}, "
                         f"got range [{int(ids.min())}, {int(ids.max())}]")
    blk, off = ids // pbs, ids % pbs
    if kv_format == "bf16":
        return kv_cache[blk, off, 0].to(out_dtype).reshape(-1, d_qk)
    if kv_format in _V32_VALUES:
        return _dequant_v32_tokens(kv_cache[blk, off, 0], out_dtype, _V32_VALUES[kv_format])
    flat = kv_cache.reshape(nb, pbs * MLA_FORMATS[kv_format])  # one block = one byte run
    blk, off = blk.unsqueeze(1), off.unsqueeze(1)
    data_cols = off * _MODEL1_DATA_BYTES + torch.arange(_MODEL1_DATA_BYTES, device=ids.device)
    scale_cols = (pbs * _MODEL1_DATA_BYTES + off * _MODEL1_SCALE_BYTES
                  + torch.arange(_MODEL1_SCALE_BYTES, device=ids.device))
    return _dequant_model1_tokens(flat[blk, data_cols], flat[blk, scale_cols], out_dtype)


def unpack_mla_kv(packed, kv_format, out_dtype=torch.bfloat16):
    """Inverse of :func:`pack_mla_kv`: ``[num_blocks, page_block_size, 1, d_qk]`` in out_dtype."""
    d_qk = mla_cache_d_qk(packed, kv_format)
    nb, pbs = packed.shape[0], packed.shape[1]
    ids = torch.arange(nb * pbs, device=packed.device)
    return gather_mla_kv(packed, kv_format, ids, out_dtype).reshape(nb, pbs, 1, d_qk)


def convert_mla_kv(packed, *, src, dst):
    """The MLA cache ``packed`` (format ``src``) stored as format ``dst``: dequantized to fp32,
    then quantized by ``dst``'s rule (``pack_mla_kv``; ``dst="bf16"``: rounded to bf16).

    One logical cache, two storage types: e.g. ``convert_mla_kv(cache, src="fp8_v32",
    dst="int8_v32")`` for an Ascend A2.  Lossy except for ``src == dst`` (a copy) and
    ``fp8_v32`` / ``fp8_model1`` -> ``bf16`` (every e4m3 * power-of-two value is a bf16 value);
    fp8 <-> int8 requantizes each 128-value tile with the target's scale, so the result differs
    from quantizing the original bf16 values directly.  Both formats need the same d_qk.
    """
    check_mla_format(src)
    check_mla_format(dst)
    d_src = mla_cache_d_qk(packed, src)
    if src == dst:
        return packed.clone()
    if dst != "bf16" and MLA_D_QK[dst] != d_src:
        raise ValueError(f"convert_mla_kv: {src!r} holds d_qk {d_src}, {dst!r} needs d_qk {MLA_D_QK[dst]}")
    if src == "bf16":
        values = packed.float()
    else:
        values = unpack_mla_kv(packed, src, out_dtype=torch.float32)
    if dst == "bf16":
        return values.to(torch.bfloat16)
    return pack_mla_kv(values, dst)


# ------------------------------------------------------------- IFA per-channel KV quant

def _check_kv(x, name="x"):
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() < 2:
        raise ValueError(f"{name} must be [..., H_kv, D], got shape {tuple(x.shape)}")


def _channel_stats(x):
    """Per-[H_kv, D] min and max over all leading dims; non-finite entries (NaN-filled
    unused slots) are left out."""
    xf = x.float().reshape(-1, x.shape[-2], x.shape[-1])
    finite = torch.isfinite(xf)
    lo = torch.where(finite, xf, torch.full_like(xf, float("inf"))).amin(dim=0)
    hi = torch.where(finite, xf, torch.full_like(xf, float("-inf"))).amax(dim=0)
    empty = ~finite.any(dim=0)
    return lo.masked_fill(empty, 0.0), hi.masked_fill(empty, 0.0)


def quantize_kv_int8(x, *, symmetric=False):
    """Per-channel int8 quantization of a KV cache ``[..., H_kv, D]``.

    Returns ``(q int8, scale fp32 [H_kv, D], offset fp32 [H_kv, D] or None)`` with
    dequant = (q + offset) * scale.  Asymmetric maps each channel's [min, max] onto
    [-128, 127]; symmetric uses scale = amax / 127 and returns offset None.
    Non-finite inputs are excluded from the statistics and quantize to 0.
    """
    _check_kv(x)
    lo, hi = _channel_stats(x)
    xf = x.float()
    if symmetric:
        scale = torch.maximum(hi.abs(), lo.abs()).div(127.0).clamp_min(1e-12)
        q = torch.round(xf / scale).clamp(-127, 127)
        offset = None
    else:
        scale = (hi - lo).div(255.0).clamp_min(1e-12)
        offset = lo / scale + 128.0  # lo -> -128, hi -> 127
        q = torch.round(xf / scale - offset).clamp(-128, 127)
    q = torch.where(torch.isfinite(xf), q, torch.zeros_like(q))
    return q.to(torch.int8), scale, offset


def quantize_kv_fp8(x):
    """Per-channel fp8 e4m3 quantization of ``[..., H_kv, D]``: ``(q e4m3, scale fp32 [H_kv, D])``,
    dequant = q * scale.  NaN stays NaN (e4m3fn has a NaN), so NaN-filled unused slots stay NaN."""
    _check_kv(x)
    lo, hi = _channel_stats(x)
    scale = torch.maximum(hi.abs(), lo.abs()).div(FP8_E4M3_MAX).clamp_min(1e-12)
    q = (x.float() / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)  # clamp keeps NaN
    return q.to(torch.float8_e4m3fn), scale


def dequantize_kv(xq, scale, offset=None, out_dtype=torch.float32):
    """Dequantize an int8 / fp8 e4m3 KV tensor ``[..., H_kv, D]`` with per-channel ``[H_kv, D]``
    scale (and, for int8, an optional offset): int8 (x + offset) * scale, fp8 x * scale."""
    if not isinstance(xq, torch.Tensor) or xq.dtype not in (torch.int8, torch.float8_e4m3fn):
        raise TypeError(f"xq must be int8 or float8_e4m3fn, got {getattr(xq, 'dtype', type(xq).__name__)}")
    if xq.dim() < 2:
        raise ValueError(f"xq must be [..., H_kv, D], got shape {tuple(xq.shape)}")
    channels = tuple(xq.shape[-2:])
    for name, t in (("scale", scale), ("offset", offset)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != channels:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be [H_kv, D] = {channels}, got {got}")
    if scale is None:
        raise ValueError("scale is required to dequantize an int8 / fp8 KV tensor")
    if offset is not None and xq.dtype != torch.int8:
        raise ValueError(f"offset applies to int8 caches only, got a {xq.dtype} cache")
    x = xq.to(out_dtype)
    if offset is not None:
        x = x + offset.to(device=x.device, dtype=out_dtype)
    return x * scale.to(device=x.device, dtype=out_dtype)

"""FlashMLA's sm90 sparse FP8 decode as a benchmark peer: a ctypes loader for the library that
build.sh makes (libflashmla_sparse_peer.so, our C-ABI binding over FlashMLA's kernels) and
``flash_mla_with_kvcache`` with the semantics of FlashMLA's sparse decode (commit 9241ae3):

    meta, _ = get_mla_metadata()
    out, lse = flash_mla_with_kvcache(q, k_cache, None, None, 512, meta, None,
                                      softmax_scale=s, is_fp8_kvcache=True, indices=indices)

q bf16 [b, s_q, h_q, 576] (h_q 64 or 128); k_cache [num_blocks, page_block_size, 1, 656] in
FlashMLA's V3.2 FP8 layout (any 1-byte dtype: float8_e4m3fn, uint8, int8); indices int32
[b, s_q, topk] (topk a multiple of 64) of token ids block * page_block_size + offset; optional
attn_sink fp32 [h_q]. Returns out bf16 [b, s_q, h_q, 512] and lse fp32 [b, h_q, s_q] (a
transposed view, as FlashMLA returns it). The scheduler metadata is made on the first call that
takes ``meta`` and reused while the shapes stay the same (FlashMLA's rule). topk_length and the
extra KV cache are not taken: FlashMLA's sm90 kernel refuses them for the V3.2 format.

Every argument is checked before anything touches a GPU, so the checks run on CPU tensors; the
library is loaded at the first launch. The library: $DUALOPS_FLASHMLA_SPARSE_PEER, else
.peers_sparse/libflashmla_sparse_peer.so at the repository root.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
from pathlib import Path
from typing import Optional

import torch

LIB_NAME = "libflashmla_sparse_peer.so"
ABI_VERSION = 1
D_QK, D_V, TOKEN_BYTES, TOPK_BLOCK = 576, 512, 656, 64
HEADS = (64, 128)


class PeerUnavailable(RuntimeError):
    """The library is missing or cannot be loaded."""


def library_path() -> Path:
    env = os.environ.get("DUALOPS_FLASHMLA_SPARSE_PEER")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / ".peers_sparse" / LIB_NAME


_LIB: dict = {}
_i, _i64, _f, _p = ctypes.c_int, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
_SIGNATURES = {
    "fmla_peer_abi_version": (_i, []),
    "fmla_peer_last_error": (ctypes.c_char_p, []),
    "fmla_peer_sched_meta_ints": (_i, []),
    "fmla_peer_num_sm_parts": (_i, [_i, _i, _i]),
    "fmla_peer_sched_meta": (_i, [_i, _i, _i, _i, _i, _p, _p, _p]),
    "fmla_peer_sparse_decode": (_i, [_i, _i, _i, _i, _i, _f,
                                     _p, _i64, _i64, _i64,
                                     _p, _i, _i, _i64, _i64,
                                     _p, _i64, _i64,
                                     _p,
                                     _p, _p, _i,
                                     _p, _p, _p, _p,
                                     _i, _p]),
    "fmla_peer_combine": (_i, [_i, _i, _i, _i, _p, _p, _p, _i, _p, _p, _p, _p, _p]),
}


def load(path=None) -> ctypes.CDLL:
    """The library (loaded once per path), its entry points typed."""
    path = Path(path) if path is not None else library_path()
    key = str(path)
    if key in _LIB:
        return _LIB[key]
    if not path.is_file():
        raise PeerUnavailable(f"{path} not found: build it with benchmarks/cuda/flashmla_sparse_peer/build.sh "
                              f"(see its README.md)")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise PeerUnavailable(f"cannot load {path}: {e}") from e
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is None:
            raise PeerUnavailable(f"{path} has no entry point {name}: rebuild it")
        fn.restype, fn.argtypes = res, args
    if lib.fmla_peer_abi_version() != ABI_VERSION:
        raise PeerUnavailable(f"{path} has C-ABI version {lib.fmla_peer_abi_version()}, this wrapper "
                              f"{ABI_VERSION}: rebuild it")
    _LIB[key] = lib
    return lib


def available(path=None) -> tuple[bool, str]:
    """(True, the library's path) or (False, why not)."""
    try:
        load(path)
    except PeerUnavailable as e:
        return False, str(e)
    return True, str(Path(path) if path is not None else library_path())


def _call(lib, name, *args) -> None:
    if getattr(lib, name)(*args) != 0:
        raise RuntimeError(f"FlashMLA peer {name}: {lib.fmla_peer_last_error().decode(errors='replace')}")


@dataclasses.dataclass
class SchedMeta:
    """FlashMLA's FlashMLASchedMeta for sparse decode: filled by the first call that takes it."""
    config: Optional[tuple] = None  # (b, s_q, h_q, page_block_size, topk, device, num_sm_parts)
    tile_scheduler_metadata: Optional[torch.Tensor] = None  # int32 [num_sm_parts, 8]
    num_splits: Optional[torch.Tensor] = None  # int32 [b + 1]


def get_mla_metadata(*args, **kwargs):
    """FlashMLA's current form: ``(an empty SchedMeta, None)``; arguments are accepted and unused."""
    return SchedMeta(), None


def num_sm_parts(num_sms: int, h_q: int, s_q: int) -> int:
    """FlashMLA's sm90 sparse decode split count, max(num_sms / s_q / (h_q / 64), 1)."""
    return max(num_sms // s_q // (h_q // 64), 1)


def _require(cond, msg):
    if not cond:
        raise ValueError(f"flashmla peer: {msg}")


def check_args(q, k_cache, indices, head_dim_v, causal, is_fp8_kvcache, attn_sink, unsupported):
    """FlashMLA's checks for this path; raises ValueError / TypeError / NotImplementedError. No GPU
    needed. Returns (b, s_q, h_q, topk)."""
    given = [n for n, v in unsupported.items() if v is not None]
    if given:
        raise NotImplementedError(f"flashmla peer: {', '.join(given)} not taken: FlashMLA's sm90 sparse decode "
                                  f"refuses them with the V3.2 cache (or this peer does not build them)")
    if indices is None:
        raise NotImplementedError("flashmla peer: sparse decode only (indices=...); FlashMLA's dense decode "
                                  "is not built into this peer")
    _require(is_fp8_kvcache, "is_fp8_kvcache must be True for sparse decode")
    _require(not causal, "causal must be False for sparse decode")
    _require(head_dim_v == D_V, f"head_dim_v must be {D_V}, got {head_dim_v}")
    for name, t in (("q", q), ("k_cache", k_cache), ("indices", indices)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flashmla peer: {name} must be a tensor, got {type(t).__name__}")
    _require(q.dim() == 4 and k_cache.dim() == 4 and indices.dim() == 3,
             f"q [b, s_q, h_q, 576], k_cache [blocks, page, 1, 656], indices [b, s_q, topk]; got "
             f"{list(q.shape)}, {list(k_cache.shape)}, {list(indices.shape)}")
    b, s_q, h_q, d_qk = q.shape
    topk = int(indices.shape[-1])
    if q.dtype != torch.bfloat16:
        raise TypeError(f"flashmla peer: q must be bfloat16, got {q.dtype}")
    if k_cache.element_size() != 1 or k_cache.dtype == torch.bool:
        raise TypeError(f"flashmla peer: k_cache must be a 1-byte view (float8_e4m3fn, uint8, int8), got {k_cache.dtype}")
    if indices.dtype != torch.int32:
        raise TypeError(f"flashmla peer: indices must be int32, got {indices.dtype}")
    _require(b > 0 and s_q > 0, f"empty batch or s_q: q {list(q.shape)}")
    _require(d_qk == D_QK, f"head_dim must be {D_QK} (the V3.2 format this peer builds), got {d_qk}")
    _require(h_q in HEADS, f"h_q must be 64 or 128 (FlashMLA's sm90 sparse decode), got {h_q}")
    _require(k_cache.shape[2] == 1, f"one KV head (k_cache.shape[2] == 1), got {k_cache.shape[2]}")
    _require(k_cache.shape[3] == TOKEN_BYTES, f"k_cache holds {TOKEN_BYTES} bytes per token, got {k_cache.shape[3]}")
    _require(k_cache.stride(3) == 1 and k_cache.stride(1) == TOKEN_BYTES,
             "each page block of k_cache must be contiguous (token stride 656 bytes)")
    _require(tuple(indices.shape[:2]) == (b, s_q), f"indices must be [{b}, {s_q}, topk], got {list(indices.shape)}")
    _require(topk > 0 and topk % TOPK_BLOCK == 0, f"topk must be a positive multiple of {TOPK_BLOCK}, got {topk}")
    _require(q.stride(3) == 1 and indices.stride(2) == 1, "q and indices need a contiguous last dim")
    _require(all(s % 8 == 0 for s in q.stride()[:3]) and q.data_ptr() % 16 == 0,
             "q's strides must be multiples of 8 elements and q 16-byte aligned (TMA)")
    for t in (q, k_cache, indices):
        _require(max(t.stride()) < 2**31, "a stride exceeds int32")
    if attn_sink is not None:
        _require(isinstance(attn_sink, torch.Tensor) and attn_sink.dtype == torch.float32
                 and tuple(attn_sink.shape) == (h_q,) and attn_sink.is_contiguous(),
                 f"attn_sink must be a contiguous float32 [{h_q}]")
    devs = {t.device for t in (q, k_cache, indices, attn_sink) if t is not None}
    _require(len(devs) == 1, f"all tensors on one device, got {sorted(map(str, devs))}")
    return b, s_q, h_q, topk


def flash_mla_with_kvcache(q, k_cache, block_table=None, cache_seqlens=None, head_dim_v=D_V,
                           tile_scheduler_metadata=None, num_splits=None, softmax_scale=None, causal=False,
                           is_fp8_kvcache=False, indices=None, attn_sink=None, extra_k_cache=None,
                           extra_indices_in_kvcache=None, topk_length=None, extra_topk_length=None, *,
                           lib_path=None):
    """FlashMLA's sparse decode (see the module docstring); block_table / cache_seqlens are
    ignored, as FlashMLA ignores them in sparse decode."""
    meta = tile_scheduler_metadata
    if meta is not None and not isinstance(meta, SchedMeta):
        raise TypeError(f"flashmla peer: tile_scheduler_metadata must be the SchedMeta of get_mla_metadata(), "
                        f"got {type(meta).__name__}")
    _require(num_splits is None, "num_splits must be None (FlashMLA's current interface)")
    b, s_q, h_q, topk = check_args(q, k_cache, indices, head_dim_v, causal, is_fp8_kvcache, attn_sink, {
        "extra_k_cache": extra_k_cache, "extra_indices_in_kvcache": extra_indices_in_kvcache,
        "topk_length": topk_length, "extra_topk_length": extra_topk_length})
    if softmax_scale is None:
        softmax_scale = D_QK ** -0.5
    dev = q.device
    if dev.type != "cuda":
        raise ValueError(f"flashmla peer: the tensors must be on a CUDA device, got {dev} (arguments checked "
                         f"up to the launch)")
    cap = torch.cuda.get_device_capability(dev)
    _require(cap == (9, 0), f"needs an sm_90 GPU (H100 / H200), {torch.cuda.get_device_name(dev)} is sm_{cap[0]}{cap[1]}")
    lib = load(lib_path)
    parts = num_sm_parts(torch.cuda.get_device_properties(dev).multi_processor_count, h_q, s_q)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    stream = ctypes.c_void_p(torch.cuda.current_stream(dev).cuda_stream)
    config = (b, s_q, h_q, int(k_cache.shape[1]), topk, index, parts)
    if meta is None:
        meta = SchedMeta()
    if meta.config is None:
        tsm = torch.empty(parts, lib.fmla_peer_sched_meta_ints(), dtype=torch.int32, device=dev)
        ns = torch.empty(b + 1, dtype=torch.int32, device=dev)
        _call(lib, "fmla_peer_sched_meta", index, b, s_q, topk, parts, tsm.data_ptr(), ns.data_ptr(), stream)
        meta.config, meta.tile_scheduler_metadata, meta.num_splits = config, tsm, ns
    else:
        _require(meta.config == config, f"tile_scheduler_metadata was made for (b, s_q, h_q, page, topk, device, "
                                        f"parts) = {meta.config}, this call is {config}")
    out = torch.empty(b, s_q, h_q, D_V, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(b, s_q, h_q, dtype=torch.float32, device=dev)
    lse_accum = torch.empty(b + parts, s_q, h_q, dtype=torch.float32, device=dev)
    o_accum = torch.empty(b + parts, s_q, h_q, D_V, dtype=torch.float32, device=dev)
    _call(lib, "fmla_peer_sparse_decode", index, b, s_q, h_q, topk, float(softmax_scale),
          q.data_ptr(), q.stride(0), q.stride(1), q.stride(2),
          k_cache.data_ptr(), int(k_cache.shape[0]), int(k_cache.shape[1]), k_cache.stride(0), k_cache.stride(1),
          indices.data_ptr(), indices.stride(0), indices.stride(1),
          attn_sink.data_ptr() if attn_sink is not None else None,
          meta.tile_scheduler_metadata.data_ptr(), meta.num_splits.data_ptr(), parts,
          lse_accum.data_ptr(), o_accum.data_ptr(), lse.data_ptr(), out.data_ptr(),
          1, stream)
    return out, lse.transpose(1, 2)

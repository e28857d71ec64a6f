"""The reference backend: dualops.reference (pure torch, fp32) on any device, outputs cast to the
op's output dtype. It is the ground truth every other backend is checked against."""
from __future__ import annotations

import torch

from .. import reference

NAME = "reference"


def status():
    return True, "pure torch, fp32 compute, any device"


def incre_flash_attention(q, k_cache, v_cache, *, plan=None, **kw):
    out, lse = reference.incre_flash_attention(q, k_cache, v_cache, **kw)
    return out.to(q.dtype), lse.float()


def mla_decode(q, kv_cache, block_table, cache_seqlens, *, plan=None, **kw):
    out, lse = reference.mla_decode(q, kv_cache, block_table, cache_seqlens, **kw)
    return out.to(q.dtype), lse.float()


def grouped_gemm(x, w, *, plan=None, out_dtype=torch.bfloat16, **kw):
    return reference.grouped_gemm(x, w, out_dtype=out_dtype, **kw).to(out_dtype)

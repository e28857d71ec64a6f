"""The public ops as ``torch.library`` custom ops (``torch.ops.dualops.*``), so they work under
``torch.compile(fullgraph=True)`` and CUDA-graph capture.

The real implementation (``<op>_impl``) validates against the schema, picks the backend and calls
it; the fake implementation validates too (so a compiled graph fails early with the same message)
and returns outputs of the right shape. The public wrappers in ``api.py`` call the custom op when
torch.compile traces them and ``<op>_impl`` directly in eager mode (the same code, without ~20 us
of dispatcher overhead per call, which matters next to a 10 us decode kernel).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import backends, dispatch, schema, tuning

LIB = "dualops"


def _validated(op: str, values: dict, validate: str) -> schema.Validated:
    if validate not in ("basic", "full"):
        raise ValueError(f"{op}: validate must be 'basic' or 'full', got {validate!r}")
    return schema.validate(op, values, full=(validate == "full"))


def _run(op: str, v: schema.Validated, backend: str, device, **kw):
    name = dispatch.select(op, backend, device, v.features)
    return backends.implementation(name, op)[0](**kw)


# ----------------------------------------------------------------------------- IFA


def ifa_backend_kwargs(v: schema.Validated) -> dict:
    """Normalise validated IFA args to the backend interface (docs/internals.md)."""
    return _ifa_kwargs(v.args, v.dims)


def _ifa_kwargs(a: dict, d: dict) -> dict:
    q = a["q"]
    B, S_q, H_q = d["B"], d["S_q"], d["H_q"]
    full = (B, H_q, S_q, d["S_kv"])
    kv_lens = a["kv_lens"]
    if kv_lens is None:
        kv_lens = torch.full((B,), d["S_max"], dtype=torch.int32, device=q.device)
    mask = a["atten_mask"]
    if mask is not None:
        mask = mask.expand(full)
    pse = a["pse_shift"]
    if pse is not None:
        pse = pse.to(torch.float32).expand(full)

    def f32(t):
        return None if t is None else t.to(torch.float32).contiguous()

    return dict(kv_lens=kv_lens, block_table=a["block_table"], softmax_scale=float(a["softmax_scale"]),
                causal=bool(a["causal"]), atten_mask=mask, pse_shift=pse,
                k_scale=f32(a["k_scale"]), v_scale=f32(a["v_scale"]),
                k_offset=f32(a["k_offset"]), v_offset=f32(a["v_offset"]))


def _ifa_values(q, k_cache, v_cache, kv_lens, block_table, softmax_scale, causal, atten_mask,
                pse_shift, k_scale, v_scale, k_offset, v_offset):
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, kv_lens=kv_lens, block_table=block_table,
                softmax_scale=softmax_scale, causal=causal, atten_mask=atten_mask,
                pse_shift=pse_shift, k_scale=k_scale, v_scale=v_scale, k_offset=k_offset,
                v_offset=v_offset)


# Eager IFA calls by signature (schema.signature: shapes, dtypes, devices, strides, scalar
# values) and backend name: what validation, dispatch and the backend's prepare step made of the
# first call with that signature (the defaults it filled, the dims, the prepared launch), so a
# decode loop's later calls go straight to the launch (BENCHMARKS.md "Host overhead of an eager
# call"). Backends without a prepare step are called as before.
_PREPARED: dict = {}
_PREPARED_MAX = 512
tuning.on_change(_PREPARED.clear)  # prepared launches hold plans made under the overrides in force


def incre_flash_attention_impl(
        q: Tensor, k_cache: Tensor, v_cache: Tensor, kv_lens: Optional[Tensor],
        block_table: Optional[Tensor], softmax_scale: Optional[float], causal: bool,
        atten_mask: Optional[Tensor], pse_shift: Optional[Tensor], k_scale: Optional[Tensor],
        v_scale: Optional[Tensor], k_offset: Optional[Tensor], v_offset: Optional[Tensor],
        backend: str, validate: str) -> tuple[Tensor, Tensor]:
    op = "incre_flash_attention"
    values = _ifa_values(q, k_cache, v_cache, kv_lens, block_table, softmax_scale, causal, atten_mask,
                         pse_shift, k_scale, v_scale, k_offset, v_offset)
    key = (schema.signature(op, values), backend) if validate == "basic" else (None, backend)
    hit = _PREPARED.get(key) if key[0] is not None else None
    if hit is not None:
        filled, dims, launch = hit
        return launch(q, k_cache, v_cache, **_ifa_kwargs({**values, **filled}, dims))
    v = _validated(op, values, validate)
    fn, prepare = backends.implementation(dispatch.select(op, backend, q.device, v.features), op)
    kw = ifa_backend_kwargs(v)
    if prepare is None:
        return fn(q=q, k_cache=k_cache, v_cache=v_cache, plan=None, **kw)
    launch = prepare(q, k_cache, v_cache, plan=None, **kw)
    if key[0] is not None:
        if len(_PREPARED) >= _PREPARED_MAX:
            _PREPARED.clear()
        _PREPARED[key] = (schema.filled_defaults(values, v), v.dims, launch)
    return launch(q, k_cache, v_cache, **kw)


incre_flash_attention = torch.library.custom_op(f"{LIB}::incre_flash_attention", mutates_args=())(incre_flash_attention_impl)


@incre_flash_attention.register_fake
def _(q, k_cache, v_cache, kv_lens, block_table, softmax_scale, causal, atten_mask, pse_shift,
      k_scale, v_scale, k_offset, v_offset, backend, validate):
    _validated("incre_flash_attention", _ifa_values(
        q, k_cache, v_cache, kv_lens, block_table, softmax_scale, causal, atten_mask, pse_shift,
        k_scale, v_scale, k_offset, v_offset), "basic")
    B, S_q, H_q, D = q.shape
    return q.new_empty((B, S_q, H_q, D)), q.new_empty((B, H_q, S_q), dtype=torch.float32)


# ----------------------------------------------------------------------------- MLA


def _mla_values(q, kv_cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal,
                kv_format, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                extra_topk_length):
    return dict(q=q, kv_cache=kv_cache, block_table=block_table, cache_seqlens=cache_seqlens,
                head_dim_v=head_dim_v, softmax_scale=softmax_scale, causal=causal,
                kv_format=kv_format, indices=indices, topk_length=topk_length,
                attn_sink=attn_sink, extra_kv_cache=extra_kv_cache, extra_indices=extra_indices,
                extra_topk_length=extra_topk_length)


def mla_decode_impl(
        q: Tensor, kv_cache: Tensor, block_table: Tensor, cache_seqlens: Tensor, head_dim_v: int,
        plan: Optional[Tensor], softmax_scale: Optional[float], causal: bool, kv_format: str,
        indices: Optional[Tensor], topk_length: Optional[Tensor], attn_sink: Optional[Tensor],
        extra_kv_cache: Optional[Tensor], extra_indices: Optional[Tensor],
        extra_topk_length: Optional[Tensor], backend: str, validate: str) -> tuple[Tensor, Tensor]:
    values = _mla_values(q, kv_cache, block_table, cache_seqlens, head_dim_v, softmax_scale,
                         causal, kv_format, indices, topk_length, attn_sink, extra_kv_cache,
                         extra_indices, extra_topk_length)
    v = _validated("mla_decode", values, validate)
    kw = {k: v.args[k] for k in values}
    if plan is not None:
        from .tiling.mla_decode import MlaPlan

        plan = MlaPlan.from_packed(plan)
    return _run("mla_decode", v, backend, q.device, plan=plan, **kw)


mla_decode = torch.library.custom_op(f"{LIB}::mla_decode", mutates_args=())(mla_decode_impl)


@mla_decode.register_fake
def _(q, kv_cache, block_table, cache_seqlens, head_dim_v, plan, softmax_scale, causal, kv_format,
      indices, topk_length, attn_sink, extra_kv_cache, extra_indices, extra_topk_length, backend,
      validate):
    _validated("mla_decode", _mla_values(
        q, kv_cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal, kv_format,
        indices, topk_length, attn_sink, extra_kv_cache, extra_indices, extra_topk_length), "basic")
    B, S_q, H_q, _ = q.shape
    return q.new_empty((B, S_q, H_q, head_dim_v)), q.new_empty((B, H_q, S_q), dtype=torch.float32)


# ----------------------------------------------------------------------------- grouped GEMM


def _gg_values(x, w, group_offsets, masked_m, scale_mode, x_scale, w_scale, out_dtype):
    return dict(x=x, w=w, group_offsets=group_offsets, masked_m=masked_m, scale_mode=scale_mode,
                x_scale=x_scale, w_scale=w_scale, out_dtype=out_dtype)


def grouped_gemm_impl(
        x: Tensor, w: Tensor, group_offsets: Optional[Tensor], masked_m: Optional[Tensor],
        scale_mode: str, x_scale: Optional[Tensor], w_scale: Optional[Tensor],
        out_dtype: torch.dtype, backend: str, validate: str) -> Tensor:
    values = _gg_values(x, w, group_offsets, masked_m, scale_mode, x_scale, w_scale, out_dtype)
    v = _validated("grouped_gemm", values, validate)
    return _run("grouped_gemm", v, backend, x.device, plan=None, **{k: v.args[k] for k in values})


grouped_gemm = torch.library.custom_op(f"{LIB}::grouped_gemm", mutates_args=())(grouped_gemm_impl)


@grouped_gemm.register_fake
def _(x, w, group_offsets, masked_m, scale_mode, x_scale, w_scale, out_dtype, backend, validate):
    _validated("grouped_gemm", _gg_values(x, w, group_offsets, masked_m, scale_mode, x_scale,
                                          w_scale, out_dtype), "basic")
    shape = (*x.shape[:-1], w.shape[1])
    return x.new_empty(shape, dtype=out_dtype)

"""torch_npu's attention and grouped matmul functions on dualops (any backend):

* ``npu_incre_flash_attention``: layouts BSH / BNSD / BSND, contiguous or paged caches,
  ``actual_seq_lengths``, ``antiquant_scale`` / ``antiquant_offset`` stacked as [2, ...] (keys,
  values), ``scale_value`` defaulting to 1.0 as in torch_npu;
* ``npu_fused_infer_attention_score``: its decode subset on ``dualops.incre_flash_attention``;
* ``npu_grouped_matmul``: on ``dualops.grouped_gemm`` (``_npu_grouped_matmul``).

Arguments of the peers that dualops does not implement raise NotImplementedError naming them.
"""
from __future__ import annotations

import torch

from .. import api
from ._npu_grouped_matmul import npu_grouped_matmul  # noqa: F401

_LAYOUTS = ("BSH", "BNSD", "BSND")


def _to_bsnd(t, layout, heads, name, who):
    if layout == "BSH":
        if t.dim() != 3 or t.shape[-1] % heads:
            raise ValueError(f"{who}: {name} must be [B, S, {heads} * D] for BSH, got {list(t.shape)}")
        return t.view(t.shape[0], t.shape[1], heads, t.shape[-1] // heads)
    if t.dim() != 4:
        raise ValueError(f"{who}: {name} must be 4-D for {layout}, got {list(t.shape)}")
    return t.transpose(1, 2) if layout == "BNSD" else t


def _paged_cache(t, heads, name, who):
    if t.dim() == 3:  # [blocknum, blocksize, H]
        return t.view(t.shape[0], t.shape[1], heads, t.shape[-1] // heads)
    if t.dim() == 4:  # [blocknum, N, blocksize, D]
        return t.transpose(1, 2)
    raise ValueError(f"{who}: paged {name} must be 3-D or 4-D, got {list(t.shape)}")


def _split_kv_param(p, h_kv, name, who):
    if p is None:
        return None, None
    if p.shape[0] != 2:
        raise ValueError(f"{who}: {name} must stack key and value params on dim 0 (size 2), got {list(p.shape)}")
    p = p.reshape(2, h_kv, -1)
    return p[0], p[1]


def _lengths(lens, device):
    if lens is None:
        return None
    if not isinstance(lens, torch.Tensor):
        return torch.tensor(list(lens), dtype=torch.int32, device=device)
    return lens.to(device=device, dtype=torch.int32)


def _mask(atten_mask):
    if atten_mask is None:
        return None
    atten_mask = atten_mask.to(torch.bool)
    if atten_mask.dim() == 2:      # [B, S_kv]
        return atten_mask[:, None, None, :]
    if atten_mask.dim() == 3:      # [B, S_q (or 1), S_kv]
        return atten_mask[:, None, :, :]
    return atten_mask


def _attend(who, query, key, value, *, layout, num_heads, h_kv, block_table, kv_lens, scale, atten_mask,
            pse_shift, k_scale, v_scale, k_off, v_off, return_lse, backend):
    if layout not in _LAYOUTS:
        raise ValueError(f"{who}: input_layout must be BSH, BNSD or BSND, got {layout!r}")
    q = _to_bsnd(query, layout, num_heads, "query", who)
    if block_table is not None:
        k, v = _paged_cache(key, h_kv, "key", who), _paged_cache(value, h_kv, "value", who)
    else:
        k, v = _to_bsnd(key, layout, h_kv, "key", who), _to_bsnd(value, layout, h_kv, "value", who)
    res = api.incre_flash_attention(q, k, v, kv_lens=_lengths(kv_lens, query.device), block_table=block_table,
                                    softmax_scale=float(scale), atten_mask=_mask(atten_mask), pse_shift=pse_shift,
                                    k_scale=k_scale, v_scale=v_scale, k_offset=k_off, v_offset=v_off,
                                    return_lse=return_lse, backend=backend)
    out, lse = res if return_lse else (res, None)
    if layout == "BSH":
        out = out.reshape(out.shape[0], out.shape[1], -1)
    elif layout == "BNSD":
        out = out.transpose(1, 2)
    return out, lse


def npu_incre_flash_attention(query, key, value, *, padding_mask=None, pse_shift=None,
                              atten_mask=None, actual_seq_lengths=None, antiquant_scale=None,
                              antiquant_offset=None, block_table=None, num_heads=1,
                              scale_value=1.0, input_layout="BSH", num_key_value_heads=0,
                              block_size=0, inner_precise=1, backend=None):
    who = "npu_incre_flash_attention"
    if padding_mask is not None:
        raise NotImplementedError(f"{who}: padding_mask is deprecated in torch_npu and not supported")
    h_kv = num_key_value_heads or num_heads
    k_scale, v_scale = _split_kv_param(antiquant_scale, h_kv, "antiquant_scale", who)
    k_off, v_off = _split_kv_param(antiquant_offset, h_kv, "antiquant_offset", who)
    return _attend(who, query, key, value, layout=input_layout, num_heads=num_heads, h_kv=h_kv,
                   block_table=block_table, kv_lens=actual_seq_lengths, scale=scale_value, atten_mask=atten_mask,
                   pse_shift=pse_shift, k_scale=k_scale, v_scale=v_scale, k_off=k_off, v_off=v_off,
                   return_lse=False, backend=backend)[0]


# npu_fused_infer_attention_score arguments outside the decode subset: must stay at these values.
_FIA_UNSUPPORTED = {
    "dequant_scale1": None, "quant_scale1": None, "dequant_scale2": None, "quant_scale2": None,
    "quant_offset2": None, "query_padding_size": None, "kv_padding_size": None, "key_shared_prefix": None,
    "value_shared_prefix": None, "actual_shared_prefix_len": None, "query_rope": None, "key_rope": None,
    "key_rope_antiquant_scale": None, "pre_tokens": 2147483647, "next_tokens": 2147483647,
    "sparse_mode": 0, "antiquant_mode": 0, "key_antiquant_mode": 0, "value_antiquant_mode": 0}


def npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None,
                                    actual_seq_lengths=None, actual_seq_lengths_kv=None, antiquant_scale=None,
                                    antiquant_offset=None, block_table=None, key_antiquant_scale=None,
                                    key_antiquant_offset=None, value_antiquant_scale=None,
                                    value_antiquant_offset=None, num_heads=1, scale=None, scale_value=None,
                                    input_layout="BSH", num_key_value_heads=0, block_size=0, inner_precise=0,
                                    softmax_lse_flag=False, backend=None, **others):
    """torch_npu's fused inference attention, decode subset: layouts BSH / BNSD / BSND (key and
    value in the query's layout, or paged [blocknum, blocksize, H] / [blocknum, N, blocksize, D]
    with ``block_table``), ``num_heads``, ``num_key_value_heads``, ``scale`` (``scale_value`` in
    older torch_npu; default 1.0), ``actual_seq_lengths_kv``, ``atten_mask`` (True / 1 = masked),
    ``pse_shift``, per-channel antiquant (``antiquant_scale`` / ``antiquant_offset`` stacked [2, ...]
    for keys and values, or ``key_`` / ``value_antiquant_scale`` / ``_offset``), ``block_size``,
    ``inner_precise`` (a precision hint; dualops accumulates in fp32 either way). Returns
    ``(attention_out, softmax_lse)``: out in the query's layout; lse fp32 [B, N, S_q, 1] with
    ``softmax_lse_flag=True``, else a [1] zero tensor, as torch_npu. ``actual_seq_lengths``
    (query lengths) must be None or S_q for every request; quantized outputs, shared prefixes,
    rope splits, sparse modes and per-token antiquant raise NotImplementedError naming them."""
    who = "npu_fused_infer_attention_score"
    for name, value_ in others.items():
        if name not in _FIA_UNSUPPORTED:
            raise TypeError(f"{who}: unexpected argument {name!r}")
        if value_ is not None and value_ != _FIA_UNSUPPORTED[name]:
            raise NotImplementedError(f"{who}: {name}={value_!r} is not supported by dualops "
                                      f"(decode subset; leave it at {_FIA_UNSUPPORTED[name]!r})")
    if scale is not None and scale_value is not None and float(scale) != float(scale_value):
        raise ValueError(f"{who}: scale ({scale}) and scale_value ({scale_value}) disagree; pass one")
    key = key[0] if isinstance(key, (list, tuple)) and len(key) == 1 else key
    value = value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value
    h_kv = num_key_value_heads or num_heads
    s_q = query.shape[1] if input_layout != "BNSD" else query.shape[2]
    if actual_seq_lengths is not None:
        lens = actual_seq_lengths.tolist() if isinstance(actual_seq_lengths, torch.Tensor) else list(actual_seq_lengths)
        if any(int(n) != s_q for n in lens):
            raise NotImplementedError(f"{who}: actual_seq_lengths (query lengths) other than S_q = {s_q} are not "
                                      f"supported (decode subset), got {lens}")
    q8 = {}
    q8["k_scale"], q8["v_scale"] = _split_kv_param(antiquant_scale, h_kv, "antiquant_scale", who)
    q8["k_off"], q8["v_off"] = _split_kv_param(antiquant_offset, h_kv, "antiquant_offset", who)
    for name, t, slot in (("key_antiquant_scale", key_antiquant_scale, "k_scale"),
                          ("value_antiquant_scale", value_antiquant_scale, "v_scale"),
                          ("key_antiquant_offset", key_antiquant_offset, "k_off"),
                          ("value_antiquant_offset", value_antiquant_offset, "v_off")):
        if t is not None:
            if antiquant_scale is not None or antiquant_offset is not None:
                raise ValueError(f"{who}: pass {name} or antiquant_scale / antiquant_offset, not both")
            q8[slot] = t.reshape(h_kv, -1)
    if scale is None:
        scale = 1.0 if scale_value is None else scale_value
    out, lse = _attend(who, query, key, value, layout=input_layout, num_heads=num_heads, h_kv=h_kv,
                       block_table=block_table, kv_lens=actual_seq_lengths_kv,
                       scale=scale, atten_mask=atten_mask, pse_shift=pse_shift, **q8,
                       return_lse=bool(softmax_lse_flag), backend=backend)
    if softmax_lse_flag:
        return out, lse.unsqueeze(-1)
    return out, torch.zeros(1, dtype=torch.float32, device=query.device)

"""torch_npu's ``npu_incre_flash_attention`` signature on dualops (any backend): layouts BSH / BNSD /
BSND, contiguous or paged caches, ``actual_seq_lengths``, ``antiquant_scale``/``antiquant_offset``
stacked as [2, ...] (keys, values), ``scale_value`` defaulting to 1.0 as in torch_npu."""
from __future__ import annotations

import torch

from .. import api


def _to_bsnd(t, layout, heads, name):
    if layout == "BSH":
        if t.dim() != 3 or t.shape[-1] % heads:
            raise ValueError(f"npu_incre_flash_attention: {name} must be [B, S, {heads} * D] for BSH, got {list(t.shape)}")
        return t.view(t.shape[0], t.shape[1], heads, t.shape[-1] // heads)
    if layout == "BNSD":
        return t.transpose(1, 2)
    if layout == "BSND":
        return t
    raise ValueError(f"npu_incre_flash_attention: input_layout must be BSH, BNSD or BSND, got {layout!r}")


def _paged_cache(t, heads, name):
    if t.dim() == 3:  # [blocknum, blocksize, H]
        return t.view(t.shape[0], t.shape[1], heads, t.shape[-1] // heads)
    if t.dim() == 4:  # [blocknum, N, blocksize, D]
        return t.transpose(1, 2)
    raise ValueError(f"npu_incre_flash_attention: paged {name} must be 3-D or 4-D, got {list(t.shape)}")


def _split_kv_param(p, h_kv, name):
    if p is None:
        return None, None
    if p.shape[0] != 2:
        raise ValueError(f"npu_incre_flash_attention: {name} must stack key and value params on dim 0 (size 2), got {list(p.shape)}")
    p = p.reshape(2, h_kv, -1)
    return p[0], p[1]


def npu_incre_flash_attention(query, key, value, *, padding_mask=None, pse_shift=None,
                              atten_mask=None, actual_seq_lengths=None, antiquant_scale=None,
                              antiquant_offset=None, block_table=None, num_heads=1,
                              scale_value=1.0, input_layout="BSH", num_key_value_heads=0,
                              block_size=0, inner_precise=1, backend=None):
    if padding_mask is not None:
        raise NotImplementedError("npu_incre_flash_attention: padding_mask is deprecated in torch_npu and not supported")
    h_kv = num_key_value_heads or num_heads
    q = _to_bsnd(query, input_layout, num_heads, "query")
    if block_table is not None:
        k, v = _paged_cache(key, h_kv, "key"), _paged_cache(value, h_kv, "value")
    else:
        k, v = _to_bsnd(key, input_layout, h_kv, "key"), _to_bsnd(value, input_layout, h_kv, "value")
    kv_lens = actual_seq_lengths
    if kv_lens is not None and not isinstance(kv_lens, torch.Tensor):
        kv_lens = torch.tensor(list(kv_lens), dtype=torch.int32, device=query.device)
    elif kv_lens is not None:
        kv_lens = kv_lens.to(torch.int32)
    if atten_mask is not None:
        atten_mask = atten_mask.to(torch.bool)
        if atten_mask.dim() == 2:      # [B, S_kv]
            atten_mask = atten_mask[:, None, None, :]
        elif atten_mask.dim() == 3:    # [B, 1, S_kv]
            atten_mask = atten_mask[:, None, :, :]
    k_scale, v_scale = _split_kv_param(antiquant_scale, h_kv, "antiquant_scale")
    k_off, v_off = _split_kv_param(antiquant_offset, h_kv, "antiquant_offset")
    out = api.incre_flash_attention(q, k, v, kv_lens=kv_lens, block_table=block_table,
                                    softmax_scale=float(scale_value), atten_mask=atten_mask,
                                    pse_shift=pse_shift, k_scale=k_scale, v_scale=v_scale,
                                    k_offset=k_off, v_offset=v_off, backend=backend)
    if input_layout == "BSH":
        return out.reshape(out.shape[0], out.shape[1], -1)
    if input_layout == "BNSD":
        return out.transpose(1, 2)
    return out

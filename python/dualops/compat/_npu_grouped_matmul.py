"""torch_npu's ``npu_grouped_matmul`` on ``dualops.grouped_gemm`` (used by ``compat.torch_npu``).

Supported: the float path (x and weight bf16 / fp16, optional bias) and int8 w8a8 (x and weight
int8, ``scale`` per output channel of each group, ``per_token_scale`` per row of x, optional int32
bias, ``output_dtype`` bf16 / fp16); x as one tensor split on M by ``group_list``
(``group_list_type`` 0: cumulative row ends, 1: rows per group) or as one tensor per group;
weight as one [K, N] tensor per group or one [G, K, N] tensor; ``split_item`` 0 / 1 (one output
per group) or 2 / 3 (one output, groups stacked on M); ``group_type`` -1 or 0.
"""
from __future__ import annotations

import torch

from .. import api

_UNSUPPORTED = ("offset", "antiquant_scale", "antiquant_offset", "activation_input",
                "activation_quant_scale", "activation_quant_offset")
_FLOAT = (torch.bfloat16, torch.float16)


def _as_list(t):
    return list(t) if isinstance(t, (list, tuple)) else [t]


def _weights(weight, who):
    ws = _as_list(weight)
    if len(ws) == 1 and ws[0].dim() == 3:
        ws = list(ws[0].unbind(0))
    if any(w.dim() != 2 for w in ws):
        raise ValueError(f"{who}: weight must be [K, N] tensors (one per group) or one [G, K, N] tensor, "
                         f"got {[list(w.shape) for w in _as_list(weight)]}")
    return ws


def _group_counts(group_list, group_list_type, G, M, dev, who):
    if group_list_type not in (0, 1):
        raise NotImplementedError(f"{who}: group_list_type must be 0 (cumulative) or 1 (counts), got {group_list_type!r}")
    gl = group_list if isinstance(group_list, torch.Tensor) else torch.tensor(list(group_list))
    gl = gl.to(device=dev, dtype=torch.int64).reshape(-1)
    if gl.numel() != G:
        raise ValueError(f"{who}: group_list must hold {G} values (one per group), got {gl.numel()}")
    ends = gl if group_list_type == 0 else torch.cumsum(gl, 0)
    return torch.cat([ends.new_zeros(1), ends]).clamp(0, M)


def _per_group(t, G, name, who):
    """A per-group parameter (a list of G tensors or one stacked tensor) as [G, ...]."""
    if t is None:
        return None
    ts = _as_list(t)
    if len(ts) == 1 and ts[0].dim() >= 2 and ts[0].shape[0] == G:
        return ts[0]
    if len(ts) != G:
        raise ValueError(f"{who}: {name} must hold one tensor per group ({G}), got {len(ts)}")
    return torch.stack([x.reshape(-1) for x in ts])


def _scale_values(scale):
    """scale as floats: int64 scales carry the float32 bits in their low 32 bits (torch_npu's
    npu_trans_quant_param encoding)."""
    if scale.dtype == torch.int64:
        return (scale & 0xFFFFFFFF).to(torch.int32).view(torch.float32)
    return scale.to(torch.float32)


def npu_grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None,
                       antiquant_offset=None, per_token_scale=None, group_list=None, activation_input=None,
                       activation_quant_scale=None, activation_quant_offset=None, split_item=0, group_type=None,
                       group_list_type=0, act_type=0, output_dtype=None, tuning_config=None, backend=None):
    """torch_npu's grouped matmul: y_g = x_g @ weight_g (+ bias_g), see the module doc. Returns a
    list of tensors like torch_npu."""
    who = "npu_grouped_matmul"
    extra = {"offset": offset, "antiquant_scale": antiquant_scale, "antiquant_offset": antiquant_offset,
             "activation_input": activation_input, "activation_quant_scale": activation_quant_scale,
             "activation_quant_offset": activation_quant_offset}
    given = [n for n in _UNSUPPORTED if extra[n] is not None and not (isinstance(extra[n], (list, tuple)) and not extra[n])]
    if given:
        raise NotImplementedError(f"{who}: {', '.join(given)} not supported by dualops (float and int8 w8a8 paths)")
    if act_type != 0:
        raise NotImplementedError(f"{who}: act_type={act_type!r} (a fused activation) is not supported; use 0")
    if group_type not in (None, -1, 0):
        raise NotImplementedError(f"{who}: group_type={group_type!r} is not supported (-1: none, 0: split on M)")
    if split_item not in (0, 1, 2, 3):
        raise ValueError(f"{who}: split_item must be 0, 1, 2 or 3, got {split_item!r}")
    ws = _weights(weight, who)
    xs = _as_list(x)
    G, K, N = len(ws), ws[0].shape[0], ws[0].shape[1]
    if any(tuple(w.shape) != (K, N) for w in ws):
        raise ValueError(f"{who}: every weight must be [K, N] = [{K}, {N}] (dualops groups share shapes), "
                         f"got {[list(w.shape) for w in ws]}")
    dev = xs[0].device
    if len(xs) == 1 and (group_list is not None or G == 1):
        x2 = xs[0].reshape(-1, xs[0].shape[-1])
        offs = _group_counts(group_list if group_list is not None else [x2.shape[0]], group_list_type, G,
                             x2.shape[0], dev, who)
        shapes = None
    elif len(xs) == G:
        if group_list is not None:
            raise ValueError(f"{who}: group_list splits a single x; got {G} x tensors and a group_list")
        shapes = [t.shape[:-1] for t in xs]
        rows = [t.reshape(-1, t.shape[-1]) for t in xs]
        x2 = torch.cat(rows)
        offs = torch.tensor([0] + [r.shape[0] for r in rows], device=dev).cumsum(0)
    else:
        raise ValueError(f"{who}: x must be one tensor with group_list, or one tensor per group ({G}), got {len(xs)}")
    if x2.shape[1] != K:
        raise ValueError(f"{who}: x's last dim ({x2.shape[1]}) must equal weight's K ({K})")
    w = torch.stack(ws).transpose(1, 2).contiguous()  # [G, N, K], dualops' NT layout
    M = x2.shape[0]
    bias_g = _per_group(bias, G, "bias", who)
    if x2.dtype in _FLOAT:
        if scale is not None or per_token_scale is not None:
            raise ValueError(f"{who}: scale / per_token_scale belong to the int8 path; x is {x2.dtype}")
        out_dtype = output_dtype or x2.dtype
        if out_dtype not in _FLOAT:
            raise NotImplementedError(f"{who}: output_dtype={out_dtype} on the float path (bf16 / fp16 supported)")
        y = api.grouped_gemm(x2.contiguous(), w, group_offsets=offs.to(torch.int32),
                             out_dtype=torch.float32 if bias_g is not None else out_dtype, backend=backend)
    elif x2.dtype == torch.int8:
        if scale is None:
            raise ValueError(f"{who}: the int8 path needs scale (per output channel of each group)")
        out_dtype = output_dtype or torch.bfloat16
        if out_dtype not in _FLOAT:
            raise NotImplementedError(f"{who}: output_dtype={out_dtype} on the int8 path (bf16 / fp16 supported; "
                                      f"int8 outputs are not)")
        ws_ = _scale_values(_per_group(scale, G, "scale", who)).reshape(G, N)
        pts = torch.cat([t.reshape(-1) for t in _as_list(per_token_scale)]).to(torch.float32) \
            if per_token_scale is not None else torch.ones(M, dtype=torch.float32, device=dev)
        if pts.numel() != M:
            raise ValueError(f"{who}: per_token_scale must hold one value per row of x ({M}), got {pts.numel()}")
        y = api.grouped_gemm(x2.contiguous(), w, group_offsets=offs.to(torch.int32), scale_mode="rowwise",
                             x_scale=pts, w_scale=ws_, out_dtype=torch.float32 if bias_g is not None else out_dtype,
                             backend=backend)
        if bias_g is not None:  # int32 bias joins the accumulator before the scales
            bias_g = bias_g.to(torch.float32) * ws_
            row_group = torch.searchsorted(offs[1:].contiguous(), torch.arange(M, device=dev), right=True)
            y = y + bias_g[row_group.clamp(max=G - 1)] * pts[:, None] * (row_group < G)[:, None]
            bias_g = None
    else:
        raise NotImplementedError(f"{who}: x dtype {x2.dtype} is not supported (bf16 / fp16 / int8)")
    if bias_g is not None:
        row_group = torch.searchsorted(offs[1:].contiguous(), torch.arange(M, device=dev), right=True)
        y = y + bias_g.to(torch.float32)[row_group.clamp(max=G - 1)] * (row_group < G)[:, None]
    y = y.to(out_dtype)
    if split_item in (2, 3):
        return [y]
    if shapes is not None:
        return [part.reshape(*shape, N) for part, shape in zip(torch.split(y, [int(s.numel()) for s in shapes]), shapes)]
    bounds = offs.tolist()
    return [y[bounds[g]:bounds[g + 1]] for g in range(G)]

"""hpc-ops' grouped GEMM signatures on dualops (any backend, through ``dualops.grouped_gemm``):

``group_gemm_pertensor_fp8(x, weight, seqlens, cu_seqlens, y_scale, num_seq_per_group_avg=32,
output=None, tma_desc=None)`` and ``group_gemm_blockwise_fp8(x, weight, seqlens, cu_seqlens,
x_scale, w_scale, num_seq_per_group_avg=32, output=None, tma_desc=None)``, with hpc-ops' layouts:
x fp8 [total_seq, K], weight fp8 [G, N, K], seqlens int32 [G], cu_seqlens int32 [G + 1]
(group g owns rows cu_seqlens[g] .. cu_seqlens[g] + seqlens[g]), output bf16 [total_seq, N].
Per-tensor: y_scale fp32 [G] (one dequant scale per group). Blockwise: x_scale fp32
[K / 128, total_seq_pad] (transposed; group g's columns start at the sum of the earlier groups'
seqlens rounded up to hpc-ops' tile M, chosen from num_seq_per_group_avg: 16 / 32 / 48 / 64),
w_scale fp32 [G, N / 128, KB'] with KB' >= ceil(K / 128) (hpc-ops pads it to a multiple of 4).
``tma_desc`` / ``task_map_workspace`` (hpc-ops' cached descriptors) are accepted and ignored.
The scale re-layout runs on the device (no host read), so calls stay capturable.
"""
from __future__ import annotations

import torch

from .. import api

BLOCK = 128


def hpc_tile_m(num_seq_per_group_avg: int) -> int:
    """hpc-ops' tile M by average rows per group (the padding unit of blockwise x_scale)."""
    avg = int(num_seq_per_group_avg)
    return 16 if avg <= 16 else 32 if avg <= 32 else 48 if avg <= 48 else 64


def _offsets(x, seqlens, cu_seqlens, G):
    for name, t, n in (("seqlens", seqlens, G), ("cu_seqlens", cu_seqlens, G + 1)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.shape[0] != n:
            got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"hpc grouped GEMM: {name} must be a 1-D int32 tensor of {n} values "
                             f"(G = weight.shape[0] = {G}), got {got}")
    return cu_seqlens.to(device=x.device, dtype=torch.int32).contiguous()


def _finish(y, output):
    if output is None:
        return y
    if tuple(output.shape) != tuple(y.shape) or output.dtype != torch.bfloat16:
        raise ValueError(f"hpc grouped GEMM: output must be bf16 {list(y.shape)}, got "
                         f"{output.dtype} {list(output.shape)}")
    output.copy_(y)
    return output


def _check_xw(x, weight):
    if x.dim() != 2 or weight.dim() != 3 or x.shape[1] != weight.shape[2]:
        raise ValueError(f"hpc grouped GEMM: x must be [total_seq, K] and weight [G, N, K], got "
                         f"{list(x.shape)} and {list(weight.shape)}")


def group_gemm_pertensor_fp8(x, weight, seqlens, cu_seqlens, y_scale, num_seq_per_group_avg=32,
                             output=None, tma_desc=None, task_map_workspace=None, *, backend=None):
    _check_xw(x, weight)
    G = weight.shape[0]
    offs = _offsets(x, seqlens, cu_seqlens, G)
    y = api.grouped_gemm(x, weight, group_offsets=offs, scale_mode="per_tensor",
                         w_scale=y_scale.to(torch.float32).reshape(-1), out_dtype=torch.bfloat16,
                         backend=backend)
    return _finish(y, output)


def blockwise_x_scale(x_scale, cu_seqlens, seqlens, total_seq: int, num_seq_per_group_avg: int):
    """hpc-ops' [KB, total_seq_pad] x_scale (groups padded to tile M) -> dualops' [total_seq, KB]."""
    tile = hpc_tile_m(num_seq_per_group_avg)
    dev = x_scale.device
    seq = seqlens.to(device=dev, dtype=torch.int64)
    cu = cu_seqlens.to(device=dev, dtype=torch.int64)
    padded = (seq + tile - 1) // tile * tile
    pstart = torch.cumsum(padded, 0) - padded
    rows = torch.arange(total_seq, device=dev)
    g = torch.searchsorted(cu[1:].contiguous(), rows, right=True).clamp_(max=seq.numel() - 1)
    cols = (pstart[g] + rows - cu[g]).clamp_(0, max(0, x_scale.shape[1] - 1))
    return x_scale.to(torch.float32).index_select(1, cols).t().contiguous()


def group_gemm_blockwise_fp8(x, weight, seqlens, cu_seqlens, x_scale, w_scale, num_seq_per_group_avg=32,
                             output=None, tma_desc=None, task_map_workspace=None, *, backend=None):
    _check_xw(x, weight)
    G, N, K = weight.shape
    kb, nb = -(-K // BLOCK), -(-N // BLOCK)
    offs = _offsets(x, seqlens, cu_seqlens, G)
    if x_scale.dim() != 2 or x_scale.shape[0] != kb:
        raise ValueError(f"group_gemm_blockwise_fp8: x_scale must be [K / 128 = {kb}, total_seq_pad], "
                         f"got {list(x_scale.shape)}")
    if w_scale.dim() != 3 or w_scale.shape[0] != G or w_scale.shape[1] != nb or w_scale.shape[2] < kb:
        raise ValueError(f"group_gemm_blockwise_fp8: w_scale must be [G = {G}, N / 128 = {nb}, >= {kb}], "
                         f"got {list(w_scale.shape)}")
    xs = blockwise_x_scale(x_scale, cu_seqlens, seqlens, x.shape[0], num_seq_per_group_avg)
    ws = w_scale[:, :, :kb].to(torch.float32).contiguous()
    y = api.grouped_gemm(x, weight, group_offsets=offs, scale_mode="blockwise", x_scale=xs,
                         w_scale=ws, out_dtype=torch.bfloat16, backend=backend)
    return _finish(y, output)


__all__ = ["group_gemm_pertensor_fp8", "group_gemm_blockwise_fp8", "blockwise_x_scale", "hpc_tile_m"]

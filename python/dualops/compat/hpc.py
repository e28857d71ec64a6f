"""hpc-ops' grouped GEMM functions (``hpc.group_gemm``, Tencent/hpc-ops at 6e2eced) on dualops, any
backend, through ``dualops.grouped_gemm``:

``group_gemm_pertensor_fp8(x, weight, seqlens, cu_seqlens, y_scale, num_seq_per_group_avg=32,
output=None, tma_desc=None, task_map_workspace=None)``,
``group_gemm_blockwise_fp8(x, weight, seqlens, cu_seqlens, x_scale, w_scale, num_seq_per_group_avg=32,
output=None, tma_desc=None, task_map_workspace=None)`` and
``reformat_x_scale(x_scale, seqlens, cu_seqlens, num_seq_per_group_avg, output=None)``.

Layouts as hpc-ops': x fp8 [M, K], weight fp8 [G, N, K], seqlens int32 [G], cu_seqlens int32
[G + 1]; group g owns rows ``cu_seqlens[g] .. cu_seqlens[g] + seqlens[g]`` of x and of the bf16
output [M, N]. Rows between groups (the gapped layout, e.g. DeepEP's fixed slot per expert) are
neither computed nor written: with ``output=`` they keep their values, a new output has them 0.
Per-tensor: y_scale fp32 [G]. Blockwise: x_scale fp32 [K / 128, M_pad] (transposed), group g's
columns starting at the sum of the earlier groups' seqlens each rounded up to the kernel's tile M,
which hpc-ops picks from num_seq_per_group_avg (``gemm_tile_m``); w_scale fp32 [G, N / 128, KB']
with KB' >= K / 128 (hpc-ops pads it to a multiple of 4). ``reformat_x_scale`` turns a row-major
[M, K / 128] x_scale of the gapped layout into that transposed, tile-padded one (its own tile M:
``reformat_tile_m``). ``tma_desc`` / ``task_map_workspace`` (hpc-ops' cached descriptors) are
accepted and not used. Everything runs on the device without a host read (CUDA-graph capturable).
"""
from __future__ import annotations

import torch

from .. import api

BLOCK = 128


def gemm_tile_m(num_seq_per_group_avg: int) -> int:
    """The tile M of hpc-ops' grouped GEMM kernels by average rows per group: the unit by which
    each group's x_scale columns are padded."""
    avg = int(num_seq_per_group_avg)
    for bound, tile in ((8, 8), (16, 16), (32, 32), (48, 48), (64, 64), (96, 48), (128, 32), (144, 48)):
        if avg <= bound:
            return tile
    return 64


def reformat_tile_m(num_seq_per_group_avg: int) -> int:
    """The tile M of hpc-ops' reformat_x_scale (equal to gemm_tile_m up to an average of 64 rows)."""
    avg = int(num_seq_per_group_avg)
    for bound in (8, 16, 32, 48):
        if avg <= bound:
            return bound
    return 64


hpc_tile_m = gemm_tile_m


def _check_groups(seqlens, cu_seqlens, G, who):
    for name, t, n in (("seqlens", seqlens, G), ("cu_seqlens", cu_seqlens, G + 1)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.shape[0] != n or t.dtype.is_floating_point:
            got = f"{t.dtype} {list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{who}: {name} must be a 1-D int32 tensor of {n} values (G = {G}), got {got}")


def _rows(seqlens, cu_seqlens, M: int, dev, tile: int | None = None):
    """Row r of the packed (gap-free) order: (its source row in the gapped layout, whether it
    is a row of some group, the packed group offsets [G + 1], its padded x_scale column)."""
    seq = seqlens.to(device=dev, dtype=torch.int64).clamp(min=0)
    cu = cu_seqlens.to(device=dev, dtype=torch.int64)
    G = seq.numel()
    offs = torch.zeros(G + 1, dtype=torch.int64, device=dev)
    offs[1:] = torch.cumsum(seq, 0).clamp(max=M)
    r = torch.arange(M, device=dev)
    g = torch.searchsorted(offs[1:].contiguous(), r, right=True).clamp(max=G - 1)
    local = r - offs[g]
    src = cu[g] + local
    valid = (r < offs[G]) & (src >= 0) & (src < M)
    src = torch.where(valid, src, torch.zeros_like(src))
    col = None
    if tile is not None:
        padded = (seq + tile - 1) // tile * tile
        col = (torch.cumsum(padded, 0) - padded)[g] + local
    return src, valid, offs.to(torch.int32), col


def _scatter(y_packed, src, valid, M, output, who):
    N = y_packed.shape[1]
    if output is not None and (tuple(output.shape) != (M, N) or output.dtype != torch.bfloat16):
        raise ValueError(f"{who}: output must be bf16 [{M}, {N}], got {output.dtype} {list(output.shape)}")
    buf = torch.zeros(M + 1, N, dtype=torch.bfloat16, device=y_packed.device)
    if output is not None:
        buf[:M] = output
    buf.index_copy_(0, torch.where(valid, src, torch.full_like(src, M)), y_packed.to(torch.bfloat16))
    if output is None:
        return buf[:M]
    output.copy_(buf[:M])
    return output


def _check_xw(x, weight, who):
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor) or x.dim() != 2 \
            or weight.dim() != 3 or x.shape[1] != weight.shape[2]:
        got = [list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in (x, weight)]
        raise ValueError(f"{who}: x must be [total_seq, K] and weight [G, N, K], got {got[0]} and {got[1]}")


def _packed_x(x, src):
    return x.view(torch.uint8).index_select(0, src).view(x.dtype) if x.element_size() == 1 else x.index_select(0, src)


def group_gemm_pertensor_fp8(x, weight, seqlens, cu_seqlens, y_scale, num_seq_per_group_avg=32,
                             output=None, tma_desc=None, task_map_workspace=None, *, backend=None):
    who = "group_gemm_pertensor_fp8"
    _check_xw(x, weight, who)
    G = weight.shape[0]
    _check_groups(seqlens, cu_seqlens, G, who)
    if not isinstance(y_scale, torch.Tensor) or y_scale.numel() != G:
        raise ValueError(f"{who}: y_scale must be a float32 tensor of G = {G} values, got "
                         f"{list(y_scale.shape) if isinstance(y_scale, torch.Tensor) else type(y_scale).__name__}")
    M = x.shape[0]
    src, valid, offs, _ = _rows(seqlens, cu_seqlens, M, x.device)
    y = api.grouped_gemm(_packed_x(x, src), weight, group_offsets=offs, scale_mode="per_tensor",
                         w_scale=y_scale.to(torch.float32).reshape(-1), out_dtype=torch.bfloat16, backend=backend)
    return _scatter(y, src, valid, M, output, who)


def group_gemm_blockwise_fp8(x, weight, seqlens, cu_seqlens, x_scale, w_scale, num_seq_per_group_avg=32,
                             output=None, tma_desc=None, task_map_workspace=None, *, backend=None):
    who = "group_gemm_blockwise_fp8"
    _check_xw(x, weight, who)
    G, N, K = weight.shape
    kb, nb = -(-K // BLOCK), -(-N // BLOCK)
    _check_groups(seqlens, cu_seqlens, G, who)
    if not isinstance(x_scale, torch.Tensor) or x_scale.dim() != 2 or x_scale.shape[0] != kb:
        raise ValueError(f"{who}: x_scale must be [K / 128 = {kb}, total_seq_pad], got "
                         f"{list(x_scale.shape) if isinstance(x_scale, torch.Tensor) else type(x_scale).__name__}")
    if not isinstance(w_scale, torch.Tensor) or w_scale.dim() != 3 or w_scale.shape[0] != G \
            or w_scale.shape[1] != nb or w_scale.shape[2] < kb:
        raise ValueError(f"{who}: w_scale must be [G = {G}, N / 128 = {nb}, >= {kb}], got "
                         f"{list(w_scale.shape) if isinstance(w_scale, torch.Tensor) else type(w_scale).__name__}")
    M = x.shape[0]
    src, valid, offs, col = _rows(seqlens, cu_seqlens, M, x.device, gemm_tile_m(num_seq_per_group_avg))
    cols = torch.where(valid, col, torch.zeros_like(col)).clamp(max=max(x_scale.shape[1] - 1, 0))
    xs = x_scale.to(torch.float32).index_select(1, cols).t().contiguous()
    ws = w_scale[:, :, :kb].to(torch.float32).contiguous()
    y = api.grouped_gemm(_packed_x(x, src), weight, group_offsets=offs, scale_mode="blockwise", x_scale=xs,
                         w_scale=ws, out_dtype=torch.bfloat16, backend=backend)
    return _scatter(y, src, valid, M, output, who)


def reformat_x_scale(x_scale, seqlens, cu_seqlens, num_seq_per_group_avg, output=None):
    """hpc-ops' reformat_x_scale: x_scale fp32 [M, K / 128] (group g's rows at cu_seqlens[g] ..
    + seqlens[g]) -> [K / 128, M], group g's rows as columns from the sum of the earlier groups'
    seqlens rounded up to ``reformat_tile_m``. Other columns: untouched in ``output``, 0 in a new one."""
    who = "reformat_x_scale"
    if not isinstance(x_scale, torch.Tensor) or x_scale.dim() != 2 or x_scale.dtype != torch.float32:
        raise ValueError(f"{who}: x_scale must be a float32 [total_seq_pad, K / 128] tensor, got "
                         f"{getattr(x_scale, 'dtype', type(x_scale).__name__)} {list(getattr(x_scale, 'shape', []))}")
    M, kb = x_scale.shape
    _check_groups(seqlens, cu_seqlens, seqlens.shape[0] if isinstance(seqlens, torch.Tensor) else -1, who)
    if output is not None and (tuple(output.shape) != (kb, M) or output.dtype != torch.float32):
        raise ValueError(f"{who}: output must be float32 [{kb}, {M}], got {output.dtype} {list(output.shape)}")
    src, valid, _, col = _rows(seqlens, cu_seqlens, M, x_scale.device, reformat_tile_m(num_seq_per_group_avg))
    dst = torch.where(valid & (col < M), col, torch.full_like(col, M))
    buf = torch.zeros(kb, M + 1, dtype=torch.float32, device=x_scale.device)
    if output is not None:
        buf[:, :M] = output
    buf.index_copy_(1, dst, x_scale.index_select(0, src).t())
    if output is None:
        return buf[:, :M].contiguous()
    output.copy_(buf[:, :M])
    return output


__all__ = ["group_gemm_pertensor_fp8", "group_gemm_blockwise_fp8", "reformat_x_scale", "gemm_tile_m",
           "reformat_tile_m"]

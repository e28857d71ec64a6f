"""Reference grouped GEMM (NT layout), plain torch: y[rows of g] = x[rows of g] @ w[g]^T.

Layouts: contiguous x [M, K] with group_offsets int32 [G + 1] (group g owns rows
offsets[g]..offsets[g+1]-1; rows past offsets[G] stay 0), or masked x [G, M_max, K] with
masked_m int32 [G] (rows >= masked_m[g] stay 0).  Rows outside every group are never read,
so they may hold anything (NaN included).

Scale modes (dequant is applied to the fp32 partial products, as the kernels do):
  none        bf16 / fp16 / fp32 x and w
  per_tensor  fp8 e4m3; w_scale [G], optional x_scale (scalar or [1])
  rowwise     fp8 e4m3 or int8; x_scale [M] (masked: [G, M_max]), w_scale [G, N]
  blockwise   fp8 e4m3; x_scale [M, ceil(K/128)] (masked: [G, M_max, ceil(K/128)]),
              w_scale [G, ceil(N/128), ceil(K/128)]; each 128-wide K slice's partial
              product is scaled by x_scale * w_scale before summing.
int8 products are accumulated exactly (fp64 holds any int8 dot product of realistic K).
"""

import torch

from ._common import inexact, rounding_type, unit_roundoff

BLOCK = 128  # blockwise scale granularity along N and K
_FLOAT = (torch.bfloat16, torch.float16, torch.float32)
_DTYPES = {"none": _FLOAT, "per_tensor": (torch.float8_e4m3fn,),
           "rowwise": (torch.float8_e4m3fn, torch.int8), "blockwise": (torch.float8_e4m3fn,)}


def _cdiv(a, b):
    return (a + b - 1) // b


def _check_shape(t, name, shape):
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shape):
        got = tuple(t.shape) if isinstance(t, torch.Tensor) else repr(t)
        raise ValueError(f"{name} must have shape {list(shape)}, got {got}")


def _group_rows(x, group_offsets, masked_m, G):
    """[(g, row index into the flattened rows of x)] for every non-empty group."""
    if (group_offsets is None) == (masked_m is None):
        raise ValueError("give exactly one of group_offsets (contiguous layout) and masked_m (masked layout)")
    if group_offsets is not None:
        if x.dim() != 2:
            raise ValueError(f"x must be [M, K] with group_offsets, got {tuple(x.shape)}")
        _check_shape(group_offsets, "group_offsets", (G + 1,))
        offs = [int(v) for v in group_offsets.tolist()]
        if offs[0] != 0 or any(a > b for a, b in zip(offs, offs[1:])) or offs[-1] > x.shape[0]:
            raise ValueError(f"group_offsets must start at 0, not decrease and end <= M={x.shape[0]}, got {offs}")
        spans = [(offs[g], offs[g + 1]) for g in range(G)]
    else:
        if x.dim() != 3 or x.shape[0] != G:
            raise ValueError(f"x must be [G={G}, M_max, K] with masked_m, got {tuple(x.shape)}")
        _check_shape(masked_m, "masked_m", (G,))
        m_max = x.shape[1]
        counts = [int(v) for v in masked_m.tolist()]
        if any(not 0 <= c <= m_max for c in counts):
            raise ValueError(f"masked_m entries must be in [0, M_max={m_max}], got {counts}")
        spans = [(g * m_max, g * m_max + c) for g, c in enumerate(counts)]
    return [(g, torch.arange(a, b, device=x.device)) for g, (a, b) in enumerate(spans) if b > a]


def _blockwise(xg, wg, xs, ws, cd):
    """sum over 128-wide K slices of (xg_k @ wg_k^T) * xs[:, k] * ws[n // 128, k]."""
    m, K = xg.shape
    N = wg.shape[0]
    kb = _cdiv(K, BLOCK)
    pad = kb * BLOCK - K  # zero padding adds nothing to the partial products
    xb = torch.nn.functional.pad(xg.to(cd), (0, pad)).view(m, kb, BLOCK)
    wb = torch.nn.functional.pad(wg.to(cd), (0, pad)).view(N, kb, BLOCK)
    partial = torch.einsum("mkc,nkc->kmn", xb, wb)
    w_rows = ws.to(cd).repeat_interleave(BLOCK, dim=0)[:N]  # [N, kb]
    return (partial * xs.to(cd).t().unsqueeze(-1) * w_rows.t().unsqueeze(1)).sum(dim=0)


def grouped_gemm(x, w, *, group_offsets=None, masked_m=None, scale_mode="none", x_scale=None,
                 w_scale=None, out_dtype=torch.bfloat16, compute_dtype=torch.float32, return_budget=False,
                 rounding_dtype=None):
    """Ground-truth grouped GEMM.

    Returns y [M, N] (contiguous layout) or [G, M_max, N] (masked layout) in ``compute_dtype``
    (fp32 or fp64).  ``out_dtype`` is what the kernels return; the reference does not cast
    to it so that comparisons see the unrounded values — cast with ``y.to(out_dtype)``.

    ``return_budget=True`` returns (y, budget): budget shaped like y, the rounding term of
    docs/parity.md for a kernel that rounds its operands once to ``rounding_dtype`` (default:
    x's dtype if 16-bit, else bf16) and sums fp32 products: u * sum_k |x_k| |w_k| over the
    products with an operand that the rounding changes. 8-bit operands are exact in a 16-bit
    type and the recipes' scales act on the fp32 products, so their budget is 0.
    """
    if compute_dtype not in (torch.float32, torch.float64):
        raise ValueError(f"compute_dtype must be torch.float32 or torch.float64, got {compute_dtype}")
    if scale_mode not in _DTYPES:
        raise ValueError(f"scale_mode must be one of {list(_DTYPES)}, got {scale_mode!r}")
    if w.dim() != 3:
        raise ValueError(f"w must be [G, N, K], got {tuple(w.shape)}")
    G, N, K = w.shape
    if x.shape[-1] != K:
        raise ValueError(f"x's last dim must be K={K} (w is [G, N, K]), got {x.shape[-1]}")
    if x.dtype != w.dtype or x.dtype not in _DTYPES[scale_mode]:
        raise TypeError(f"scale_mode {scale_mode!r} takes x and w both of {[str(d) for d in _DTYPES[scale_mode]]}, "
                        f"got x {x.dtype} and w {w.dtype}")
    groups = _group_rows(x, group_offsets, masked_m, G)
    masked = masked_m is not None
    lead = tuple(x.shape[:-1])  # [M] or [G, M_max]: one x_scale row per x row
    kb = _cdiv(K, BLOCK)
    if scale_mode == "none":
        if x_scale is not None or w_scale is not None:
            raise ValueError("scale_mode 'none' takes no x_scale / w_scale")
    elif scale_mode == "per_tensor":
        _check_shape(w_scale, "w_scale", (G,))
        if x_scale is not None and not isinstance(x_scale, (int, float)) and x_scale.numel() != 1:
            raise ValueError(f"per_tensor x_scale must be a scalar or [1], got {tuple(x_scale.shape)}")
    elif scale_mode == "rowwise":
        _check_shape(x_scale, "x_scale", lead)
        _check_shape(w_scale, "w_scale", (G, N))
    else:
        _check_shape(x_scale, "x_scale", lead + (kb,))
        _check_shape(w_scale, "w_scale", (G, _cdiv(N, BLOCK), kb))

    cd = compute_dtype
    if isinstance(x_scale, torch.Tensor):
        x_scale = x_scale.to(x.device)
    if isinstance(w_scale, torch.Tensor):
        w_scale = w_scale.to(x.device)
    x_rows = x.reshape(-1, K)
    xs_rows = x_scale.reshape(-1, kb) if scale_mode == "blockwise" else (
        x_scale.reshape(-1) if scale_mode == "rowwise" else None)
    y = torch.zeros(x_rows.shape[0], N, dtype=cd, device=x.device)
    budget = torch.zeros_like(y)
    rounding = rounding_type(rounding_dtype or x.dtype)
    for g, rows in groups:
        xg, wg = x_rows[rows], w[g]
        if return_budget and scale_mode == "none":
            budget[rows] = _operand_rounding(xg.to(cd), wg.to(cd), rounding)
        if scale_mode == "blockwise":
            y[rows] = _blockwise(xg, wg, xs_rows[rows], w_scale[g], cd)
            continue
        if x.dtype == torch.int8:  # exact integer dot products, then one rounding to cd
            acc = (xg.to(torch.float64) @ wg.to(torch.float64).t()).to(cd)
        else:
            acc = xg.to(cd) @ wg.to(cd).t()
        if scale_mode == "per_tensor":
            acc = acc * w_scale[g].to(cd)
            if x_scale is not None:
                acc = acc * (x_scale.to(cd).reshape(()) if isinstance(x_scale, torch.Tensor) else float(x_scale))
        elif scale_mode == "rowwise":
            acc = acc * xs_rows[rows].to(cd).unsqueeze(1) * w_scale[g].to(cd).unsqueeze(0)
        y[rows] = acc
    if masked:
        y, budget = y.view(*lead, N), budget.view(*lead, N)
    return (y, budget) if return_budget else y


def _operand_rounding(xg, wg, rounding):
    """u sum_k |x_k||w_k| ([x_k inexact] + [w_k inexact]): x(1+a) w(1+b) - x w, |a|, |b| <= u."""
    xa, wa = xg.abs(), wg.abs()
    return unit_roundoff(rounding) * ((xa * inexact(xg, rounding)) @ wa.t() + xa @ (wa * inexact(wg, rounding)).t())

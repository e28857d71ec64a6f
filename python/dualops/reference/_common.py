"""Pieces the attention references share."""

from typing import NamedTuple

import torch


def weighted_values(p: torch.Tensor, v: torch.Tensor, hidden) -> torch.Tensor:
    """p @ v (p [*batch, R, L] softmax weights, v [*batch, L, D]) where a key hidden from a row
    adds nothing to that row even when its value is NaN or inf (0 * NaN would be NaN): a masked
    key, like a slot past the length, has no effect. A key the row attends contributes p * v as
    IEEE arithmetic has it (NaN and inf values propagate). ``hidden``: bool, broadcastable to p,
    or None (every key attended)."""
    if hidden is None:
        return p @ v
    bad = (~torch.isfinite(v)).flatten(0, -3).any(0).any(-1) if v.dim() > 2 else (~torch.isfinite(v)).any(-1)
    keys = bad.nonzero().flatten()
    if keys.numel() == 0:
        return p @ v
    v_ok = v.clone()
    v_ok[..., keys, :] = 0
    c = p[..., keys].unsqueeze(-1) * v[..., keys, :].unsqueeze(-3)        # [*batch, R, n, D]
    c = c.masked_fill(torch.broadcast_to(hidden, p.shape)[..., keys].unsqueeze(-1), 0.0)
    return p @ v_ok + c.sum(-2)


class AttentionBudget(NamedTuple):
    """The rounding terms of docs/parity.md for one attention call, in the reference's dtype:
    ``out`` [..., head_dim_v] and ``lse`` shaped like the outputs. ``dualops.testing`` allows
    ``ROUNDING_FACTOR`` times these on top of the absolute and relative terms."""
    out: torch.Tensor
    lse: torch.Tensor


def unit_roundoff(dtype: torch.dtype) -> float:
    """u of a floating type (half its epsilon): bf16 2^-8, fp16 2^-11, fp32 2^-24."""
    return torch.finfo(dtype).eps / 2


def rounding_type(dtype: torch.dtype) -> torch.dtype:
    """The type a kernel rounds its matrix-unit operands to: a 16-bit float type as given; any
    other (fp32, 8-bit) counts as bf16."""
    return dtype if dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def inexact(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Finite values of ``t`` that rounding to ``dtype`` changes (0/1 in t's dtype); NaN/inf -> 0."""
    return ((t.to(dtype).to(t.dtype) != t) & torch.isfinite(t)).to(t.dtype)


def _finite_abs(t: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(t), t.abs(), torch.zeros_like(t))


def attention_budget(q, k, v, p, hidden, scale, out, rounding_dtype):
    """Rounding terms of a kernel that feeds its matrix units ``rounding_dtype`` operands: the
    softmax weights P (unnormalised, rounded once), K and V rounded once where the values given
    are not already exact in that type (dequantized caches); scores and sums in fp32.

    q [*b, R, D], k [*b, L, D], v [*b, L, Dv], p [*b, R, L] (fp32 softmax weights, 0 where hidden),
    hidden bool broadcastable to p or None, out [*b, R, Dv] the reference output. Values that
    are NaN or inf count as 0 here (where they reach the output, the output is not finite and
    the special-value rule judges it).
    Returns (out_budget [*b, R, Dv], lse_budget [*b, R]):
      out: u sum_j p_j |v_j| (1 + [v_j inexact]) + eta max_j p_j sum_j |v_j|
           + sum_j p_j ds_j (|v_j| + |o|),   ds_j = u scale sum_i |q_i| |k_ji| [k_ji inexact]
      lse: sum_j p_j ds_j
    (eta: half the smallest subnormal of the type, the absolute error of rounding a tiny P;
    1 / row sum = max_j p_j when P is taken relative to the row maximum.)"""
    if p.shape[-1] == 0:
        return torch.zeros_like(out), torch.zeros(p.shape[:-1], dtype=p.dtype, device=p.device)
    u = unit_roundoff(rounding_dtype)
    eta = torch.finfo(rounding_dtype).tiny * torch.finfo(rounding_dtype).eps / 2
    va = _finite_abs(v)
    attended = torch.ones_like(p) if hidden is None else (~torch.broadcast_to(hidden, p.shape)).to(p.dtype)
    out_b = u * (p @ (va * (1 + inexact(v, rounding_dtype))))
    out_b = out_b + eta * p.amax(-1, keepdim=True) * (attended @ va)
    k_err = _finite_abs(k) * inexact(k, rounding_dtype)
    lse_b = torch.zeros(p.shape[:-1], dtype=p.dtype, device=p.device)
    if bool(k_err.any()):
        ds = (u * scale) * (q.abs() @ k_err.transpose(-1, -2))       # [*b, R, L]
        pds = torch.where(p > 0, p * ds, torch.zeros_like(p))
        lse_b = pds.sum(-1)
        out_b = out_b + pds @ va + _finite_abs(out) * lse_b.unsqueeze(-1)
    return out_b, lse_b

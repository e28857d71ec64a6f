"""CPU simulations of attention and GEMM kernels that round their matrix-unit operands once, as
the production kernels do (FlashMLA, FlashInfer, CANN): the parity contract must pass them and
fail their planted faults (tests/test_parity_contract.py).

``once_rounded_attention`` is FlashMLA's arithmetic: scores in fp32 from 16-bit q and keys, an
online softmax over 64-key tiles with the running maximum and row sum in fp32, the unnormalised
weights P rounded once to the 16-bit type before P.V (fp32 accumulation), the output divided by
the fp32 row sum and rounded to the 16-bit type. A dequantized cache is rounded once to the
16-bit type before it enters either product."""
from __future__ import annotations

import math

import torch


def once_rounded_attention(q, k, v, scale, dtype, *, hidden=None, tile=64):
    """q [R, D] (any float type; taken as given), k [L, D] and v [L, Dv] dequantized fp32 values,
    hidden bool [R, L] or None. Returns (out [R, Dv] in ``dtype``, lse [R] fp32); rows that see
    nothing give out 0, lse +inf. Keys are read tile by tile; hidden keys are never read."""
    R, L = q.shape[0], k.shape[0]
    qf = q.float()
    m = torch.full((R,), -math.inf)
    row_sum = torch.zeros(R)
    acc = torch.zeros(R, v.shape[1])
    for t0 in range(0, L, tile):
        t1 = min(L, t0 + tile)
        kt, vt = k[t0:t1].to(dtype).float(), v[t0:t1].to(dtype).float()
        s = (qf @ kt.t()) * scale
        if hidden is not None:
            s = s.masked_fill(hidden[:, t0:t1], -math.inf)
            vt = vt.unsqueeze(0).expand(R, -1, -1).masked_fill(hidden[:, t0:t1, None], 0.0)
        m_new = torch.maximum(m, s.amax(-1))
        base = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p = torch.exp(s - base[:, None])
        alpha = torch.exp(torch.where(torch.isfinite(m), m - base, torch.full_like(m, -math.inf)))
        row_sum = row_sum * alpha + p.sum(-1)
        p16 = p.to(dtype).float()
        pv = p16.unsqueeze(1).bmm(vt).squeeze(1) if vt.dim() == 3 else p16 @ vt
        acc = acc * alpha[:, None] + pv
        m = m_new
    seen = row_sum > 0
    out = torch.where(seen[:, None], acc / row_sum.clamp_min(1e-30)[:, None], torch.zeros_like(acc))
    lse = torch.where(seen, torch.log(row_sum.clamp_min(1e-30)) + m, torch.full_like(m, math.inf))
    return out.to(dtype), lse


def torch16_attention(q, k, v, scale, dtype):
    """torch's own 16-bit attention: its CPU flash kernel run on 16-bit q, k, v (P rounded to
    the 16-bit type once before P.V, fp32 sums). q [R, D], k [L, D], v [L, Dv] (Dv <= D; v is
    padded to D with zeros, as the kernel wants one head size). Returns (out [R, Dv], lse [R])."""
    D, Dv = k.shape[1], v.shape[1]
    vp = torch.nn.functional.pad(v, (0, D - Dv))
    args = [t.to(dtype)[None, None] for t in (q, k, vp)]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*args, 0.0, False, scale=scale)[:2]
    return out[0, 0, :, :Dv], lse[0, 0].float()


def once_rounded_gemm(x, w, dtype):
    """x [M, K] @ w [N, K]^T with both operands rounded once to ``dtype``, fp32 products and sums."""
    return x.to(dtype).float() @ w.to(dtype).float().t()

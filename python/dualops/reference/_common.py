"""Pieces the attention references share."""

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

"""The parity method of docs/parity.md (after FlashMLA's tests), used by the tests, by
``python -m dualops parity`` and available to users.

Per element: pass if ``|a - b| <= atol`` or ``|a - b| <= rtol * |b|``; plus the cosine
difference ``1 - 2<a,b> / (|a|^2 + |b|^2) <= cos_eps``; inf/NaN positions must match."""
from __future__ import annotations

from dataclasses import dataclass

import torch

# Tolerance budgets per output dtype: (atol, rtol, cos_eps).
TOLERANCES = {
    torch.bfloat16: (1e-3, 2 / 128, 1e-5),
    torch.float16: (1e-3, 2 / 1024, 1e-5),
    torch.float32: (1e-5, 1e-4, 1e-7),
    torch.float64: (1e-9, 1e-9, 1e-12),
}
LSE_TOLERANCE = (1e-4, 1e-4, 1e-8)


@dataclass
class Comparison:
    ok: bool
    max_abs: float
    max_rel: float
    cos_diff: float
    mismatched: int
    numel: int
    reason: str = ""

    def __str__(self) -> str:
        s = (f"{'ok' if self.ok else 'FAIL'} max_abs={self.max_abs:.3g} max_rel={self.max_rel:.3g} "
             f"cos_diff={self.cos_diff:.3g} mismatched={self.mismatched}/{self.numel}")
        return s + (f" ({self.reason})" if self.reason else "")


def compare(actual: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float,
            cos_eps: float) -> Comparison:
    a = actual.detach().to("cpu", torch.float64)
    b = expected.detach().to("cpu", torch.float64)
    if a.shape != b.shape:
        return Comparison(False, float("inf"), float("inf"), float("inf"), a.numel(), a.numel(),
                          f"shape {list(a.shape)} != {list(b.shape)}")
    n = a.numel()
    special_a, special_b = ~torch.isfinite(a), ~torch.isfinite(b)
    reason = ""
    ok = True
    same_special = (special_a == special_b) & torch.where(
        special_a, (a == b) | (torch.isnan(a) & torch.isnan(b)), torch.ones_like(special_a))
    if not bool(same_special.all()):
        ok, reason = False, f"{int((~same_special).sum())} inf/NaN positions differ"
    fin = ~special_a & ~special_b
    af, bf = a[fin], b[fin]
    diff = (af - bf).abs()
    rel = diff / bf.abs().clamp_min(1e-30)
    bad = (diff > atol) & (diff > rtol * bf.abs())
    mism = int(bad.sum()) + int((~same_special).sum())
    if int(bad.sum()):
        ok = False
        reason = reason or f"{int(bad.sum())} elements beyond atol={atol:g} and rtol={rtol:g}"
    denom = float((af * af).sum() + (bf * bf).sum())
    cos = 0.0 if denom == 0 else float(1 - 2 * (af * bf).sum() / denom)
    if cos > cos_eps:
        ok = False
        reason = reason or f"cosine difference {cos:.3g} > {cos_eps:g}"
    return Comparison(ok, float(diff.max()) if diff.numel() else 0.0,
                      float(rel.max()) if rel.numel() else 0.0, cos, mism, n, reason)


def tolerance_for(dtype: torch.dtype) -> tuple[float, float, float]:
    return TOLERANCES.get(dtype, TOLERANCES[torch.bfloat16])


def assert_close_parity(actual, expected, atol=None, rtol=None, cos_eps=None, *, name="output"):
    """Assert the parity method; tolerances default to the budget of ``actual.dtype``."""
    d_atol, d_rtol, d_cos = tolerance_for(actual.dtype)
    c = compare(actual, expected, atol=d_atol if atol is None else atol,
                rtol=d_rtol if rtol is None else rtol, cos_eps=d_cos if cos_eps is None else cos_eps)
    if not c.ok:
        raise AssertionError(f"{name}: {c}")
    return c

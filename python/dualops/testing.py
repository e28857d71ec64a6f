"""The parity contract of docs/parity.md, used by the tests, by ``python -m dualops parity`` and
available to users.

Per element: pass if ``|a - b| <= atol + rtol * |b| + ROUNDING_FACTOR * budget``, where
``budget`` is the rounding term the reference computes on the same inputs
(``dualops.reference.<op>(..., return_budget=True)``; 0 where not given); plus the cosine
difference ``1 - 2<a,b> / (|a|^2 + |b|^2) <= cos_eps``; inf/NaN positions must match. Two
backends compared with each other (``pair=True``) get the sum of their two bounds.

    out, lse, budget = dualops.reference.mla_decode(q, kv, table, lens, return_budget=True)
    assert_close_parity(got_out, out, budget=budget.out, name="out")
    assert_close_parity(got_lse, lse, *LSE_TOLERANCE, budget=budget.lse, name="lse")
"""
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
# c: the multiple of the reference's rounding terms a kernel may spend (docs/parity.md says
# why 2: the terms are first-order worst cases of each rounding; the measured ratio of error to
# terms of kernels that round once stays under 1).
ROUNDING_FACTOR = 2.0


@dataclass
class Comparison:
    ok: bool
    max_abs: float
    max_rel: float
    cos_diff: float
    mismatched: int
    numel: int
    reason: str = ""
    worst: float = 0.0   # the largest |a - b| / per-element bound (> 1 fails)

    def __str__(self) -> str:
        s = (f"{'ok' if self.ok else 'FAIL'} max_abs={self.max_abs:.3g} max_rel={self.max_rel:.3g} "
             f"worst={self.worst:.3g}x cos_diff={self.cos_diff:.3g} mismatched={self.mismatched}/{self.numel}")
        return s + (f" ({self.reason})" if self.reason else "")


def compare(actual: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float,
            cos_eps: float, budget: torch.Tensor | None = None, pair: bool = False) -> Comparison:
    """The contract's verdict on ``actual`` against ``expected``. ``budget``: the reference's
    rounding terms, broadcastable to ``expected`` (non-finite entries count as 0); it widens the
    per-element bound by ``ROUNDING_FACTOR * budget`` and cos_eps by ``sum budget^2 / (|a|^2 +
    |b|^2)`` (one budget of error on every element). ``pair``: the
    two sides are two backends, each with these bounds (per element twice the bound; cosine
    (2 sqrt(cos_eps))^2)."""
    a = actual.detach().to("cpu", torch.float64)
    b = expected.detach().to("cpu", torch.float64)
    sides = 2 if pair else 1
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
    bound = atol + rtol * bf.abs()
    denom = float((af * af).sum() + (bf * bf).sum())
    if budget is not None:
        extra = torch.broadcast_to(budget.detach().to("cpu", torch.float64), b.shape)[fin]
        extra = torch.where(torch.isfinite(extra), extra, torch.zeros_like(extra))
        bound = bound + ROUNDING_FACTOR * extra
        # the cosine allows an error of one budget on every element (the per-element bound, c)
        cos_eps = cos_eps + (0.0 if denom == 0 else float((extra * extra).sum()) / denom)
    bound = sides * bound
    bad = diff > bound
    mism = int(bad.sum()) + int((~same_special).sum())
    worst = float((diff / bound.clamp_min(1e-300)).max()) if diff.numel() else 0.0
    if int(bad.sum()):
        ok = False
        reason = reason or (f"{int(bad.sum())} elements beyond atol={atol:g} + rtol={rtol:g}|b|"
                            f"{' + rounding budget' if budget is not None else ''} (worst {worst:.3g}x the bound)")
    cos = 0.0 if denom == 0 else float(1 - 2 * (af * bf).sum() / denom)
    cos_eps = cos_eps * sides * sides
    if cos > cos_eps:
        ok = False
        reason = reason or f"cosine difference {cos:.3g} > {cos_eps:g}"
    return Comparison(ok, float(diff.max()) if diff.numel() else 0.0,
                      float(rel.max()) if rel.numel() else 0.0, cos, mism, n, reason, worst)


def tolerance_for(dtype: torch.dtype) -> tuple[float, float, float]:
    return TOLERANCES.get(dtype, TOLERANCES[torch.bfloat16])


def assert_close_parity(actual, expected, atol=None, rtol=None, cos_eps=None, *, budget=None, pair=False,
                        name="output"):
    """Assert the parity contract; atol / rtol / cos_eps default to those of ``actual.dtype``;
    ``budget``: the reference's rounding terms for this output (see ``compare``)."""
    d_atol, d_rtol, d_cos = tolerance_for(actual.dtype)
    c = compare(actual, expected, atol=d_atol if atol is None else atol,
                rtol=d_rtol if rtol is None else rtol, cos_eps=d_cos if cos_eps is None else cos_eps,
                budget=budget, pair=pair)
    if not c.ok:
        raise AssertionError(f"{name}: {c}")
    return c

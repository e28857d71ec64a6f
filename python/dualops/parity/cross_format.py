"""Cross-format quantization error of MLA decode: one bf16 cache stored as ``fp8_v32`` (GPUs) and
as ``int8_v32`` (Ascend A2 / A3, no FP8), the format pairs of ``cases.FORMAT_PAIRS``.

Each stored cache passes parity on its own (the backend against the reference on *its own*
dequantized values, the ordinary case rows). What this module adds is a measurement, not a
pass / fail: how far the two storage types move the output from each other and from the output
on the unquantized bf16 cache, per backend and for the fp32 reference itself (``expected``: the
quantization error alone, no kernel rounding)."""
from __future__ import annotations

import math

import torch

from . import expected
from .cases import FORMAT_PAIRS

OP = "mla_decode"
REFERENCE_FP32 = "expected"   # the row of the fp32 reference on each format's dequantized inputs
HEADERS = ("pair", "backend", "int8 vs fp8: rel rms", "max abs", "fp8 vs bf16 cache: rel rms",
           "int8 vs bf16 cache: rel rms", "lse max abs diff")


def diff(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> dict:
    """|a - b| over the positions where a, b and scale are finite: max abs, and the RMS relative
    to the RMS of ``scale`` (the output on the unquantized cache)."""
    a, b, scale = (t.detach().to("cpu", torch.float64) for t in (a, b, scale))
    finite = torch.isfinite(a) & torch.isfinite(b) & torch.isfinite(scale)
    d = (a - b)[finite]
    if d.numel() == 0:
        return {"rel_rms": math.nan, "max_abs": math.nan, "compared": 0}
    ref_rms = float(scale[finite].square().mean().sqrt())
    rms = float(d.square().mean().sqrt())
    return {"rel_rms": rms / ref_rms if ref_rms > 0 else math.nan, "max_abs": float(d.abs().max()),
            "compared": int(d.numel())}


def measure(ran: dict[str, dict], seed: int) -> list[dict]:
    """Rows for every format pair whose two cases ran. ``ran``: case name -> (inputs, outputs by
    backend) of this run."""
    rows = []
    for fp8_name, (fp8, int8, bf16) in FORMAT_PAIRS.items():
        if fp8.name not in ran or int8.name not in ran:
            continue
        (in_a, outs_a), (in_b, outs_b) = ran[fp8.name], ran[int8.name]
        cache_out = expected.expected(OP, bf16.inputs(seed))
        outs_a = {REFERENCE_FP32: expected.expected(OP, in_a), **outs_a}
        outs_b = {REFERENCE_FP32: expected.expected(OP, in_b), **outs_b}
        for backend in [b for b in outs_a if b in outs_b]:
            a, b = outs_a[backend], outs_b[backend]
            lse = diff(b["lse"], a["lse"], cache_out["lse"])
            rows.append({"pair": fp8_name, "int8_case": int8.name, "backend": backend,
                         "int8_vs_fp8": diff(b["out"], a["out"], cache_out["out"]),
                         "fp8_vs_cache": diff(a["out"], cache_out["out"], cache_out["out"]),
                         "int8_vs_cache": diff(b["out"], cache_out["out"], cache_out["out"]),
                         "lse_max_abs": lse["max_abs"]})
    return rows


def table_rows(rows: list[dict]) -> list[list]:
    from ..bench.table import num

    return [[r["pair"].replace("fp8_v32", "v32"), r["backend"], num(r["int8_vs_fp8"]["rel_rms"], ".2e"),
             num(r["int8_vs_fp8"]["max_abs"], ".2e"), num(r["fp8_vs_cache"]["rel_rms"], ".2e"),
             num(r["int8_vs_cache"]["rel_rms"], ".2e"), num(r["lse_max_abs"], ".2e")] for r in rows]


INTRO = ("one bf16 cache stored as fp8_v32 and as int8_v32, each checked against the reference on its "
         "own dequantized values (the case rows above); here the outputs of the two compared with each "
         "other and with the output on the unquantized cache (rel rms = RMS of the difference / RMS of "
         f"that output; `{REFERENCE_FP32}` = the fp32 reference, quantization error alone)")

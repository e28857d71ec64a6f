"""Plain-text and Markdown tables, and JSON-safe values (shared by the parity and bench reports)."""
from __future__ import annotations

import math

# A timing whose spread -- (90th - 10th percentile) / median of its runs -- is above this is
# flagged "noisy": half the runs lie further apart than half the median, so the median says
# little about the implementation and a ratio to a peer even less (a loaded machine gives
# spreads of 100 % to several 1000 %; a quiet one 1-60 % on the CPU, under 5 % on a GPU).
NOISY_SPREAD = 0.5


def noisy(spread) -> bool:
    """Whether a row's spread makes its time meaningless (see NOISY_SPREAD)."""
    return isinstance(spread, (int, float)) and math.isfinite(spread) and spread > NOISY_SPREAD


def spread_cell(spread) -> str:
    """The spread column: '12%', with 'NOISY' when over NOISY_SPREAD; '-' when there is none
    (an estimate has no spread)."""
    if not isinstance(spread, (int, float)) or not math.isfinite(spread):
        return "-"
    return f"{spread:.0%}" + (" NOISY" if noisy(spread) else "")


def num(x, fmt: str = ".3g") -> str:
    """A float for a table cell: '-' when absent, 'inf'/'nan' spelled out."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return format(x, fmt)


def text_table(headers, rows, *, max_width: int = 60) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in r] for r in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(headers, rows) -> str:
    def esc(c):
        return str(c).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(esc(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def json_safe(obj):
    """``obj`` with non-finite floats spelled as strings ("inf", "-inf", "nan"), so the report
    files are strict JSON that any tool reads."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj

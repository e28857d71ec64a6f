"""Cross-backend parity: ``python -m dualops parity`` (see ``cli.py``).

    from dualops import parity
    run = parity.run(ops=["grouped_gemm"], seed=0)     # a ParityRun
    print(parity.report.terminal(run))
"""
from __future__ import annotations

import os
import sys

from . import cases, report
from .cases import OPS, Case
from .runner import ParityRun, Result, run, run_against

__all__ = ["OPS", "Case", "cases", "ParityRun", "Result", "run", "run_against", "report", "main"]


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


def main(*, ops=None, backends=None, full=False, seed=None, case_names=None, out="reports",
         save=None, against=None, stream=None, command=None) -> int:
    """Run, print the table, write the JSON and Markdown reports. Exit status: 0 all passed,
    1 any failure or error."""
    stream = stream or sys.stdout
    if against:
        result = run_against(against, ops=ops, backends=backends, case_names=case_names)
    else:
        result = run(ops=ops, backends=backends, full=full,
                     seed=fresh_seed() if seed is None else seed, case_names=case_names, save_dir=save)
    print(report.terminal(result), file=stream)
    paths = report.write(result, out, command=command)
    from .. import report_page

    report_page.write(paths["run"])
    page = report_page.write(out)
    print(f"parity reports: {paths['run']}/ (this run; also copied to {paths['json']}, {paths['markdown']}); "
          f"{page} lists every run", file=stream)
    if save:
        print(f"parity case set saved to {save} (check another machine with "
              f"`python -m dualops parity --against {save}`)", file=stream)
    return 1 if result.failures else 0

import os
import sys

import pytest
import torch

# Use the installed package when there is one; from a bare checkout, the sources in python/.
try:
    import dualops  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
# Shared test helpers (tests/helpers/) import by module name.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))

# Under pytest-xdist every worker is one of several processes on the machine's cores: torch's CPU
# ops (the reference, the input builders) take that worker's share of the cores, not all of them
# (with each worker spinning a thread per core, the CPU side of the CUDA tests crawls).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
if _WORKERS > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))


@pytest.fixture
def gen():
    """A seeded generator per test (set DUALOPS_TEST_SEED to vary it): fresh random inputs for
    each test, reproducible failures."""
    return torch.Generator().manual_seed(int(os.environ.get("DUALOPS_TEST_SEED", "1234")))


def pytest_terminal_summary(terminalreporter):
    """Skipped tests, one line per distinct reason with its count (pytest's -rs would print one
    line per test location)."""
    skipped = terminalreporter.stats.get("skipped", [])
    reasons: dict[str, int] = {}
    for rep in skipped:
        longrepr = getattr(rep, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        terminalreporter.write_sep("-", f"{len(skipped)} skipped, by reason")
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{n:5d}  {reason}")

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


@pytest.fixture
def gen():
    """A seeded generator per test (set DUALOPS_TEST_SEED to vary it): fresh random inputs for
    each test, reproducible failures."""
    return torch.Generator().manual_seed(int(os.environ.get("DUALOPS_TEST_SEED", "1234")))

import os
import sys

import pytest
import torch

# Run from a checkout without installing: the package lives in python/.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(_ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(_ROOT, "python"))


@pytest.fixture
def gen():
    """A fresh, seeded generator per test: fresh random inputs, reproducible failures."""
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little") if os.environ.get("DUALOPS_RANDOM_SEED") else 1234)
    return g

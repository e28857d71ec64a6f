"""The backends a test runs on, as pytest params: each one skipped, with the reason, where it is
unavailable here; and the torch device its tensors live on."""
import pytest

import dualops

_AVAILABLE = dualops.backends()
BACKENDS = [pytest.param(b, marks=pytest.mark.skipif(
    not _AVAILABLE.get(b, {}).get("available"),
    reason=f"{b} unavailable here: needs {'a CUDA GPU' if b == 'cuda' else 'the simulator'}"))
    for b in ("reference", "ascend_sim", "cuda")]


def device_of(backend: str) -> str:
    return "cuda" if backend == "cuda" else "cpu"

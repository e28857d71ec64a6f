"""The Ascend simulator backend: the Ascend C kernels of ``backends/ascend`` run on the CPU
against the AscendC simulator in ``dualops._C`` (a model of Atlas A2 AI cores: one cube and two
vector cores per AI core as threads, real buffer capacities, bounds-checked GM), one module per
op over the shared glue of ``_common`` (profile, GM regions, launch, counters).

Each op module turns validated CPU tensors into the packed params struct, makes the plan for the
simulated profile, allocates outputs and GM workspace, registers every buffer the kernel may
touch (any other GM access is a fault) and launches. The arguments and their values were checked
by the API (``CHECK_VALUES``); the modules re-check nothing.

Profile: ``devices.DEFAULT_SIM_PROFILE`` (910B2, 24 AI cores); override with the environment
(``DUALOPS_ASCEND_SIM_PROFILE=ascend910b3``, ``DUALOPS_ASCEND_SIM_CORES=4``) or in code with
``use_profile("ascend910b2", cores=2)``.
"""
from __future__ import annotations

from ._common import (NAME, active_profile, estimate, last_counters, last_estimate,  # noqa: F401
                      status, use_profile)

# The Ascend C kernels trust device values (lengths, block ids, group offsets) to stay in bounds:
# the API runs the value checks of validate="full" on every call (docs/internals.md).
CHECK_VALUES = True

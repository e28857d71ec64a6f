"""The Ascend C mla decode on the NPU: the simulator's glue (backends/ascend_sim/mla_decode.py)
with its buffers on the NPU and the CANN-built kernel launched on torch_npu's current stream."""
from __future__ import annotations

from ..ascend_sim import mla_decode as _glue
from ._common import on_npu

mla_decode = on_npu(_glue.mla_decode)

"""The Ascend C grouped gemm on the NPU: the simulator's glue (backends/ascend_sim/grouped_gemm.py)
with its buffers on the NPU and the CANN-built kernel launched on torch_npu's current stream."""
from __future__ import annotations

from ..ascend_sim import grouped_gemm as _glue
from ._common import on_npu

grouped_gemm = on_npu(_glue.grouped_gemm)

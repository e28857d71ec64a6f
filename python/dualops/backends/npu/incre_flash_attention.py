"""The Ascend C incre flash attention on the NPU: the simulator's glue (backends/ascend_sim/incre_flash_attention.py)
with its buffers on the NPU and the CANN-built kernel launched on torch_npu's current stream."""
from __future__ import annotations

from ..ascend_sim import incre_flash_attention as _glue
from ._common import on_npu

incre_flash_attention = on_npu(_glue.incre_flash_attention)

"""Pure-torch ground truth for every op and variant (fp32 by default, fp64 on request).

Each function takes the backend interface's keyword arguments (docs/internals.md) minus
``plan``, plus ``compute_dtype``, and returns its results in ``compute_dtype``.
"""

from .grouped_gemm import grouped_gemm
from .incre_flash_attention import incre_flash_attention
from .mla_decode import mla_decode

__all__ = ["incre_flash_attention", "mla_decode", "grouped_gemm"]

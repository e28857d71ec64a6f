"""The Ascend launch heuristics, in one place: the choices the Ascend C kernels (the simulator's and
the NPU's builds alike) get beyond the shared plan, as the fields of their per-backend structs
(ops/<op>.yaml ``plan.backends.ascend``, generated into ops/include/dualops/tiling.h).

- MLA decode: ``MlaDecodeAscendLaunch``, which precedes the shared MLA plan in the tiling buffer
  (``mla_launch``): AI cores, tile sizes, page sizes, formats, whether the vector cores
  dequantize the cache.

IFA and grouped GEMM take every choice from their shared plans (the planners size their tiles
from the Ascend profile's on-chip capacities: dualops.tiling).
"""
from __future__ import annotations

from .. import plan_contract, schema

MLA_KV_TILE = 128   # keys per tile (two L1 slots of 128 x d_qk in q's dtype, 16-bit or dequantized caches alike)
MLA_D_V = 512


def mla_launch(plan, *, num_cores: int, d_qk: int, q_dtype, page_block_size: int, extra_page_block_size: int = 0,
               topk_cols: int = 0, extra_topk_cols: int = 0, kv_tile: int | None = None) -> dict:
    """The fields of MlaDecodeAscendLaunch for MLA plan `plan` on `num_cores` AI cores (the
    version is the struct's own)."""
    from ..tiling.mla_decode import MLA_Q_BLOCK_ROWS

    bf16 = plan_contract.enum("mla_decode", "kv_format")["bf16"]
    return dict(num_cores=max(1, min(num_cores, plan.num_sm_parts * plan.num_m_blocks)), d_qk=d_qk, d_v=MLA_D_V,
                kv_tile=kv_tile or MLA_KV_TILE, m_rows=MLA_Q_BLOCK_ROWS, page_block_size=page_block_size,
                extra_page_block_size=extra_page_block_size, kv_format=plan.kv_format,
                q_dtype=schema.dtype_code(q_dtype), convert=int(plan.kv_format != bf16), topk_cols=topk_cols,
                extra_topk_cols=extra_topk_cols, plan_ints=int(plan.pack().numel()))

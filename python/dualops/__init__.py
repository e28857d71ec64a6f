"""dualops: LLM decoding operators for NVIDIA GPUs (CUDA) and Huawei Ascend NPUs (Ascend C),
behind one op schema (ops/*.yaml), one Python API and one tiling planner.

    import dualops
    out = dualops.incre_flash_attention(q, k_cache, v_cache, kv_lens=lens, block_table=bt)
    plan = dualops.get_mla_metadata(cache_seqlens, num_heads_q=128)
    out, lse = dualops.mla_decode(q, kv_cache, block_table, cache_seqlens, plan=plan)
    y = dualops.grouped_gemm(x, w, group_offsets=offs)
"""
from . import backends, quant, reference, testing, tuning  # backends() lists what runs here
from .api import get_mla_metadata, grouped_gemm, incre_flash_attention, mla_decode, supports

__version__ = "0.1.0"
__all__ = ["incre_flash_attention", "get_mla_metadata", "mla_decode", "grouped_gemm", "quant", "tuning",
           "reference", "testing", "backends", "supports"]

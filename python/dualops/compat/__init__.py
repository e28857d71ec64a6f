"""Drop-in signatures of the peers, so code written against them runs on dualops unchanged:
``compat.flash_mla`` (FlashMLA's get_mla_metadata / flash_mla_with_kvcache) and
``compat.torch_npu`` (torch_npu.npu_incre_flash_attention) and ``compat.hpc`` (hpc-ops'
group_gemm_pertensor_fp8 / group_gemm_blockwise_fp8)."""

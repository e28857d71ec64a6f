"""The peers' interfaces on dualops, so code written against them runs unchanged (docs/compat.md):
``compat.flash_mla`` (FlashMLA's get_mla_metadata / flash_mla_with_kvcache), ``compat.hpc``
(hpc-ops' group_gemm_pertensor_fp8 / group_gemm_blockwise_fp8 / reformat_x_scale) and
``compat.torch_npu`` (npu_incre_flash_attention, npu_fused_infer_attention_score,
npu_grouped_matmul)."""

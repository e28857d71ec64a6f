// Host entry of the CUDA incremental flash attention: pointer-level, no torch types.
// The params struct carries device addresses and strides (docs/internals.md "IFA kernel params"),
// the tiling struct the shared Python plan's header ("IFA plan"). Returns nullptr on success,
// else a message naming what is wrong (bad argument, or the CUDA error of the launch).
#pragma once
#include <cuda_runtime.h>

#include <dualops/params.h>

#include "ifa_tiling.h"

namespace dualops::cuda {

// Argument / plan checks alone (what incre_flash_attention runs first): nullptr when fine.
const char* incre_flash_attention_check(const IncreFlashAttentionCudaParams& params,
                                        const IncreFlashAttentionCudaTiling& tiling);

// Checks, then launches on `stream`: nullptr on success, else what went wrong.
const char* incre_flash_attention(const IncreFlashAttentionCudaParams& params,
                                  const IncreFlashAttentionCudaTiling& tiling, cudaStream_t stream);

// The launch alone, for callers that ran incre_flash_attention_check on these arguments.
const char* incre_flash_attention_launch(const IncreFlashAttentionCudaParams& params,
                                         const IncreFlashAttentionCudaTiling& tiling, cudaStream_t stream);

// Shared-memory bytes and threads per CTA of the split kernel chosen for this call (for the
// benchmark notes and tests); 0 when the call is not supported.
int incre_flash_attention_smem_bytes(const IncreFlashAttentionCudaParams& params,
                                     const IncreFlashAttentionCudaTiling& tiling);

}  // namespace dualops::cuda

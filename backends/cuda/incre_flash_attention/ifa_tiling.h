// The IFA plan as the CUDA kernels read it: IncreFlashAttentionCudaTiling of the generated
// ops/include/dualops/tiling.h (python -m dualops.codegen, from ops/incre_flash_attention.yaml
// `plan:`: the shared header, then the CUDA launch fields) is the one definition. The merge-counter
// capacity lives here so the host glue (bind_cuda.cpp) and the kernels share it.
#pragma once
#include <dualops/tiling.h>

namespace dualops::cuda::ifa {
// int32 arrival counters in IncreFlashAttentionCudaParams::merge_counters (one per batch x KV head x
// q tile group; calls with more groups use the combine kernel).
constexpr int kMaxMergeGroups = 1 << 16;
}  // namespace dualops::cuda::ifa

// Grouped GEMM instantiation: fp16 (every tile M and output dtype).
#include "grouped_gemm_kernel.cuh"

namespace dualops::cuda::gg {
DUALOPS_GG_INSTANTIATE(kFp16)
}  // namespace dualops::cuda::gg

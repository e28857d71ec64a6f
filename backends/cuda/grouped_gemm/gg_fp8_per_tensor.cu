// Grouped GEMM instantiation: fp8_per_tensor (every tile M and output dtype).
#include "grouped_gemm_kernel.cuh"

namespace dualops::cuda::gg {
DUALOPS_GG_INSTANTIATE(kFp8PerTensor)
}  // namespace dualops::cuda::gg

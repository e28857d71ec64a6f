// Grouped GEMM instantiation: fp8_rowwise (every tile M and output dtype).
#include "grouped_gemm_kernel.cuh"

namespace dualops::cuda::gg {
DUALOPS_GG_INSTANTIATE(kFp8Rowwise)
}  // namespace dualops::cuda::gg

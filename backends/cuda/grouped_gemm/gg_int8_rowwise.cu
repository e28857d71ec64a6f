// Grouped GEMM instantiation: int8_rowwise (every tile M and output dtype).
#include "grouped_gemm_kernel.cuh"

namespace dualops::cuda::gg {
DUALOPS_GG_INSTANTIATE(kInt8Rowwise)
}  // namespace dualops::cuda::gg

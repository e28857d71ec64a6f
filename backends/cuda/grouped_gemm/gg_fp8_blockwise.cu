// Grouped GEMM instantiation: fp8_blockwise (every tile M and output dtype).
#include "grouped_gemm_kernel.cuh"

namespace dualops::cuda::gg {
DUALOPS_GG_INSTANTIATE(kFp8Blockwise)
}  // namespace dualops::cuda::gg

// Grouped GEMM instantiation: bf16 (every tile M and output dtype).
#include "grouped_gemm_kernel.cuh"

namespace dualops::cuda::gg {
DUALOPS_GG_INSTANTIATE(kBf16)
}  // namespace dualops::cuda::gg

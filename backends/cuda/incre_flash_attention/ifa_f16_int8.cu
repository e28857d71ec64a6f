// IFA kernels for fp16 q, int8 cache (every head dim and q tile).
#include "ifa_launch.cuh"

namespace dualops::cuda::ifa {
cudaError_t launch_f16_int8(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t, cudaStream_t s) {
  return launch_family<__half, int8_t>(p, t, s);
}
int smem_f16_int8(const IncreFlashAttentionCudaTiling& t) { return smem_family<__half, int8_t>(t); }
}  // namespace dualops::cuda::ifa

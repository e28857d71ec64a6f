// IFA kernels for fp16 q, fp16 cache (every head dim and q tile).
#include "ifa_launch.cuh"

namespace dualops::cuda::ifa {
cudaError_t launch_f16_f16(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t, cudaStream_t s) {
  return launch_family<__half, __half>(p, t, s);
}
int smem_f16_f16(const IncreFlashAttentionCudaTiling& t) { return smem_family<__half, __half>(t); }
}  // namespace dualops::cuda::ifa

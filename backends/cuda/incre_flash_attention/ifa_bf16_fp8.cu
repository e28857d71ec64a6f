// IFA kernels for bf16 q, fp8 e4m3 cache (every head dim and q tile).
#include "ifa_launch.cuh"

namespace dualops::cuda::ifa {
cudaError_t launch_bf16_fp8(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t, cudaStream_t s) {
  return launch_family<__nv_bfloat16, __nv_fp8_e4m3>(p, t, s);
}
int smem_bf16_fp8(const IncreFlashAttentionCudaTiling& t) { return smem_family<__nv_bfloat16, __nv_fp8_e4m3>(t); }
}  // namespace dualops::cuda::ifa

// CUTLASS sm90 grouped GEMM instantiation (gg_sm90.cuh): e4m3 per-tensor / rowwise -> bf16, 128 x 256 x 128 tiles, tensor-core accumulation only (opt-in).
// Built only with the CUTLASS headers.
#if defined(DUALOPS_HAVE_CUTE)
#include "gg_sm90.cuh"

namespace dualops::cuda::gg {
template <>
const char* sm90_recipe<kSm90Fp8Fast>(const GroupedGemmParams& p, void* ws, size_t* ws_bytes, int sms, int along_n, cudaStream_t s) {
  using Tile = cute::Shape<cute::_128, cute::_256, cute::_128>;
  using Cluster = cute::Shape<cute::_2, cute::_1, cute::_1>;
  return sm90_call<cutlass::float_e4m3_t, cutlass::bfloat16_t, Tile, Cluster, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum, sm90::kScaled>(p, ws, ws_bytes, sms, along_n, s);
}
}  // namespace dualops::cuda::gg
#endif

// CUTLASS sm90 grouped GEMM instantiation (gg_sm90.cuh): fp8 e4m3 (per-tensor / rowwise scales) -> bf16, 128 x 128 x 128 tiles, cooperative, 1 x 2 clusters (groups of 65-128 rows: one row tile per group, x multicast to two column tiles).
// Built only with the CUTLASS headers.
#if defined(DUALOPS_HAVE_CUTE)
#include "gg_sm90.cuh"

namespace dualops::cuda::gg {
template <>
const char* sm90_recipe<kSm90Fp8Mid>(const GroupedGemmParams& p, void* ws, size_t* ws_bytes, int sms, int along_n, cudaStream_t s) {
  using Tile = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using Cluster = cute::Shape<cute::_1, cute::_2, cute::_1>;
  return sm90_call<cutlass::float_e4m3_t, cutlass::bfloat16_t, Tile, Cluster, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative, sm90::kScaled>(p, ws, ws_bytes, sms, along_n, s);
}
}  // namespace dualops::cuda::gg
#endif

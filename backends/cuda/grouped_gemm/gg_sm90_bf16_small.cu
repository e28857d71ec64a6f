// CUTLASS sm90 grouped GEMM instantiation (gg_sm90.cuh): bf16 -> bf16, 64 x 128 x 128 tiles, ping-pong, 1 x 2 clusters (groups of <= 128 rows).
// Built only with the CUTLASS headers.
#if defined(DUALOPS_HAVE_CUTE)
#include "gg_sm90.cuh"

namespace dualops::cuda::gg {
template <>
const char* sm90_recipe<kSm90Bf16Small>(const GroupedGemmParams& p, void* ws, size_t* ws_bytes, int sms, int along_n, cudaStream_t s) {
  using Tile = cute::Shape<cute::_64, cute::_128, cute::_128>;
  using Cluster = cute::Shape<cute::_1, cute::_2, cute::_1>;
  return sm90_call<cutlass::bfloat16_t, cutlass::bfloat16_t, Tile, Cluster, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong, sm90::kPlain>(p, ws, ws_bytes, sms, along_n, s);
}
}  // namespace dualops::cuda::gg
#endif

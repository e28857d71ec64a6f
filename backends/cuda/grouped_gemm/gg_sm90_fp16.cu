// CUTLASS sm90 grouped GEMM instantiation (gg_sm90.cuh): fp16 -> fp16, 128 x 256 x 64 tiles, cooperative, 2 x 1 clusters.
// Built only with the CUTLASS headers.
#if defined(DUALOPS_HAVE_CUTE)
#include "gg_sm90.cuh"

namespace dualops::cuda::gg {
template <>
const char* sm90_recipe<kSm90Fp16>(const GroupedGemmParams& p, void* ws, size_t* ws_bytes, int sms, int along_n, cudaStream_t s) {
  using Tile = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using Cluster = cute::Shape<cute::_2, cute::_1, cute::_1>;
  return sm90_call<cutlass::half_t, cutlass::half_t, Tile, Cluster, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative, sm90::kPlain>(p, ws, ws_bytes, sms, along_n, s);
}
}  // namespace dualops::cuda::gg
#endif

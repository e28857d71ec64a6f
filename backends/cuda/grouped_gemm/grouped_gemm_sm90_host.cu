// Host entry of the CUTLASS sm90 grouped-GEMM path: argument checks and recipe dispatch
// (gg_sm90_<recipe>.cu instantiate each recipe; without the CUTLASS headers nothing is built
// and the entry says so).
#include "gg_sm90.h"
#include "grouped_gemm.h"

namespace dualops::cuda {

namespace {
// (dtype, scale mode, output dtype) and configuration (gg::Sm90Config) -> gg::Sm90Recipe, or -1.
int sm90_recipe_of(const GroupedGemmParams& p, int config) {
  using namespace gg;
  config &= kSm90ConfigMask;
  const int in = p.in_dtype, out = p.out_dtype;
  if (p.scale_mode == GgScaleMode::kNone && in == DType::kBfloat16 && out == DType::kBfloat16) {
    switch (config) {
      case kSm90Large: return kSm90Bf16;
      case kSm90Small: return kSm90Bf16Small;
      case kSm90Mid: return kSm90Bf16Mid;
      default: return -1;
    }
  }
  if (p.scale_mode == GgScaleMode::kNone && in == DType::kFloat16 && out == DType::kFloat16) return config == kSm90Large ? kSm90Fp16 : -1;
  if (in != DType::kFloat8E4m3fn || out != DType::kBfloat16) return -1;
  if (p.scale_mode == GgScaleMode::kPerTensor || p.scale_mode == GgScaleMode::kRowwise) {
    switch (config) {
      case kSm90Large: return kSm90Fp8;
      case kSm90Small: return kSm90Fp8Small;
      case kSm90Fast: return kSm90Fp8Fast;
      case kSm90Mid: return kSm90Fp8Mid;
      default: return -1;
    }
  }
  if (p.scale_mode == GgScaleMode::kBlockwise) return config == kSm90Large ? kSm90Fp8Blockwise : -1;
  return -1;
}

[[maybe_unused]] int sm_count() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms > 0 ? sms : 1;
}

const char* dispatch(const GroupedGemmParams& p, int config, void* ws, size_t* bytes, cudaStream_t stream) {
#if defined(DUALOPS_HAVE_CUTE)
  const int sms = sm_count();
  const int an = (config & gg::kSm90AlongN) ? 1 : 0;
#define GG_SM90_CASE(R) \
  case gg::R: return gg::sm90_recipe<gg::R>(p, ws, bytes, sms, an, stream);
  switch (sm90_recipe_of(p, config)) {
    GG_SM90_CASE(kSm90Bf16)
    GG_SM90_CASE(kSm90Bf16Small)
    GG_SM90_CASE(kSm90Fp16)
    GG_SM90_CASE(kSm90Fp8)
    GG_SM90_CASE(kSm90Fp8Small)
    GG_SM90_CASE(kSm90Fp8Fast)
    GG_SM90_CASE(kSm90Fp8Blockwise)
    GG_SM90_CASE(kSm90Bf16Mid)
    GG_SM90_CASE(kSm90Fp8Mid)
    default: return "grouped_gemm: no sm90 kernel for this (dtype, scale_mode, out_dtype, config)";
  }
#undef GG_SM90_CASE
#else
  (void)p, (void)config, (void)ws, (void)bytes, (void)stream;
  return "grouped_gemm: the sm90 path was not built (no CUTLASS headers)";
#endif
}
}  // namespace

bool grouped_gemm_sm90_built() {
#if defined(DUALOPS_HAVE_CUTE)
  return true;
#else
  return false;
#endif
}

const char* grouped_gemm_sm90_check(const GroupedGemmParams& p, int config) {
  if (!grouped_gemm_sm90_built()) return "grouped_gemm: the sm90 path was not built (no CUTLASS headers)";
  if (const char* err = grouped_gemm_check(p, 64)) return err;
  if (sm90_recipe_of(p, config) < 0) return "grouped_gemm: no sm90 kernel for this (dtype, scale_mode, out_dtype, config)";
  if ((p.n * 2) % 16) return "grouped_gemm: the sm90 path needs N * output size to be a multiple of 16 bytes";
  if (p.n > (1 << 30) || p.k > (1 << 30) || p.m > (1ll << 31) - 1) return "grouped_gemm: sizes too large for sm90";
  return nullptr;
}

const char* grouped_gemm_sm90_workspace(const GroupedGemmParams& p, int config, size_t* bytes) {
  if (const char* err = grouped_gemm_sm90_check(p, config)) return err;
  return dispatch(p, config, nullptr, bytes, nullptr);
}

const char* grouped_gemm_sm90(const GroupedGemmParams& p, int config, void* ws, size_t ws_bytes,
                              cudaStream_t stream) {
  if (const char* err = grouped_gemm_sm90_check(p, config)) return err;
  return grouped_gemm_sm90_launch(p, config, ws, ws_bytes, stream);
}

const char* grouped_gemm_sm90_launch(const GroupedGemmParams& p, int config, void* ws, size_t ws_bytes,
                                     cudaStream_t stream) {
  if (!ws) return "grouped_gemm: the sm90 path needs a workspace";
  return dispatch(p, config, ws, &ws_bytes, stream);
}

}  // namespace dualops::cuda

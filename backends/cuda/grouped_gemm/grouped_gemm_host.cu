// Host entry of the CUDA grouped GEMM: argument checks, then the recipe's launcher
// (gg_<recipe>.cu instantiates each one, so the recipes compile in parallel).
#include "grouped_gemm.h"
#include "grouped_gemm_kernel.cuh"

namespace dualops::cuda {
namespace gg {
template <> const char* launch_recipe<kBf16>(const GroupedGemmParams&, int, cudaStream_t);
template <> const char* launch_recipe<kFp16>(const GroupedGemmParams&, int, cudaStream_t);
template <> const char* launch_recipe<kFp8PerTensor>(const GroupedGemmParams&, int, cudaStream_t);
template <> const char* launch_recipe<kFp8Rowwise>(const GroupedGemmParams&, int, cudaStream_t);
template <> const char* launch_recipe<kFp8Blockwise>(const GroupedGemmParams&, int, cudaStream_t);
template <> const char* launch_recipe<kInt8Rowwise>(const GroupedGemmParams&, int, cudaStream_t);
}  // namespace gg

namespace {
// DType codes and scale modes (GgScaleMode) -> recipe, or -1.
int recipe_of(int in, int scale_mode) {
  using namespace gg;
  if (scale_mode == GgScaleMode::kNone) return in == DType::kBfloat16 ? kBf16 : (in == DType::kFloat16 ? kFp16 : -1);
  if (in == DType::kFloat8E4m3fn)
    return scale_mode == GgScaleMode::kPerTensor ? kFp8PerTensor
                                                 : (scale_mode == GgScaleMode::kRowwise ? kFp8Rowwise : kFp8Blockwise);
  if (in == DType::kInt8 && scale_mode == GgScaleMode::kRowwise) return kInt8Rowwise;
  return -1;
}
}  // namespace

const char* grouped_gemm_check(const GroupedGemmParams& p, int tile_m) {
  if (recipe_of(p.in_dtype, p.scale_mode) < 0 || p.scale_mode < 0 || p.scale_mode >= GgScaleMode::kCount)
    return "grouped_gemm: unsupported (input dtype, scale_mode) pair";
  if (tile_m != 8 && tile_m != 16 && tile_m != 32 && tile_m != 48 && tile_m != 64)
    return "grouped_gemm: tile_m must be 8, 16, 32, 48 or 64";
  if (p.num_groups < 1 || p.num_groups > 8192) return "grouped_gemm: num_groups must be in [1, 8192]";
  if (p.n < 1 || p.k < 1 || p.m < 0 || p.m_max < 0) return "grouped_gemm: bad sizes";
  const int esize = (p.in_dtype == DType::kBfloat16 || p.in_dtype == DType::kFloat16) ? 2 : 1;
  if ((p.k * esize) % 16) return "grouped_gemm: rows of x and w must be a multiple of 16 bytes (K * element size)";
  if (!p.x || !p.w || !p.y) return "grouped_gemm: x, w and y must be device pointers";
  if ((p.masked_m == nullptr) == (p.group_offsets == nullptr))
    return "grouped_gemm: give exactly one of group_offsets and masked_m";
  if (p.scale_mode != GgScaleMode::kNone && !p.w_scale) return "grouped_gemm: w_scale is required with a scale mode";
  if ((p.scale_mode == GgScaleMode::kRowwise || p.scale_mode == GgScaleMode::kBlockwise) && !p.x_scale)
    return "grouped_gemm: x_scale is required";
  if (p.scale_mode == GgScaleMode::kBlockwise && p.in_dtype != DType::kFloat8E4m3fn)
    return "grouped_gemm: blockwise needs float8_e4m3fn";
  if (p.out_dtype != DType::kFloat32 && p.out_dtype != DType::kFloat16 && p.out_dtype != DType::kBfloat16)
    return "grouped_gemm: out_dtype must be f32/f16/bf16";
  return nullptr;
}

const char* grouped_gemm(const GroupedGemmParams& p, int tile_m, cudaStream_t stream) {
  if (const char* err = grouped_gemm_check(p, tile_m)) return err;
  return grouped_gemm_launch(p, tile_m, stream);
}

const char* grouped_gemm_launch(const GroupedGemmParams& p, int tile_m, cudaStream_t stream) {
  switch (recipe_of(p.in_dtype, p.scale_mode)) {
    case gg::kBf16: return gg::launch_recipe<gg::kBf16>(p, tile_m, stream);
    case gg::kFp16: return gg::launch_recipe<gg::kFp16>(p, tile_m, stream);
    case gg::kFp8PerTensor: return gg::launch_recipe<gg::kFp8PerTensor>(p, tile_m, stream);
    case gg::kFp8Rowwise: return gg::launch_recipe<gg::kFp8Rowwise>(p, tile_m, stream);
    case gg::kFp8Blockwise: return gg::launch_recipe<gg::kFp8Blockwise>(p, tile_m, stream);
    case gg::kInt8Rowwise: return gg::launch_recipe<gg::kInt8Rowwise>(p, tile_m, stream);
    default: return "grouped_gemm: unsupported recipe";
  }
}

}  // namespace dualops::cuda

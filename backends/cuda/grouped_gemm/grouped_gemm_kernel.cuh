// The grouped GEMM kernel: persistent blocks walk the work items (m slot, n tile) of
// gg_schedule.cuh, run the mainloop (gg_mainloop.cuh) on each non-empty tile and write it with
// gg_epilogue.cuh. Recipes are template parameters; tile M (tokens) is the planner's choice.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "dualops/params.h"
#include "gg_epilogue.cuh"
#include "gg_schedule.cuh"

namespace dualops::cuda::gg {

// Recipe -> (input type, scale mode code of SCALE_MODES).
enum Recipe : int { kBf16 = 0, kFp16, kFp8PerTensor, kFp8Rowwise, kFp8Blockwise, kInt8Rowwise };
template <int R> struct RecipeTraits;
template <> struct RecipeTraits<kBf16> { static constexpr int in = kInBf16, scale = 0, esize = 2; };
template <> struct RecipeTraits<kFp16> { static constexpr int in = kInFp16, scale = 0, esize = 2; };
template <> struct RecipeTraits<kFp8PerTensor> { static constexpr int in = kInE4m3, scale = 1, esize = 1; };
template <> struct RecipeTraits<kFp8Rowwise> { static constexpr int in = kInE4m3, scale = 2, esize = 1; };
template <> struct RecipeTraits<kFp8Blockwise> { static constexpr int in = kInE4m3, scale = 3, esize = 1; };
template <> struct RecipeTraits<kInt8Rowwise> { static constexpr int in = kInS8, scale = 2, esize = 1; };

constexpr int kStages = 4;

template <int BM>
constexpr int pipeline_smem() { return kStages * stage_bytes<BM>(); }
static_assert(kOutPitch * 64 * 4 <= kStages * stage_bytes<8>(), "epilogue tile must fit the pipeline buffers");

template <typename OutT, int R, int BM>
__device__ void run_tile(const GroupedGemmParams& p, uint8_t* smem, const Tile& t) {
  using Tr = RecipeTraits<R>;
  const int64_t kbytes = p.k * Tr::esize;
  const int n0 = t.n_tile * kTileN;
  OutT* y_rows = static_cast<OutT*>(p.y) + t.row0 * p.n;
  EpilogueArgs ea{p.n, n0, t.valid, t.write, 1.f, nullptr, nullptr};
  if (t.valid > 0) {
    const int64_t kblocks = (p.k + 127) / 128, nblocks = (p.n + 127) / 128;
    const uint8_t* wg = static_cast<const uint8_t*>(p.w) + (static_cast<int64_t>(t.group) * p.n + n0) * kbytes;
    const uint8_t* xg = static_cast<const uint8_t*>(p.x) + t.row0 * kbytes;
    const float* xs = static_cast<const float*>(p.x_scale);
    const float* ws = static_cast<const float*>(p.w_scale);
    const float* xs_rows = Tr::scale == 3 ? xs + t.row0 * kblocks : nullptr;
    const float* ws_tile = Tr::scale == 3 ? ws + (t.group * nblocks + t.n_tile) * kblocks : nullptr;
    float acc[2][BM / 8][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int nj = 0; nj < BM / 8; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.f;
    mainloop<Tr::in, Tr::scale, BM, kStages>(smem, wg, static_cast<int>(min64(kTileN, p.n - n0)), xg,
                                             t.valid, kbytes, acc, xs_rows, ws_tile);
    stage_tile<BM>(reinterpret_cast<float*>(smem), acc);
    if constexpr (Tr::scale == 1) ea.tensor_scale = __ldg(ws + t.group) * (xs ? __ldg(xs) : 1.f);
    if constexpr (Tr::scale == 2) {
      ea.row_scale = xs + t.row0;
      ea.col_scale = ws + static_cast<int64_t>(t.group) * p.n;
    }
    __syncthreads();
  }
  write_tile<OutT>(y_rows, reinterpret_cast<const float*>(smem), ea);
  __syncthreads();  // the next item's loads reuse the staging buffer
}

template <typename OutT, int R, int BM>
__global__ void __launch_bounds__(kThreads) grouped_gemm_kernel(const GroupedGemmParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int n_tiles = static_cast<int>((p.n + kTileN - 1) / kTileN);
  const bool masked = p.masked_m != nullptr;
  int64_t items;
  int* s_pref = reinterpret_cast<int*>(smem + pipeline_smem<BM>());
  const int* offs = static_cast<const int*>(p.group_offsets);
  if (masked) {
    items = static_cast<int64_t>(p.num_groups) * ((p.m_max + BM - 1) / BM) * n_tiles;
  } else {
    __shared__ int s_scan[kThreads];
    items = static_cast<int64_t>(contiguous_prefix<BM>(offs, p.num_groups, p.m, s_pref, s_scan)) * n_tiles;
  }
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const Tile t = masked ? masked_tile<BM>(item, n_tiles, static_cast<const int*>(p.masked_m), p.m_max)
                          : contiguous_tile<BM>(item, n_tiles, offs, p.num_groups, p.m, s_pref);
    if (t.write <= 0) continue;
    run_tile<OutT, R, BM>(p, smem, t);
  }
}

// Host side of one recipe: picks the instantiation for tile M and the output type, launches a
// persistent grid (resident blocks, at most one per item).
template <int R>
const char* launch_recipe(const GroupedGemmParams& p, int tile_m, cudaStream_t stream);

template <typename OutT, int R, int BM>
const char* launch_bm(const GroupedGemmParams& p, cudaStream_t stream) {
  auto kernel = grouped_gemm_kernel<OutT, R, BM>;
  const int masked = p.masked_m != nullptr;
  const size_t smem = pipeline_smem<BM>() + (masked ? 0 : (p.num_groups + 1) * sizeof(int));
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess)
    return "grouped_gemm: cannot set the kernel's shared memory size";
  int dev = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
  const int64_t n_tiles = (p.n + kTileN - 1) / kTileN;
  const int64_t slots = masked ? static_cast<int64_t>(p.num_groups) * ((p.m_max + BM - 1) / BM)
                               : (p.m + BM - 1) / BM + p.num_groups + 1;
  const int64_t bound = slots * n_tiles;
  if (bound == 0) return nullptr;
  const int64_t grid = min64(bound, static_cast<int64_t>(std::max(1, sms) * std::max(1, per_sm)));
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

template <typename OutT, int R>
const char* launch_out(const GroupedGemmParams& p, int tile_m, cudaStream_t stream) {
  switch (tile_m) {
    case 8: return launch_bm<OutT, R, 8>(p, stream);
    case 16: return launch_bm<OutT, R, 16>(p, stream);
    case 32: return launch_bm<OutT, R, 32>(p, stream);
    case 48: return launch_bm<OutT, R, 48>(p, stream);
    case 64: return launch_bm<OutT, R, 64>(p, stream);
    default: return "grouped_gemm: tile_m must be 8, 16, 32, 48 or 64";
  }
}

#define DUALOPS_GG_INSTANTIATE(R)                                                                   \
  template <>                                                                                       \
  const char* launch_recipe<R>(const GroupedGemmParams& p, int tile_m, cudaStream_t stream) {       \
    switch (p.out_dtype) {                                                                          \
      case kOutF32: return launch_out<float, R>(p, tile_m, stream);                                 \
      case kOutF16: return launch_out<__half, R>(p, tile_m, stream);                                \
      case kOutBf16: return launch_out<__nv_bfloat16, R>(p, tile_m, stream);                        \
      default: return "grouped_gemm: out_dtype must be float32, float16 or bfloat16";               \
    }                                                                                               \
  }

}  // namespace dualops::cuda::gg

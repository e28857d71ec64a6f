// Epilogue of one tile: the fp32 tile goes through shared memory (token-major) so that y rows are
// written in 16-byte pieces; per-tensor / rowwise scales are applied here, rows past the tile's
// valid tokens (masked slots past masked_m, tail rows past offsets[G]) are written as zeros.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "dualops/enums.h"
#include "gg_mainloop.cuh"
#include "gg_schedule.cuh"

namespace dualops::cuda::gg {

enum OutType : int { kOutF32 = DType::kFloat32, kOutF16 = DType::kFloat16, kOutBf16 = DType::kBfloat16 };
constexpr int kOutPitch = kTileN + 4;  // floats per staged row

template <int BM>
__device__ __forceinline__ void stage_tile(float* s_out, const float (&acc)[2][BM / 8][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int nj = 0; nj < BM / 8; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = warp * 32 + mi * 16 + (lane >> 2) + (e >> 1) * 8;
        const int tok = nj * 8 + 2 * (lane & 3) + (e & 1);
        s_out[tok * kOutPitch + n] = acc[mi][nj][e];
      }
}

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// 8 consecutive outputs; one or two 16-byte stores when the whole run is in range and aligned.
template <typename T>
__device__ __forceinline__ void store8(T* dst, const float (&v)[8], int count, bool vec_ok) {
  if (count == 8 && vec_ok) {
    T tmp[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) tmp[e] = from_f32<T>(v[e]);
#pragma unroll
    for (int q = 0; q < static_cast<int>(sizeof(tmp) / 16); ++q)
      reinterpret_cast<uint4*>(dst)[q] = reinterpret_cast<const uint4*>(tmp)[q];
  } else {
    for (int e = 0; e < count; ++e) dst[e] = from_f32<T>(v[e]);
  }
}

struct EpilogueArgs {
  int64_t n;
  int n0;            // first output column of the tile
  int valid, write;  // computed rows, written rows
  float tensor_scale;       // per-tensor: w_scale[g] * x_scale; else 1
  const float* row_scale;   // rowwise: x_scale of the tile's first row, else null
  const float* col_scale;   // rowwise: w_scale[g] (N floats), else null
};

template <typename T>
__device__ void write_tile(T* y_rows, const float* s_out, const EpilogueArgs& a) {
  const bool vec_ok = (a.n * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  for (int i = threadIdx.x; i < a.write * (kTileN / 8); i += kThreads) {
    const int r = i / (kTileN / 8), c = (i % (kTileN / 8)) * 8;
    const int64_t col = a.n0 + c;
    if (col >= a.n) continue;
    const int count = static_cast<int>(min64(8, a.n - col));
    float v[8];
    if (r < a.valid) {
      const float rs = a.tensor_scale * (a.row_scale ? __ldg(a.row_scale + r) : 1.f);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float cs = (a.col_scale && e < count) ? __ldg(a.col_scale + col + e) : 1.f;
        v[e] = s_out[r * kOutPitch + c + e] * rs * cs;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = 0.f;
    }
    store8<T>(y_rows + r * a.n + col, v, count, vec_ok);
  }
}

}  // namespace dualops::cuda::gg

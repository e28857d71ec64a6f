// Mainloop of one output tile: 128 weight rows (the MMA M side: swap-AB, so few tokens per group
// fill the MMA N side of 8) by BM tokens, K in 128-byte slices through an S-stage cp.async ring.
// 4 warps, each 32 weight rows x BM tokens. Rows past N / past the tile's valid tokens and bytes
// past K are zero-filled, never read.
#pragma once

#include "gg_mma.cuh"

namespace dualops::cuda::gg {

constexpr int kTileN = 128;
constexpr int kTileKBytes = 128;
constexpr int kThreads = 128;

template <int BM>
constexpr int stage_bytes() { return (kTileN + BM) * kTileKBytes; }

template <int BM>
__device__ __forceinline__ void load_stage(uint8_t* stage, const uint8_t* wg, int valid_n, const uint8_t* xg,
                                           int valid_m, int64_t kbytes, int kt) {
  const uint32_t sa = smem_u32(stage), sb = sa + kTileN * kTileKBytes;
  const int64_t k0 = static_cast<int64_t>(kt) * kTileKBytes;
#pragma unroll
  for (int i = threadIdx.x; i < (kTileN + BM) * 8; i += kThreads) {
    const int row = i >> 3, ch = i & 7;
    const int64_t kb = k0 + ch * 16;
    if (row < kTileN) {
      const bool ok = kb < kbytes && row < valid_n;
      cp_async_16(sa + swz(row, ch), ok ? wg + row * kbytes + kb : wg, ok ? 16 : 0);
    } else {
      const int r = row - kTileN;
      const bool ok = kb < kbytes && r < valid_m;
      cp_async_16(sb + swz(r, ch), ok ? xg + r * kbytes + kb : xg, ok ? 16 : 0);
    }
  }
}

template <int kIn, int BM>
__device__ __forceinline__ void mma_stage(const uint8_t* stage, typename Acc<kIn>::type (&acc)[2][BM / 8][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t sa = smem_u32(stage), sb = sa + kTileN * kTileKBytes;
#pragma unroll
  for (int ks = 0; ks < kTileKBytes / 32; ++ks) {
    uint32_t a[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) ldsm_x4(sa + swz(warp * 32 + mi * 16 + (lane & 15), ks * 2 + (lane >> 4)), a[mi]);
#pragma unroll
    for (int nj = 0; nj < BM / 8; ++nj) {
      uint32_t b[2];
      ldsm_x2(sb + swz(nj * 8 + (lane & 7), ks * 2 + ((lane >> 3) & 1)), b);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) mma<kIn>(acc[mi][nj], a[mi], b);
    }
  }
}

// Blockwise recipe: one K slice's partial product times x_scale[token, kt] * w_scale[g, n tile, kt].
template <int BM>
__device__ __forceinline__ void blockwise_rescale(float (&out)[2][BM / 8][4], float (&part)[2][BM / 8][4],
                                                  const float* xs, int64_t kblocks, int valid_m, float ws, int kt) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int nj = 0; nj < BM / 8; ++nj) {
    float s[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int tok = nj * 8 + 2 * (lane & 3) + c;
      s[c] = tok < valid_m ? __ldg(xs + tok * kblocks + kt) * ws : 0.f;
    }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        out[mi][nj][e] += part[mi][nj][e] * s[e & 1];
        part[mi][nj][e] = 0.f;
      }
  }
}

// out (fp32, zeroed by the caller) = the tile's product; blockwise: rescaled per K slice.
template <int kIn, int kScale, int BM, int S>
__device__ void mainloop(uint8_t* smem, const uint8_t* wg, int valid_n, const uint8_t* xg, int valid_m,
                         int64_t kbytes, float (&out)[2][BM / 8][4], const float* xs_rows, const float* ws_tile) {
  using AccT = typename Acc<kIn>::type;
  const int ktiles = static_cast<int>((kbytes + kTileKBytes - 1) / kTileKBytes);
  const int64_t kblocks = ktiles;  // blockwise: one 128-element scale block per 128-byte slice (fp8)
  AccT acc[2][BM / 8][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int nj = 0; nj < BM / 8; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = AccT(0);
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < ktiles) load_stage<BM>(smem + s * stage_bytes<BM>(), wg, valid_n, xg, valid_m, kbytes, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<S - 2>();
    __syncthreads();
    const int nk = kt + S - 1;
    if (nk < ktiles) load_stage<BM>(smem + (nk % S) * stage_bytes<BM>(), wg, valid_n, xg, valid_m, kbytes, nk);
    cp_async_commit();
    mma_stage<kIn, BM>(smem + (kt % S) * stage_bytes<BM>(), acc);
    if constexpr (kScale == 3) blockwise_rescale<BM>(out, acc, xs_rows, kblocks, valid_m, __ldg(ws_tile + kt), kt);
  }
  cp_async_wait<0>();
  __syncthreads();
  if constexpr (kScale != 3) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int nj = 0; nj < BM / 8; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[mi][nj][e] = static_cast<float>(acc[mi][nj][e]);
  }
}

}  // namespace dualops::cuda::gg

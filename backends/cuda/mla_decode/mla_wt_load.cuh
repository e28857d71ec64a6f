// Loads of the transposed-tile wgmma MLA kernel: the Q tile of NQ rows (blocked layout of
// WtLayout) and the in-CTA dequantization of a raw FP8 staging tile (mla_load.cuh rows of
// Tr::kRawRow: e4m3 data, scales, bf16 RoPE part) into the blocked 16-bit KV tile.
#pragma once
#include "mla_load.cuh"
#include "mla_wt_layout.cuh"

namespace dualops::cuda::mla {

// q rows 0 .. NQ - 1 of request b (zero past q_rows) into the blocked Q tile.
template <class Tr, class L>
__device__ __forceinline__ void wt_load_q(const MlaDecodeParams& p, const MlaDecodeTiling& t, unsigned char* sq,
                                          int b) {
  using MT = typename Tr::MT;
  const MT* q = static_cast<const MT*>(p.q);
  const uint32_t base = smem_addr(sq);
  for (int c = threadIdx.x; c < L::kNq * Tr::kChunks; c += kThreads) {
    const int row = c / Tr::kChunks, chunk = c - row * Tr::kChunks;
    const bool ok = row < t.q_rows;
    const int i = ok ? row / t.h_q : 0, h = ok ? row - i * t.h_q : 0;
    const MT* src = q + b * p.q_stride_b + i * p.q_stride_s + h * p.q_stride_h + chunk * 8;
    cp_async_16(base + L::q_off(row, chunk), ok ? src : q, ok ? 16u : 0u);
  }
}

// Raw FP8 staging tile -> 16-bit KV tile (e4m3 * scale in fp32, rounded to q's dtype, as
// dequant_tile), by the whole CTA: thread 4t + s converts 16-byte output chunks 8i + 2s and
// 8i + 2s + 1 of token t in every 64-dim block i (one 16-byte raw read per pair), and two of the
// token's 8 RoPE chunks. Unrolled, so a thread's raw reads are in flight together.
template <class Tr>
__device__ __forceinline__ void wt_dequant(const unsigned char* stage, unsigned char* kv) {
  using MT = typename Tr::MT;
  constexpr bool kV32 = Tr::kFmt == kFmtV32;
  constexpr int kBlocks = kV32 ? 8 : 7;       // 64-dim e4m3 blocks
  constexpr int kRope = kV32 ? 528 : 448;     // RoPE bytes in the raw row
  const int t = threadIdx.x >> 2, s = threadIdx.x & 3;
  const unsigned char* row = stage + t * Tr::kRawRow;
  float sc[kBlocks];
  if constexpr (kV32) {  // fp32 scale per 128 dims
    const float4 v = *reinterpret_cast<const float4*>(row + 512);
    const float s4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) sc[j] = s4[j >> 1];
  } else {  // e8m0 exponent per 64 dims
    const uint2 v = *reinterpret_cast<const uint2*>(row + 576);
#pragma unroll
    for (int j = 0; j < 7; ++j) sc[j] = e8m0_scale(((j < 4 ? v.x : v.y) >> ((j & 3) * 8)) & 0xffu);
  }
  uint4 rope[2];
#pragma unroll
  for (int u = 0; u < 2; ++u) rope[u] = *reinterpret_cast<const uint4*>(row + kRope + (2 * s + u) * 16);
#pragma unroll
  for (int i0 = 0; i0 < kBlocks; i0 += 4) {  // (4 blocks' raw reads in flight at a time: registers)
    uint4 raw[4];
#pragma unroll
    for (int i = i0; i < i0 + 4 && i < kBlocks; ++i)
      raw[i - i0] = *reinterpret_cast<const uint4*>(row + (8 * i + 2 * s) * 8);
#pragma unroll
    for (int i = i0; i < i0 + 4 && i < kBlocks; ++i) {
      const uint4 w = raw[i - i0];
      *reinterpret_cast<uint4*>(kv + Tr::off(t, 8 * i + 2 * s)) = e4m3x8_scaled<MT>(make_uint2(w.x, w.y), sc[i]);
      *reinterpret_cast<uint4*>(kv + Tr::off(t, 8 * i + 2 * s + 1)) = e4m3x8_scaled<MT>(make_uint2(w.z, w.w), sc[i]);
    }
  }
#pragma unroll
  for (int u = 0; u < 2; ++u)
    *reinterpret_cast<uint4*>(kv + Tr::off(t, 8 * kBlocks + 2 * s + u)) = bf16x8_to<MT>(rope[u]);
}

}  // namespace dualops::cuda::mla

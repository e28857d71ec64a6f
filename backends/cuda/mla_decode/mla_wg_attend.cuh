// One 64-token tile of the wgmma MLA kernel for a CTA's 64 q rows. Warpgroup c (threads
// 128c .. 128c + 127; warp g of it holds q rows 16g .. 16g + 15 of every fragment):
//   S = Q K^T for tokens 32c .. 32c + 31 (wgmma m64n32k16, d_qk / 16 k-steps, Q and K read from
//   the swizzled shared tiles), the shared softmax stage (row maxima exchanged with warp g of
//   the other warpgroup), P (hi + lo) to shared memory, then O += P V for value columns
//   256c .. 256c + 255 over all 64 tokens (wgmma m64n256k16: A = P, B = the same KV tile read
//   as an MN-major operand, hi and lo passes).
#pragma once
#include "../common/wgmma.cuh"
#include "mla_attend.cuh"

namespace dualops::cuda::mla {

using common::fence_proxy_async_smem;
using common::wgmma_commit;
using common::wgmma_desc_sw128;
using common::wgmma_fence;
using common::wgmma_fence_regs;
using common::wgmma_wait;

// K-major operand rows are 128 bytes: 8-row groups 1024 bytes apart (lbo unused: 16).
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t addr) { return wgmma_desc_sw128(addr, 16, 1024); }

// S (this warpgroup's 64 rows x 32 tokens) = Q K^T over all d_qk dims.
template <class Tr>
__device__ __forceinline__ void wg_scores(float (&s)[4][4], uint32_t q_base, uint32_t kv_base, int c) {
  using MT = typename Tr::MT;
  float(&sf)[16] = reinterpret_cast<float(&)[16]>(s);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < Tr::D / 16; ++ks) {
    const uint32_t off = (ks >> 2) * Tr::kBlockBytes + (ks & 3) * 32;  // block of 64 dims, 16-dim step
    common::wgmma_m64n32k16<MT, 0>(sf, kmajor_desc(q_base + off), kmajor_desc(kv_base + c * 32 * 128 + off),
                                   ks > 0);
  }
  wgmma_commit();
  wgmma_fence_regs(sf);
  wgmma_wait<0>();
  wgmma_fence_regs(sf);
}

// O (64 rows x value columns 256c ..) += P V: A = the P tile (K-major, 64 tokens), B = value
// blocks 4c .. 4c + 3 of the KV tile (MN-major: 64-column blocks 8 KB apart, 8-token groups 1 KB apart).
template <class Tr>
__device__ __forceinline__ void wg_pv(RowState& st, uint32_t p_base, uint32_t lo_base, uint32_t kv_base, int c) {
  using MT = typename Tr::MT;
  float(&of)[128] = reinterpret_cast<float(&)[128]>(st.o);
  const uint32_t v_base = kv_base + 4 * c * Tr::kBlockBytes;
  wgmma_fence_regs(of);
  wgmma_fence();
#pragma unroll
  for (int part = 0; part < 2; ++part) {
    const uint32_t a_base = part ? lo_base : p_base;
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk)
      common::wgmma_m64n256k16<MT, 1>(of, kmajor_desc(a_base + kk * 32),
                                      wgmma_desc_sw128(v_base + kk * 16 * 128, Tr::kBlockBytes, 1024), 1);
  }
  wgmma_commit();
  wgmma_fence_regs(of);
  wgmma_wait<0>();
  wgmma_fence_regs(of);
}

// The whole tile (all 256 threads; ends with every wgmma of the tile complete). lim, tile0,
// scale_log2 as in attend_tile; exact_values: a tile whose keys hidden from some rows hold NaN /
// inf values (those entries are added exactly to the rows that attend them, then zeroed in
// shared memory for the MMA).
template <class Tr>
__device__ __forceinline__ void wg_attend_tile(RowState& st, uint32_t q_base, unsigned char* kv, unsigned char* sp,
                                               unsigned char* sp_lo, float* red_max, int tile0, const int (&lim)[2],
                                               float scale_log2, bool exact_values, int g, int c) {
  const uint32_t kv_base = smem_addr(kv);
  float s[4][4];
  wg_scores<Tr>(s, q_base, kv_base, c);
  // (softmax_tile's CTA barrier before the lo writes covers the other warpgroup's S reads of the
  // RoPE block when the lo tile lives there)
  softmax_tile<Tr>(st, s, sp, sp_lo, Tr::kLoRowBytes, red_max, tile0, lim, scale_log2, g, c);
  if (exact_values) {
    __syncthreads();  // P visible
    add_nonfinite_values<Tr>(st, kv, sp, sp_lo, Tr::kLoRowBytes, tile0, lim, g * 16 + ((threadIdx.x & 31) >> 2), c);
    __syncthreads();  // every thread has read the values
    zero_nonfinite_values<Tr>(kv);
  }
  fence_proxy_async_smem();
  __syncthreads();  // P (and zeroed values) visible to both warpgroups' wgmma
  wg_pv<Tr>(st, smem_addr(sp), smem_addr(sp_lo), kv_base, c);
}

}  // namespace dualops::cuda::mla

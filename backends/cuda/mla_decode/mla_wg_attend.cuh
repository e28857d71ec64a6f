// Tile stages of the wgmma MLA kernel for a CTA's 64 q rows. Warpgroup 0 (threads 0 .. 127)
// computes S = Q K^T for all 64 tokens (wgmma m64n64k16, d_qk / 16 k-steps, Q and K read from
// the swizzled shared tiles) and the softmax (P as hi + lo to shared memory, the rows' rescale
// factors and maxima for warpgroup 1), while warpgroup 1 loads the next KV tile. Then each
// warpgroup c adds P V for value columns 256c .. 256c + 255 (wgmma m64n256k16: A = P, B = the
// same KV tile read as an MN-major operand; hi and lo passes). Warp g of either warpgroup holds
// q rows 16g .. 16g + 15 of every fragment.
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

// S (64 rows x 64 tokens) = Q K^T over all d_qk dims: issued and committed, not waited for.
template <class Tr>
__device__ __forceinline__ void wg_scores_issue(float (&s)[8][4], uint32_t q_base, uint32_t kv_base) {
  using MT = typename Tr::MT;
  float(&sf)[32] = reinterpret_cast<float(&)[32]>(s);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < Tr::D / 16; ++ks) {
    const uint32_t off = (ks >> 2) * Tr::kBlockBytes + (ks & 3) * 32;  // block of 64 dims, 16-dim step
    common::wgmma_m64n64k16<MT, 0>(sf, kmajor_desc(q_base + off), kmajor_desc(kv_base + off), ks > 0);
  }
  wgmma_commit();
  wgmma_fence_regs(sf);
}

// Warpgroup 0, after wg_scores_issue: wait for S, then the softmax stage; the rows' rescale
// factors and running maxima go to red[r] and red[kRows + r] for warpgroup 1.
template <class Tr>
__device__ __forceinline__ void wg_softmax(RowState& st, float (&s)[8][4], unsigned char* sp, unsigned char* sp_lo,
                                           float* red, int tile0, const int (&lim)[2], float scale_log2, int g) {
  float(&sf)[32] = reinterpret_cast<float(&)[32]>(s);
  wgmma_wait<0>();
  wgmma_fence_regs(sf);
  float alpha[2];
  softmax_tile<Tr, 8, false>(st, s, sp, sp_lo, Tr::kLoRowBytes, nullptr, tile0, lim, scale_log2, g, 0, alpha);
  const int lane = threadIdx.x & 31, r0 = g * 16 + (lane >> 2);
  if ((lane & 3) == 0) {
    red[r0] = alpha[0];
    red[r0 + 8] = alpha[1];
    red[kRows + r0] = st.m[0];
    red[kRows + r0 + 8] = st.m[1];
  }
}

// Warpgroup 1, once warpgroup 0's softmax is visible: O rescaled like warpgroup 0's rows, the
// running maxima taken over (its running sums stay 0: warpgroup 0 keeps the rows' sums).
__device__ __forceinline__ void wg_follow_softmax(RowState& st, const float* red, int g) {
  const int r0 = g * 16 + ((threadIdx.x & 31) >> 2);
  const float alpha[2] = {red[r0], red[r0 + 8]};
  st.m[0] = red[kRows + r0];
  st.m[1] = red[kRows + r0 + 8];
  rescale_o(st, alpha);
}

// O (64 rows x value columns 256c ..) += P V: A = the P tile (K-major, 64 tokens), B = value
// blocks 4c .. 4c + 3 of the KV tile (MN-major: 64-column blocks 8 KB apart, 8-token groups
// 1 KB apart). Issued and committed; wg_pv_wait waits for completion.
template <class Tr>
__device__ __forceinline__ void wg_pv_issue(RowState& st, uint32_t p_base, uint32_t lo_base, uint32_t kv_base, int c) {
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
}

__device__ __forceinline__ void wg_pv_wait(RowState& st) {
  float(&of)[128] = reinterpret_cast<float(&)[128]>(st.o);
  wgmma_wait<0>();
  wgmma_fence_regs(of);
}

}  // namespace dualops::cuda::mla

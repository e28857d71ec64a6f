// Tile stages of the wgmma MLA kernel for a CTA's 64 q rows. Warpgroup 0 (threads 0 .. 127)
// computes S = Q K^T for all 64 tokens (wgmma m64n64k16, d_qk / 16 k-steps, Q and K read from
// the swizzled shared tiles) and the softmax (P to shared memory, the rows' rescale
// factors and maxima for warpgroup 1), while warpgroup 1 loads the next KV tile. Then each
// warpgroup c adds P V for value columns 256c .. 256c + 255 (wgmma m64n256k16: A = P, B = the
// same KV tile read as an MN-major operand). Warp g of
// either warpgroup holds q rows 16g .. 16g + 15 of every fragment. The pipelined form of these
// stages (P of warpgroup 0 from registers) is at the end (mla_wg_pipe.cuh).
#pragma once
#include "mla_wgmma_names.cuh"
#include "mla_attend.cuh"

namespace dualops::cuda::mla {

// K-major operand rows are 128 bytes: 8-row groups 1024 bytes apart (lbo unused: 16).
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t addr) { return wgmma_desc_sw128(addr, 16, 1024); }

// S (64 rows x 64 tokens) = Q K^T, k-steps kS0 .. kS1 - 1 (16 dims each): the first part opens
// the chain, the last one commits it (not waited for).
template <class Tr, int kS0, int kS1>
__device__ __forceinline__ void wg_scores_part(float (&s)[8][4], uint32_t q_base, uint32_t kv_base) {
  using MT = typename Tr::MT;
  float(&sf)[32] = reinterpret_cast<float(&)[32]>(s);
  if constexpr (kS0 == 0) wgmma_fence();
#pragma unroll
  for (int ks = kS0; ks < kS1; ++ks) {
    const uint32_t off = (ks >> 2) * Tr::kBlockBytes + (ks & 3) * 32;  // block of 64 dims, 16-dim step
    common::wgmma_m64n64k16<MT, 0>(sf, kmajor_desc(q_base + off), kmajor_desc(kv_base + off), ks > 0);
  }
  if constexpr (kS1 == Tr::D / 16) {
    wgmma_commit();
    wgmma_fence_regs(sf);
  }
}

// S over all d_qk dims: issued and committed, not waited for.
template <class Tr>
__device__ __forceinline__ void wg_scores_issue(float (&s)[8][4], uint32_t q_base, uint32_t kv_base) {
  wg_scores_part<Tr, 0, Tr::D / 16>(s, q_base, kv_base);
}

// A tile's rows' rescale factors and new running maxima to red (red[r], red[kRows + r]), for the
// other warpgroup.
__device__ __forceinline__ void wg_put_softmax(const RowState& st, const float (&alpha)[2], float* red, int g) {
  const int lane = threadIdx.x & 31, r0 = g * 16 + (lane >> 2);
  if ((lane & 3) == 0) {
    red[r0] = alpha[0];
    red[r0 + 8] = alpha[1];
    red[kRows + r0] = st.m[0];
    red[kRows + r0 + 8] = st.m[1];
  }
}

// Warpgroup 0's final row sums (it keeps the rows' sums) to red_sum[row] for warpgroup 1's
// epilogue (write_piece<Tr, true>), before the piece's last hand-off.
__device__ __forceinline__ void wg_put_sums(const RowState& st, float* red_sum, int g) {
  const int lane = threadIdx.x & 31, r0 = g * 16 + (lane >> 2);
  float l[2];
  quad_row_sums(st, l);
  if ((lane & 3) == 0) {
    red_sum[r0] = l[0];
    red_sum[r0 + 8] = l[1];
  }
}

// The other warpgroup's softmax of a tile, once visible: its rescale factors, its running maxima
// taken over.
__device__ __forceinline__ void wg_take_softmax(RowState& st, const float* red, float (&alpha)[2], int g) {
  const int r0 = g * 16 + ((threadIdx.x & 31) >> 2);
  alpha[0] = red[r0];
  alpha[1] = red[r0 + 8];
  st.m[0] = red[kRows + r0];
  st.m[1] = red[kRows + r0 + 8];
}

// Warpgroup 0, after wg_scores_issue: wait for S, then the softmax stage; the rows' rescale
// factors and running maxima go to red for warpgroup 1.
template <class Tr>
__device__ __forceinline__ void wg_softmax(RowState& st, float (&s)[8][4], unsigned char* sp, float* red, int tile0,
                                           const int (&lim)[2], float scale_log2, int g) {
  float(&sf)[32] = reinterpret_cast<float(&)[32]>(s);
  wgmma_wait<0>();
  wgmma_fence_regs(sf);
  float alpha[2];
  softmax_tile<Tr>(st, s, sp, tile0, lim, scale_log2, g, alpha);
  wg_put_softmax(st, alpha, red, g);
}

// Warpgroup 1 of the serial and pipelined loops, once warpgroup 0's softmax is visible: O
// rescaled like warpgroup 0's rows (its running sums stay 0: warpgroup 0 keeps the rows' sums).
__device__ __forceinline__ void wg_follow_softmax(RowState& st, const float* red, int g) {
  float alpha[2];
  wg_take_softmax(st, red, alpha, g);
  rescale_o(st, alpha);
}

// A running sum rescaled; a sum of no probabilities stays 0 (a factor inf, of a row whose max
// became +inf, does not make it NaN: this warpgroup may not have seen any of the row's keys).
__device__ __forceinline__ float scaled_sum(float l, float alpha) { return l != 0.f ? l * alpha : 0.f; }

// O (64 rows x value columns 256c ..) += P V: A = the P tile (K-major, 64 tokens), B = value
// blocks 4c .. 4c + 3 of the KV tile (MN-major: 64-column blocks 8 KB apart, 8-token groups
// 1 KB apart). Issued and committed; wg_pv_wait waits for completion.
template <class Tr>
__device__ __forceinline__ void wg_pv_issue(RowState& st, uint32_t p_base, uint32_t kv_base, int c) {
  using MT = typename Tr::MT;
  float(&of)[128] = reinterpret_cast<float(&)[128]>(st.o);
  const uint32_t v_base = kv_base + 4 * c * Tr::kBlockBytes;
  wgmma_fence_regs(of);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk)
    common::wgmma_m64n256k16<MT, 1>(of, kmajor_desc(p_base + kk * 32),
                                    wgmma_desc_sw128(v_base + kk * 16 * 128, Tr::kBlockBytes, 1024), 1);
  wgmma_commit();
  wgmma_fence_regs(of);
}

__device__ __forceinline__ void wg_pv_wait(RowState& st) {
  float(&of)[128] = reinterpret_cast<float(&)[128]>(st.o);
  wgmma_wait<0>();
  wgmma_fence_regs(of);
}

// ---- Pipelined and seesaw stages (mla_wg_pipe.cuh, mla_wg_seesaw.cuh): a warpgroup's P kept in
// registers as the A operand of its own P V (RS form), and to shared memory for the other one.
struct PFrag {
  uint32_t p[8][2];  // [8-token block n][row r0, r0 + 8]: 16-bit pairs of tokens 8n + 2 (lane % 4)
};

template <int N>
__device__ __forceinline__ void fence_u32(uint32_t (&r)[N][2]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i][0]), "+r"(r[i][1])::"memory");
}

// S of the tile waited for: softmax (softmax_max's rules), P to f, running sums; alpha: the rows'
// rescale factors (O is left to the caller: a P V of the previous tile may be in flight).
template <class Tr>
__device__ __forceinline__ void wg_softmax_p(RowState& st, float (&s)[8][4], PFrag& f, float (&alpha)[2], int tile0,
                                             const int (&lim)[2], float scale_log2, int g) {
  using MT = typename Tr::MT;
  float m_use[2];
  softmax_max<Tr>(st, s, tile0, lim, scale_log2, m_use, alpha);
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float p0 = exp2f(s[n][0] - m_use[0]), p1 = exp2f(s[n][1] - m_use[0]);
    const float p2 = exp2f(s[n][2] - m_use[1]), p3 = exp2f(s[n][3] - m_use[1]);
    sum[0] += p0 + p1;
    sum[1] += p2 + p3;
    f.p[n][0] = pack2<MT>(p0, p1);
    f.p[n][1] = pack2<MT>(p2, p3);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) st.l[j] = scaled_sum(st.l[j], alpha[j]) + sum[j];
}

// P of f to a P tile (rows of 128 bytes, 128-byte swizzle).
__device__ __forceinline__ void wg_store_p(const uint32_t (&h)[8][2], unsigned char* sp, int g) {
  const int lane = threadIdx.x & 31, r0 = g * 16 + (lane >> 2), byte = (lane & 3) * 4;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    *reinterpret_cast<uint32_t*>(sp + swz(r0, n, kPRowBytes) + byte) = h[n][0];
    *reinterpret_cast<uint32_t*>(sp + swz(r0 + 8, n, kPRowBytes) + byte) = h[n][1];
  }
}

// Warpgroup 0 of the pipelined loop, S of the tile waited for: wg_softmax_p, P to sp, O
// rescaled (its P V of the previous tile is complete); alpha for warpgroup 1.
template <class Tr>
__device__ __forceinline__ void wg_softmax_regs(RowState& st, float (&s)[8][4], PFrag& f, unsigned char* sp,
                                                float (&alpha)[2], int tile0, const int (&lim)[2],
                                                float scale_log2, int g) {
  wg_softmax_p<Tr>(st, s, f, alpha, tile0, lim, scale_log2, g);
  wg_store_p(f.p, sp, g);
  rescale_o(st, alpha);
}

// O (this warpgroup's 256 value columns, the 64-column blocks from v_base on) += P V with P from f
// (RS form). Issued and committed.
template <class Tr>
__device__ __forceinline__ void wg_pv_issue_rs(RowState& st, PFrag& f, uint32_t v_base) {
  using MT = typename Tr::MT;
  float(&of)[128] = reinterpret_cast<float(&)[128]>(st.o);
  wgmma_fence_regs(of);
  fence_u32(f.p);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    const uint32_t a[4] = {f.p[2 * kk][0], f.p[2 * kk][1], f.p[2 * kk + 1][0], f.p[2 * kk + 1][1]};
    common::wgmma_m64n256k16_rs<MT, 1>(of, a, wgmma_desc_sw128(v_base + kk * 16 * 128, Tr::kBlockBytes, 1024), 1);
  }
  wgmma_commit();
  wgmma_fence_regs(of);
}

}  // namespace dualops::cuda::mla

// One 64-token tile of attention for a CTA's 64 q rows, on mma.sync m16n8k16 with fp32
// accumulation. Warp w: row group g = w / 2 (q rows 16g .. 16g + 15) and half c = w % 2. For
// S = Q K^T the warp takes tokens 32c .. 32c + 31 of the tile; the two warps of a row group
// exchange row maxima and their halves of P through shared memory (named barrier 1 + g), and
// for O += P V the warp owns value columns 256c .. 256c + 255 for all 64 tokens.
#pragma once
#include "mla_config.cuh"

namespace dualops::cuda::mla {

constexpr float kLog2e = 1.4426950408889634f;

struct RowState {
  float o[32][4];   // O rows (r0: [.][0..1], r1: [.][2..3]), columns 256c + 8n + 2(lane % 4)
  float m[2];       // running max of the scaled scores (log2 domain), rows r0 and r1
  float l[2];       // this thread's share of the running sum (its own columns of its half)
};

// The rows' sums of this thread's quad (the 4 lanes of a row), the same in the 4 lanes.
__device__ __forceinline__ void quad_row_sums(const RowState& st, float (&l)[2]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    l[j] = st.l[j];
    l[j] += __shfl_xor_sync(0xffffffffu, l[j], 1);
    l[j] += __shfl_xor_sync(0xffffffffu, l[j], 2);
  }
}

__device__ __forceinline__ void init_state(RowState& st) {
#pragma unroll
  for (int n = 0; n < 32; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) st.o[n][e] = 0.f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.f;
}

__device__ __forceinline__ void rescale_o(RowState& st, const float (&alpha)[2]) {
#pragma unroll
  for (int n = 0; n < 32; ++n) {
    st.o[n][0] *= alpha[0];
    st.o[n][1] *= alpha[0];
    st.o[n][2] *= alpha[1];
    st.o[n][3] *= alpha[1];
  }
}

// 16-bit value pairs (q's dtype): is either half NaN or inf; the pair with those halves zeroed;
// one 16-bit value as float.
template <typename MT>
__device__ __forceinline__ constexpr uint32_t exp_mask() {
  return std::is_same_v<MT, __nv_bfloat16> ? 0x7f80u : 0x7c00u;
}
template <typename MT>
__device__ __forceinline__ bool nonfinite2(uint32_t w) {
  constexpr uint32_t E = exp_mask<MT>();
  return (w & E) == E || ((w >> 16) & E) == E;
}
template <typename MT>
__device__ __forceinline__ uint32_t finite_or_zero2(uint32_t w) {
  constexpr uint32_t E = exp_mask<MT>();
  uint32_t r = w;
  if ((w & E) == E) r &= 0xffff0000u;
  if (((w >> 16) & E) == E) r &= 0x0000ffffu;
  return r;
}
template <typename MT>
__device__ __forceinline__ float to_float1(uint16_t h) {
  if constexpr (std::is_same_v<MT, __nv_bfloat16>) {
    return __uint_as_float(static_cast<uint32_t>(h) << 16);
  } else {
    return __half2float(__ushort_as_half(h));
  }
}

// Does any of value chunks chunk0 .. chunk0 + kNc - 1 (8 dims each) of tile tokens t0 .. t1 - 1
// hold a NaN or inf: the share of thread tid of kN threads (the caller ORs it over them).
template <class Tr, int kNc = kDv / 8, int kN = kThreads>
__device__ __forceinline__ bool values_nonfinite(const unsigned char* kv, int t0, int t1, int chunk0 = 0,
                                                 int tid = threadIdx.x) {
  bool bad = false;
  for (int i = tid; i < (t1 - t0) * kNc; i += kN) {
    const uint4 w = *reinterpret_cast<const uint4*>(kv + Tr::off(t0 + i / kNc, chunk0 + i % kNc));
    bad |= nonfinite2<typename Tr::MT>(w.x) | nonfinite2<typename Tr::MT>(w.y) | nonfinite2<typename Tr::MT>(w.z) |
           nonfinite2<typename Tr::MT>(w.w);
  }
  return bad;
}

// Called by the whole CTA once tile tokens tile0 .. are visible in shared memory: does a key of
// the tile that is hidden from some q row (tokens >= hidden0, < end) hold a NaN / inf value?
// Only tiles with such keys pay for the check (one more CTA barrier).
template <class Tr>
__device__ __forceinline__ bool hidden_values_nonfinite(const unsigned char* kv, int tile0, int hidden0, int end) {
  const int t0 = max(hidden0 - tile0, 0), t1 = min(end - tile0, kTile);
  if (t0 >= t1) return false;  // uniform over the CTA
  return __syncthreads_or(values_nonfinite<Tr>(kv, t0, t1)) != 0;
}

// NaN / inf entries of value chunks chunk0 .. chunk0 + kNc - 1 of all tile tokens set to 0 in
// shared memory, by kN threads (the wgmma kernel's form of pv_tile<kFinite>: its MMA reads V
// from shared memory).
template <class Tr, int kNc = kDv / 8, int kN = kThreads>
__device__ __forceinline__ void zero_nonfinite_values(unsigned char* kv, int chunk0 = 0, int tid = threadIdx.x) {
  using MT = typename Tr::MT;
  for (int i = tid; i < kTile * kNc; i += kN) {
    uint4* w = reinterpret_cast<uint4*>(kv + Tr::off(i / kNc, chunk0 + i % kNc));
    uint4 v = *w;
    v.x = finite_or_zero2<MT>(v.x);
    v.y = finite_or_zero2<MT>(v.y);
    v.z = finite_or_zero2<MT>(v.z);
    v.w = finite_or_zero2<MT>(v.w);
    *w = v;
  }
}

// O += P V for 16 rows x 256 value columns over the tile's 64 tokens. kFinite: NaN / inf value
// entries enter the MMA as 0 (their products are added exactly by add_nonfinite_values).
template <class Tr, bool kFinite>
__device__ __forceinline__ void pv_tile(RowState& st, uint32_t kv_base, uint32_t p_base, int a_row, int c) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31;
  // (the slow kFinite variant keeps its k steps rolled: fewer live registers for the fast one)
#pragma unroll(kFinite ? 1 : kTile / 16)
  for (int kk = 0; kk < kTile / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(p_base + swz(a_row, 2 * kk + (lane >> 4), kPRowBytes), a);
    // chunk c*32 + 2np + (lane >> 4) of token v_tok, swizzled: np = 4m + u gives 8m + ((2u + hi) ^ (v_tok & 7))
    const int v_tok = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    const uint32_t v_row = kv_base + v_tok * Tr::kRowBytes + c * 512;
#pragma unroll
    for (int np = 0; np < 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(v_row + (np >> 2) * 128 + ((((np & 3) * 2 + (lane >> 4)) ^ (lane & 7)) << 4), b);
      if constexpr (kFinite) {
#pragma unroll
        for (int e = 0; e < 4; ++e) b[e] = finite_or_zero2<MT>(b[e]);
      }
      mma_16816<MT>(st.o[2 * np], a, b[0], b[1]);
      mma_16816<MT>(st.o[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// The exact part of the slow path: for every tile token a row attends (tok < lim) and every
// NaN / inf entry of its value, O += p * v in fp32 (p as the MMA saw it). Keys hidden from a
// row add nothing to it, not even 0 * NaN.
template <class Tr>
__device__ __forceinline__ void add_nonfinite_values(RowState& st, const unsigned char* kv, const unsigned char* sp,
                                                     int tile0, const int (&lim)[2], int r0, int c) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int n = 0; n < 32; ++n) {  // o[n] needs a constant n; the token loop stays rolled
#pragma unroll 1
    for (int k = 0; k < kTile; ++k) {
      const bool see0 = tile0 + k < lim[0], see1 = tile0 + k < lim[1];
      const uint32_t w = *reinterpret_cast<const uint32_t*>(kv + Tr::off(k, c * 32 + n) + (lane & 3) * 4);
      if (!(see0 || see1) || !nonfinite2<MT>(w)) continue;
      const int pb = (k & 7) * 2;
      const float p0 = to_float1<MT>(*reinterpret_cast<const uint16_t*>(sp + swz(r0, k >> 3, kPRowBytes) + pb));
      const float p1 = to_float1<MT>(*reinterpret_cast<const uint16_t*>(sp + swz(r0 + 8, k >> 3, kPRowBytes) + pb));
      const float v[2] = {to_float1<MT>(static_cast<uint16_t>(w & 0xffffu)),
                          to_float1<MT>(static_cast<uint16_t>(w >> 16))};
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (isfinite(v[e])) continue;
        if (see0) st.o[n][e] += p0 * v[e];
        if (see1) st.o[n][2 + e] += p1 * v[e];
      }
    }
  }
}

// First half of the softmax of one tile: scale, mask (tokens >= lim[j] of row j get -inf), row
// maxima, the rows' new running maxima (st.m), the value subtracted before exp2 (m_use) and the
// rescale factors of the old state (alpha). s: this thread's scores of rows r0, r0 + 8
// (r0 = 16g + lane / 4) and tokens tb + 8n + 2 (lane % 4) + e, scaled and masked in place.
// kPair (NB = 4): the thread's half c of the tile holds tokens tb = 32c ..; the row maxima are
// exchanged with the other half (red_max, named barrier 1 + g: the two warps of row group g).
// Otherwise (NB = 8) the warp holds all 64 tokens (tb = 0).
template <class Tr, int NB, bool kPair>
__device__ __forceinline__ void softmax_max(RowState& st, float (&s)[NB][4], float* red_max, int tile0,
                                            const int (&lim)[2], float scale_log2, int g, int c, float (&m_use)[2],
                                            float (&alpha)[2]) {
  static_assert(NB * 8 * (kPair ? 2 : 1) == kTile, "the tile's tokens");
  const int lane = threadIdx.x & 31;
  const int tb = kPair ? c * 32 : 0;
  // ---- scale, mask, row max (fmaxf skips NaN: a NaN score still reaches P below)
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = tile0 + tb + n * 8 + (lane & 3) * 2 + (e & 1);
      const float v = tok < lim[e >> 1] ? s[n][e] * scale_log2 : -INFINITY;
      s[n][e] = v;
      mx[e >> 1] = fmaxf(mx[e >> 1], v);
    }
  const int r0 = g * 16 + (lane >> 2);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 1));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 2));
  }
  if constexpr (kPair) {
    if ((lane & 3) == 0) {
      red_max[c * kRows + r0] = mx[0];
      red_max[c * kRows + r0 + 8] = mx[1];
    }
    named_barrier(1 + g, 64);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float other = kPair ? red_max[(c ^ 1) * kRows + r0 + 8 * j] : -INFINITY;
    // An infinite max subtracts 0 (torch.logsumexp's rule): a +inf score gives p = inf, so the
    // row's sum and lse are +inf (NaN with a NaN score) and its out NaN, as in the reference.
    const float m_old = st.m[j];
    const float m_new = fmaxf(m_old, fmaxf(mx[j], other));
    m_use[j] = isinf(m_new) ? 0.f : m_new;
    alpha[j] = m_old == -INFINITY ? (m_new == -INFINITY ? 1.f : 0.f) : exp2f((isinf(m_old) ? 0.f : m_old) - m_use[j]);
    st.m[j] = m_new;
  }
}

// Scores of one tile -> probabilities: softmax_max, then P = exp2(s - m) to shared memory
// (rounded once to the 16-bit type), running sums, O rescaled (alpha: the rescale factors of rows
// r0, r0 + 8, for a caller sharing them).
template <class Tr, int NB, bool kPair>
__device__ __forceinline__ void softmax_tile(RowState& st, float (&s)[NB][4], unsigned char* sp, float* red_max,
                                             int tile0, const int (&lim)[2], float scale_log2, int g, int c,
                                             float (&alpha)[2]) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31;
  const int tb = kPair ? c * 32 : 0;
  const int r0 = g * 16 + (lane >> 2);
  float m_use[2];
  softmax_max<Tr, NB, kPair>(st, s, red_max, tile0, lim, scale_log2, g, c, m_use, alpha);

  // ---- P = exp2(S - m) to shared memory, running sums, rescale O
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < NB; ++n) {
    const float p0 = exp2f(s[n][0] - m_use[0]), p1 = exp2f(s[n][1] - m_use[0]);
    const float p2 = exp2f(s[n][2] - m_use[1]), p3 = exp2f(s[n][3] - m_use[1]);
    sum[0] += p0 + p1;
    sum[1] += p2 + p3;
    const int chunk = tb / 8 + n, byte = (lane & 3) * 4;
    *reinterpret_cast<uint32_t*>(sp + swz(r0, chunk, kPRowBytes) + byte) = pack2<MT>(p0, p1);
    *reinterpret_cast<uint32_t*>(sp + swz(r0 + 8, chunk, kPRowBytes) + byte) = pack2<MT>(p2, p3);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) st.l[j] = st.l[j] * alpha[j] + sum[j];
  rescale_o(st, alpha);
}

// lim[j]: tokens visible to row j (r0, r1) are those < lim[j] (range end, causal limit).
// sp: the P tile.
template <class Tr>
__device__ __forceinline__ void attend_tile(RowState& st, const unsigned char* sq, const unsigned char* kv,
                                            unsigned char* sp, float* red_max, int tile0, const int (&lim)[2],
                                            float scale_log2, int rows_valid, bool exact_values) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = row_group(), c = warp_half();
  (void)warp;
  const uint32_t q_base = smem_addr(sq), kv_base = smem_addr(kv), p_base = smem_addr(sp);

  // A row group with no valid q row (small h_q) skips its math; it still passes the CTA barrier
  // and its own two named barriers of the tile, so that every thread passes as many barriers as
  // the active groups (compute-sanitizer's racecheck orders accesses by those counts).
  const bool active = g * 16 < rows_valid;
  if (!active) {
    named_barrier(1 + g, 64);
    named_barrier(1 + g, 64);
    return;
  }

  // ---- S = Q K^T for 16 rows x 32 tokens
  float s[4][4];
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
  // Rows a_row (Q) and b_tok, b_tok + 16 (K) all have row % 8 == lane % 8, so the swizzled chunk
  // 2k + h of step k = 4m + u is 8m + ((2u + h) ^ (lane % 8)).
  const int a_row = g * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int b_tok = c * 32 + (lane & 7) + (lane >> 4) * 8;
  const uint32_t a_base = q_base + a_row * Tr::kRowBytes, b_base = kv_base + b_tok * Tr::kRowBytes;
  const int ha = lane >> 4, hb = (lane >> 3) & 1, x = lane & 7;
#pragma unroll 1
  for (int m = 0; m < Tr::D / 64; m += 2) {  // groups of 4 steps (64 dims), two per trip
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int grp = m + (k >> 2), u = k & 3;
      if (grp * 64 >= Tr::D) break;
      uint32_t a[4], b0[4], b1[4];
      ldmatrix_x4(a_base + grp * 128 + (((2 * u + ha) ^ x) << 4), a);
      const uint32_t bo = grp * 128 + (((2 * u + hb) ^ x) << 4);
      ldmatrix_x4(b_base + bo, b0);
      ldmatrix_x4(b_base + 16 * Tr::kRowBytes + bo, b1);
      mma_16816<MT>(s[0], a, b0[0], b0[1]);
      mma_16816<MT>(s[1], a, b0[2], b0[3]);
      mma_16816<MT>(s[2], a, b1[0], b1[1]);
      mma_16816<MT>(s[3], a, b1[2], b1[3]);
    }
  }

  float alpha[2];
  softmax_tile<Tr, 4, true>(st, s, sp, red_max, tile0, lim, scale_log2, g, c, alpha);
  named_barrier(1 + g, 64);
  const int r0 = g * 16 + (lane >> 2);

  // ---- O += P V for 16 rows x 256 value columns over the 64 tokens. exact_values (a tile with
  // keys hidden from some rows whose values hold NaN / inf): those entries skip the MMA and are
  // added exactly, only to the rows that attend them.
  if (exact_values) {
    pv_tile<Tr, true>(st, kv_base, p_base, a_row, c);
    add_nonfinite_values<Tr>(st, kv, sp, tile0, lim, r0, c);
  } else {
    pv_tile<Tr, false>(st, kv_base, p_base, a_row, c);
  }
}

}  // namespace dualops::cuda::mla

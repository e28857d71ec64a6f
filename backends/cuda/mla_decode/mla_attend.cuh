// Tile pieces the wgmma MLA kernels share: the per-row online-softmax state of a CTA's 64 q rows
// (warp g of a warpgroup holds rows 16g .. 16g + 15 of every fragment, in mma's C layout), the
// softmax of a 64-token tile, and the checks and exact products of NaN / inf value entries.
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
// shared memory, by kN threads (the MMAs read V from shared memory; the exact products go through
// add_nonfinite_values).
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
// (r0 = 16g + lane / 4) and tokens 8n + 2 (lane % 4) + e of the tile (the warp holds all 64),
// scaled and masked in place.
template <class Tr>
__device__ __forceinline__ void softmax_max(RowState& st, float (&s)[8][4], int tile0, const int (&lim)[2],
                                            float scale_log2, float (&m_use)[2], float (&alpha)[2]) {
  const int lane = threadIdx.x & 31;
  // ---- scale, mask, row max (fmaxf skips NaN: a NaN score still reaches P below)
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = tile0 + n * 8 + (lane & 3) * 2 + (e & 1);
      const float v = tok < lim[e >> 1] ? s[n][e] * scale_log2 : -INFINITY;
      s[n][e] = v;
      mx[e >> 1] = fmaxf(mx[e >> 1], v);
    }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 1));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 2));
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    // An infinite max subtracts 0 (torch.logsumexp's rule): a +inf score gives p = inf, so the
    // row's sum and lse are +inf (NaN with a NaN score) and its out NaN, as in the reference.
    const float m_old = st.m[j];
    const float m_new = fmaxf(m_old, mx[j]);
    m_use[j] = isinf(m_new) ? 0.f : m_new;
    alpha[j] = m_old == -INFINITY ? (m_new == -INFINITY ? 1.f : 0.f) : exp2f((isinf(m_old) ? 0.f : m_old) - m_use[j]);
    st.m[j] = m_new;
  }
}

// Scores of one tile -> probabilities: softmax_max, then P = exp2(s - m) to shared memory
// (rounded once to the 16-bit type), running sums, O rescaled (alpha: the rescale factors of rows
// r0, r0 + 8, for a caller sharing them).
template <class Tr>
__device__ __forceinline__ void softmax_tile(RowState& st, float (&s)[8][4], unsigned char* sp, int tile0,
                                             const int (&lim)[2], float scale_log2, int g, float (&alpha)[2]) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31;
  const int r0 = g * 16 + (lane >> 2);
  float m_use[2];
  softmax_max<Tr>(st, s, tile0, lim, scale_log2, m_use, alpha);

  // ---- P = exp2(S - m) to shared memory, running sums, rescale O
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float p0 = exp2f(s[n][0] - m_use[0]), p1 = exp2f(s[n][1] - m_use[0]);
    const float p2 = exp2f(s[n][2] - m_use[1]), p3 = exp2f(s[n][3] - m_use[1]);
    sum[0] += p0 + p1;
    sum[1] += p2 + p3;
    const int byte = (lane & 3) * 4;
    *reinterpret_cast<uint32_t*>(sp + swz(r0, n, kPRowBytes) + byte) = pack2<MT>(p0, p1);
    *reinterpret_cast<uint32_t*>(sp + swz(r0 + 8, n, kPRowBytes) + byte) = pack2<MT>(p2, p3);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) st.l[j] = st.l[j] * alpha[j] + sum[j];
  rescale_o(st, alpha);
}

}  // namespace dualops::cuda::mla

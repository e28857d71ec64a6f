// End of one request piece: finish the row sums of the warp pair of row group g (warp g of each
// warpgroup c = 0, 1: value columns 256c .. 256c + 255), then write either the final out / lse
// (request with one split) or the fp32 partials of its split slot. Every thread of the CTA calls
// it. Normalization keeps NaN: a row whose sum is 0 is scaled by 0 (0 * NaN stays NaN, as the
// reference's p = 0 times a NaN value), and a NaN sum gives NaN out and lse.
// The pair's sums are exchanged across a CTA barrier that also orders through an mbarrier
// (common::MbarHandoffs::cta_barrier): the warpgroups reach the epilogue at different times,
// after unequal numbers of their own barriers.
#pragma once
#include "../common/tma.cuh"
#include "mla_attend.cuh"

namespace dualops::cuda::mla {

// kHanded: no exchange; warpgroup 0 holds the rows' sums and handed them to warpgroup 1 in the
// tile loop (red_sum[row], wg_put_sums, before its last hand-off; has_tiles: the piece had a
// tile, else every sum is 0). Otherwise both halves' sums are exchanged through red_sum.
template <class Tr, bool kHanded = false>
__device__ __forceinline__ void write_piece(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, RowState& st,
                                            float* red_sum, int b, int row0, int row_end, int n_splits, int slot, int g,
                                            int c, common::MbarHandoffs& cta, bool has_tiles = true) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31;
  const int r0 = g * 16 + (lane >> 2);
  float l[2];
  quad_row_sums(st, l);
  if constexpr (!kHanded) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if ((lane & 3) == 0) red_sum[c * kRows + r0 + 8 * j] = l[j];
    cta.template cta_barrier<kHandCta>();
  }
  const bool final_out = n_splits == 1;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int gr = row0 + r0 + 8 * j;
    if (gr >= row_end) continue;
    float lt;
    if constexpr (kHanded) {
      lt = c == 0 ? l[j] : has_tiles ? red_sum[r0 + 8 * j] : 0.f;
    } else {
      lt = l[j] + red_sum[(c ^ 1) * kRows + r0 + 8 * j];
    }
    const bool empty = lt == 0.f;
    float inv = empty ? 0.f : 1.f / lt;
    const float lse = empty ? (final_out ? INFINITY : -INFINITY) : (st.m[j] + log2f(lt)) * 0.6931471805599453f;
    const int i = gr / t.h_q, h = gr - i * t.h_q;
    if (final_out) {
      if (p.attn_sink != nullptr && !empty)
        inv *= 1.f / (1.f + expf(static_cast<const float*>(p.attn_sink)[h] - lse));
      MT* out = static_cast<MT*>(p.out) + ((static_cast<int64_t>(b) * t.s_q + i) * t.h_q + h) * kDv + c * 256 +
                (lane & 3) * 2;
#pragma unroll
      for (int n = 0; n < 32; ++n) store2<MT>(out + n * 8, st.o[n][2 * j] * inv, st.o[n][2 * j + 1] * inv);
      if (c == 0 && (lane & 3) == 0)
        static_cast<float*>(p.lse)[(static_cast<int64_t>(b) * t.h_q + h) * t.s_q + i] = lse;
    } else {
      const int64_t prow = static_cast<int64_t>(slot) * t.q_rows + gr;
      float* oa = static_cast<float*>(p.o_accum) + prow * kDv + c * 256 + (lane & 3) * 2;
#pragma unroll
      for (int n = 0; n < 32; ++n)
        *reinterpret_cast<float2*>(oa + n * 8) = make_float2(st.o[n][2 * j] * inv, st.o[n][2 * j + 1] * inv);
      if (c == 0 && (lane & 3) == 0) static_cast<float*>(p.lse_accum)[prow] = lse;
    }
  }
  // The pair's next piece writes red_sum again: both warps have read this piece's sums first.
  // (kHanded: the next piece's first CTA barrier orders that; this CTA barrier, on which no access
  // depends, measured 2-5 % faster than none.)
  if constexpr (!kHanded) {
    cta.template cta_barrier<kHandCta>();
  } else {
    __syncthreads();
  }
}

}  // namespace dualops::cuda::mla

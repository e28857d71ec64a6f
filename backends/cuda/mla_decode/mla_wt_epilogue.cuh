// End of one request piece of the transposed-tile wgmma MLA kernel: the row sums finished over
// the warpgroup (lanes, then its 4 warps through shared memory), then either the final out / lse
// (request with one split) or the fp32 partials of its split slot, with write_piece's semantics
// (mla_epilogue.cuh): an empty row gives out 0 and lse +inf (partials: -inf), a NaN sum NaN,
// attn_sink scales the final out. Warpgroup c writes value dims 256c .. 256c + 255.
#pragma once
#include "mla_wt_attend.cuh"

namespace dualops::cuda::mla {

template <class Tr, class L>
__device__ __forceinline__ void wt_write_piece(const MlaDecodeParams& p, const MlaDecodeTiling& t, WtState<L>& st,
                                               float* red, int b, int n_splits, int slot, int c) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
  named_barrier(1 + c, 128);  // (the warpgroup's last reader of red is done)
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) {
    float l = st.l[k];
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    if (lane < 4) red[w * L::kNq + wt_col(k, lane)] = l;
  }
  named_barrier(1 + c, 128);
  const bool final_out = n_splits == 1;
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) {
    const int gr = wt_col(k, lane);
    if (gr >= t.q_rows) continue;
    const float lt = (red[gr] + red[L::kNq + gr]) + (red[2 * L::kNq + gr] + red[3 * L::kNq + gr]);
    const bool empty = lt == 0.f;
    float inv = empty ? 0.f : 1.f / lt;
    const float lse = empty ? (final_out ? INFINITY : -INFINITY) : (st.m[k] + log2f(lt)) * 0.6931471805599453f;
    const int i = gr / t.h_q, h = gr - i * t.h_q;
    const int dim0 = 256 * c + 16 * w + (lane >> 2);
    const int e0 = 4 * (k >> 1) + (k & 1);  // accumulator entries e0 (dim0 + 64 b) and e0 + 2 (+ 8)
    float o[4][2];  // (kCat: hi part + lo part, NQ / 2 entries apart)
#pragma unroll
    for (int bb = 0; bb < 4; ++bb)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        o[bb][hh] = st.o[bb][e0 + 2 * hh];
        if constexpr (L::kCat) o[bb][hh] += st.o[bb][e0 + 2 * hh + L::kNq / 2];
      }
    if (final_out) {
      if (p.attn_sink != nullptr && !empty)
        inv *= 1.f / (1.f + expf(static_cast<const float*>(p.attn_sink)[h] - lse));
      MT* out = static_cast<MT*>(p.out) + ((static_cast<int64_t>(b) * t.s_q + i) * t.h_q + h) * kDv + dim0;
#pragma unroll
      for (int bb = 0; bb < 4; ++bb) {
        out[64 * bb] = static_cast<MT>(o[bb][0] * inv);
        out[64 * bb + 8] = static_cast<MT>(o[bb][1] * inv);
      }
      if (c == 0 && w == 0 && lane < 4)
        static_cast<float*>(p.lse)[(static_cast<int64_t>(b) * t.h_q + h) * t.s_q + i] = lse;
    } else {
      const int64_t prow = static_cast<int64_t>(slot) * t.q_rows + gr;
      float* oa = static_cast<float*>(p.o_accum) + prow * kDv + dim0;
#pragma unroll
      for (int bb = 0; bb < 4; ++bb) {
        oa[64 * bb] = o[bb][0] * inv;
        oa[64 * bb + 8] = o[bb][1] * inv;
      }
      if (c == 0 && w == 0 && lane < 4) static_cast<float*>(p.lse_accum)[prow] = lse;
    }
  }
}

}  // namespace dualops::cuda::mla

// End of one request piece of the transposed-tile wgmma MLA kernel: each warpgroup finishes its
// chain's row sums (lanes, then its 4 warps through shared memory), the two chains' states are
// merged through shared memory by the log-sum-exp rule (as one more tile of the online softmax:
// an infinite max subtracts 0, a chain that saw no visible key adds nothing), then either the
// final out / lse (request with one split) or the fp32 partials of its split slot, with
// write_piece's semantics (mla_epilogue.cuh): an empty row gives out 0 and lse +inf (partials:
// -inf), a NaN sum NaN, attn_sink scales the final out. Warpgroup c merges and writes value
// dims 256c .. 256c + 255.
#pragma once
#include "mla_wt_attend.cuh"

namespace dualops::cuda::mla {

// Weight of a chain state with max m_c in the merged state of max m (mu: m, or 0 when infinite).
__device__ __forceinline__ float wt_chain_scale(float m_c, float m, float mu) {
  return m_c == -INFINITY ? (m == -INFINITY ? 1.f : 0.f) : exp2f((isinf(m_c) ? 0.f : m_c) - mu);
}

// xch: the merge areas (float [2 NQ + 4 kAccO 128] per warpgroup, at the start of its ring: the
// caller has waited for its copies). Called by the whole CTA.
template <class Tr, class L>
__device__ __forceinline__ void wt_write_piece(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, WtState<L>& st,
                                               float* red, float* xch, int b, int row0, int row_end,
                                               int n_splits, int slot, WgBarrier& wb) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3, tid = threadIdx.x & 127;
  const int c = wb.c;
  wb.level();  // (the last readers of red are done)
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) {
    float l = st.l[k];
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    if (lane < 4) red[w * L::kNq + wt_col(k, lane)] = l;
  }
  wb.sync();
  float* mine = xch + c * (L::kRingBytes / 4);
  const float* other = xch + (c ^ 1) * (L::kRingBytes / 4);
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) {
    const int gr = wt_col(k, lane);
    st.l[k] = (red[gr] + red[L::kNq + gr]) + (red[2 * L::kNq + gr] + red[3 * L::kNq + gr]);
    if (w == 0 && lane < 4) {
      mine[gr] = st.m[k];
      mine[L::kNq + gr] = st.l[k];
    }
  }
  float o_mine[4][L::kAccO];  // (selects: register arrays take compile-time indices only)
#pragma unroll
  for (int bb = 0; bb < 4; ++bb)
#pragma unroll
    for (int i = 0; i < L::kAccO; ++i) {
      o_mine[bb][i] = c ? st.o[4 + bb][i] : st.o[bb][i];
      mine[2 * L::kNq + (bb * L::kAccO + i) * 128 + tid] = c ? st.o[bb][i] : st.o[4 + bb][i];
    }
  __syncthreads();  // both chains' states visible
  float sa[L::kCols], sb[L::kCols];
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) {
    const int gr = wt_col(k, lane);
    const float mb = other[gr], lb = other[L::kNq + gr];
    const float m = fmaxf(st.m[k], mb);
    const float mu = isinf(m) ? 0.f : m;
    sa[k] = wt_chain_scale(st.m[k], m, mu);
    sb[k] = wt_chain_scale(mb, m, mu);
    st.l[k] = st.l[k] * sa[k] + lb * sb[k];
    st.m[k] = m;
  }
#pragma unroll
  for (int bb = 0; bb < 4; ++bb)
#pragma unroll
    for (int i = 0; i < L::kAccO; ++i) {
      const int k = 2 * ((i >> 2) % (L::kNq / 8)) + (i & 1);
      o_mine[bb][i] = o_mine[bb][i] * sa[k] + other[2 * L::kNq + (bb * L::kAccO + i) * 128 + tid] * sb[k];
    }
  const bool final_out = n_splits == 1;
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) {
    const int gr = row0 + wt_col(k, lane);  // (the tile's column k is q row row0 + k)
    if (gr >= row_end) continue;
    const float lt = st.l[k];
    const bool empty = lt == 0.f;
    float inv = empty ? 0.f : 1.f / lt;
    const float lse = empty ? (final_out ? INFINITY : -INFINITY) : (st.m[k] + log2f(lt)) * 0.6931471805599453f;
    const int i = gr / t.h_q, h = gr - i * t.h_q;
    const int dim0 = 256 * c + 16 * w + (lane >> 2);
    const int e0 = 4 * (k >> 1) + (k & 1);  // accumulator entries e0 (dim0 + 64 b) and e0 + 2 (+ 8)
    float o[4][2];
#pragma unroll
    for (int bb = 0; bb < 4; ++bb)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) o[bb][hh] = o_mine[bb][e0 + 2 * hh];
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

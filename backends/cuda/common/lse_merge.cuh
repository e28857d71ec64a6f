// Log-sum-exp merge of partial attention results (split-KV "flash decode" partials, or the
// warps' partials of one CTA): each partial is (lse, normalized output) of some key range.
#pragma once
#include <cmath>

#include "convert.cuh"
#include "ptx.cuh"

namespace dualops::cuda::common {

// Log-sum-exp merge of split partials, four output columns at a time: each split brings its
// lse (natural log, -inf when it saw no key) and its normalized output; the state keeps the
// running max m, the weight sum l (relative to m) and the weighted output sum. A NaN partial (lse
// or output) makes the merged row NaN: the max propagates NaN, and l > 0 is tested as !(l <= 0).
struct PartialMerge {
  float m = -INFINITY, l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  // Splits s0, s0 + step, ... (< s_end) of one (row, 4 columns): all K loads of a round go out
  // at once, so a round costs one memory round trip; each split is a state of weight 1.
  // load(s, lse, o) fetches split s.
  template <int K, typename Load>
  __device__ __forceinline__ void add_splits(int s0, int s_end, int step, Load&& load) {
    for (; s0 < s_end; s0 += K * step) {
      PartialMerge sp[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int s = s0 + k * step;
        sp[k].l = 1.f;
        if (s < s_end) load(s, sp[k].m, sp[k].acc);  // (m -inf, acc 0 past s_end: weight 0)
      }
      merge_all<K>([&](int k) -> const PartialMerge& { return sp[k]; });
    }
  }
  // N other states of the same row and columns, get(k) the k-th: the maximum first, then every
  // weight at once, so the merge is one short dependent chain whatever N (merging them one by
  // one would chain N rescales).
  template <int N, typename Get>
  __device__ __forceinline__ void merge_all(Get&& get) {
    float mx = m;
#pragma unroll
    for (int k = 0; k < N; ++k) mx = fmax_nan(mx, get(k).m);
    if (mx == -INFINITY) return;  // no key in any state (NaN goes on: every weight turns NaN)
    const float sc = __expf(m - mx);  // 0 while m is -inf
    l *= sc, acc.x *= sc, acc.y *= sc, acc.z *= sc, acc.w *= sc;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const PartialMerge& o = get(k);
      const float w = __expf(o.m - mx);  // 0 for a state without keys
      l += o.l * w;
      acc.x += o.acc.x * w, acc.y += o.acc.y * w, acc.z += o.acc.z * w, acc.w += o.acc.w * w;
    }
    m = mx;
  }
  // out = weighted mean (0 when no split saw a key); lse = m + log(l) (+inf then; +inf too where
  // a split holds a +inf score: its weight exp(inf - inf) makes out NaN, as in one softmax).
  template <typename QT>
  __device__ __forceinline__ void store(QT* dst, int c) const {
    const float inv = !(l <= 0.f) ? 1.f / l : 0.f;  // (NaN l: NaN out)
    store2<QT>(dst, c, c + 1, acc.x * inv, acc.y * inv);
    store2<QT>(dst, c + 2, c + 3, acc.z * inv, acc.w * inv);
  }
  __device__ __forceinline__ float lse() const {
    return m == INFINITY ? m : !(l <= 0.f) ? m + __logf(l) : INFINITY;
  }
};

}  // namespace dualops::cuda::common

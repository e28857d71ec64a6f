// Merge of the split partials of every request with more than one split: per q row, log-sum-exp
// weights over the request's split slots. Every slot is weighted, also those of weight 0 (a slot
// that saw no key has lse -inf and o 0, or NaN when a NaN value met p = 0, which must reach the
// output as in the reference). Launched as a programmatic dependent of the split kernel.
#pragma once
#include "mla_config.cuh"

namespace dualops::cuda::mla {

constexpr int kCombineWarps = 4;  // one q row per warp, 16 value columns per lane

template <typename MT>
__global__ void __launch_bounds__(kCombineWarps * 32)
    mla_combine_kernel(const __grid_constant__ MlaDecodeParams p, const __grid_constant__ MlaDecodeTiling t) {
  pdl_wait();  // the split kernel's partials are complete and visible
  const int b = blockIdx.y, lane = threadIdx.x & 31;
  const int row = blockIdx.x * kCombineWarps + (threadIdx.x >> 5);
  const int* ns = static_cast<const int*>(p.plan) + kHeaderInts + t.num_sm_parts * t.part_stride;
  const int first = ns[b], n = ns[b + 1] - first;
  if (n <= 1 || row >= t.q_rows) return;
  const float* la = static_cast<const float*>(p.lse_accum);
  const float* oa = static_cast<const float*>(p.o_accum);
  float m = -INFINITY;
  for (int s = 0; s < n; ++s) m = fmaxf(m, __ldcg(la + static_cast<int64_t>(first + s) * t.q_rows + row));
  const float m_use = isinf(m) ? 0.f : m;  // an infinite max subtracts 0: a +inf split gives lse +inf, out NaN
  float acc[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) acc[k] = 0.f;
  float sum = 0.f;
  for (int s = 0; s < n; ++s) {
    const int64_t prow = static_cast<int64_t>(first + s) * t.q_rows + row;
    const float w = expf(__ldcg(la + prow) - m_use);
    sum += w;
    const float4* o = reinterpret_cast<const float4*>(oa + prow * kDv);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 v = __ldcg(o + k * 32 + lane);
      acc[4 * k] += w * v.x;
      acc[4 * k + 1] += w * v.y;
      acc[4 * k + 2] += w * v.z;
      acc[4 * k + 3] += w * v.w;
    }
  }
  const bool empty = sum == 0.f;
  const float lse = empty ? INFINITY : m_use + logf(sum);
  const int i = row / t.h_q, h = row - i * t.h_q;
  float inv = empty ? 0.f : 1.f / sum;
  if (p.attn_sink != nullptr && !empty) inv *= 1.f / (1.f + expf(static_cast<const float*>(p.attn_sink)[h] - lse));
  MT* out = static_cast<MT*>(p.out) + ((static_cast<int64_t>(b) * t.s_q + i) * t.h_q + h) * kDv;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    MT* dst = out + (k * 32 + lane) * 4;
    store2<MT>(dst, acc[4 * k] * inv, acc[4 * k + 1] * inv);
    store2<MT>(dst + 2, acc[4 * k + 2] * inv, acc[4 * k + 3] * inv);
  }
  if (lane == 0) static_cast<float*>(p.lse)[(static_cast<int64_t>(b) * t.h_q + h) * t.s_q + i] = lse;
}

}  // namespace dualops::cuda::mla

// Split-KV combine: merges the fp32 partials of every split of a (batch, KV head, q row) with
// log-sum-exp weights into out and lse. A row no split saw gets out 0 and lse +inf.
// One CTA per (row, 32-column chunk): the split weights are computed in parallel into shared
// memory, then groups of 8 threads accumulate different splits (16 groups x 4 loads in flight:
// 64 splits per round trip), then the groups' sums are added. Work per row is tiny; what matters
// is few dependent memory round trips (one CTA per whole row made 8 of them at 128 splits).
// The split kernel merges small split counts itself (ifa_split_kernel.cuh); this kernel takes
// the calls whose partials are too many for one CTA to read quickly.
#pragma once
#include <dualops/params.h>

#include "ifa_split_kernel.cuh"

namespace dualops::cuda::ifa {

constexpr int kCombineThreads = 128;
constexpr int kCombineCols = 32;  // head-dim columns of one combine CTA

template <typename QT, int D>
__global__ void __launch_bounds__(kCombineThreads)
    ifa_combine_kernel(const __grid_constant__ IncreFlashAttentionParams p,
                       const __grid_constant__ IncreFlashAttentionTiling t) {
  constexpr int TPG = kCombineCols / 4;            // threads per split group (one float4 each)
  constexpr int GROUPS = kCombineThreads / TPG;    // 16 splits accumulated at a time
  static_assert(D % kCombineCols == 0, "whole column chunks");
  extern __shared__ float wts[];                   // [num_splits] weights, then [GROUPS][kCombineCols] sums
  __shared__ float red[kCombineThreads / 32];
  __shared__ float stat[2];
  // Launched as a programmatic dependent of the split kernel: wait until its partials are
  // complete and visible (a no-op when launched the ordinary way).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int q_rows = t.q_rows, ns = t.num_splits;
  const int64_t row = blockIdx.x;
  const int r = static_cast<int>(row % q_rows);
  const int64_t bh = row / q_rows;  // b * h_kv + kvh
  const int kvh = static_cast<int>(bh % t.h_kv), b = static_cast<int>(bh / t.h_kv);
  const int gh = r / t.s_q, i = r - gh * t.s_q, h = kvh * t.group + gh;
  const float* la = static_cast<const float*>(p.lse_accum) + bh * ns * q_rows + r;  // split stride q_rows

  float mx = -INFINITY;
  for (int s = tid; s < ns; s += kCombineThreads) {
    const float v = la[static_cast<int64_t>(s) * q_rows];
    wts[s] = v;
    mx = fmaxf(mx, v);
  }
  mx = warp_max(mx);
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  if (tid == 0) {
    float m = red[0];
    for (int w = 1; w < kCombineThreads / 32; ++w) m = fmaxf(m, red[w]);
    stat[0] = m;
  }
  __syncthreads();
  mx = stat[0];
  QT* dst = static_cast<QT*>(p.out) + b * p.out_stride_b + i * p.out_stride_s + h * p.out_stride_h;
  float* lse = static_cast<float*>(p.lse) + (static_cast<int64_t>(b) * t.h_q + h) * t.s_q + i;
  const int col0 = blockIdx.y * kCombineCols;
  if (mx == -INFINITY) {  // no split saw a key
    for (int d = tid * 2; d < kCombineCols; d += 2 * kCombineThreads) store2<QT>(dst, col0 + d, col0 + d + 1, 0.f, 0.f);
    if (tid == 0 && blockIdx.y == 0) *lse = INFINITY;
    return;
  }
  float l = 0.f;
  for (int s = tid; s < ns; s += kCombineThreads) {
    const float w = __expf(wts[s] - mx);  // each thread rewrites only the entries it read
    wts[s] = w;
    l += w;
  }
  l = warp_sum(l);
  __syncthreads();  // red / wts reuse
  if (lane == 0) red[warp] = l;
  __syncthreads();
  if (tid == 0) {
    float sum = 0.f;
    for (int w = 0; w < kCombineThreads / 32; ++w) sum += red[w];
    stat[1] = sum;
  }
  __syncthreads();
  l = stat[1];

  const int grp = tid / TPG, c = col0 + (tid % TPG) * 4;
  const float* oa = static_cast<const float*>(p.o_accum) + (bh * ns * q_rows + r) * D + c;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  int s = grp;
  for (; s + 3 * GROUPS < ns; s += 4 * GROUPS) {  // four splits' loads in flight per thread
    float4 v[4];
    float w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[k] = *reinterpret_cast<const float4*>(oa + static_cast<int64_t>(s + k * GROUPS) * q_rows * D);
      w[k] = wts[s + k * GROUPS];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      acc.x += w[k] * v[k].x, acc.y += w[k] * v[k].y, acc.z += w[k] * v[k].z, acc.w += w[k] * v[k].w;
    }
  }
  for (; s < ns; s += GROUPS) {
    const float4 v = *reinterpret_cast<const float4*>(oa + static_cast<int64_t>(s) * q_rows * D);
    const float w = wts[s];
    acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
  }
  float4* sums = reinterpret_cast<float4*>(wts + ((ns + 3) & ~3));  // [GROUPS][TPG]
  sums[grp * TPG + tid % TPG] = acc;
  __syncthreads();
  if (grp == 0) {
    for (int k = 1; k < GROUPS; ++k) {
      const float4 v = sums[k * TPG + tid];
      acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
    }
    const float inv = 1.f / l;
    store2<QT>(dst, c, c + 1, acc.x * inv, acc.y * inv);
    store2<QT>(dst, c + 2, c + 3, acc.z * inv, acc.w * inv);
    if (tid == 0 && blockIdx.y == 0) *lse = mx + __logf(l);
  }
}

inline int combine_smem_bytes(int num_splits) {
  return ((num_splits + 3) & ~3) * 4 + kCombineThreads * 4 * 4;  // weights, [GROUPS][TPG] float4 sums
}

}  // namespace dualops::cuda::ifa

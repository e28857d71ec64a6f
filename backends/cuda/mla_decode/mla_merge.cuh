// Merge of a split request's fp32 partials by the log-sum-exp rule, shared by the combine kernel
// (mla_combine_kernel.cuh) and the in-kernel merge of the `wgmma_t` split kernel (the last CTA of
// a request to finish merges, behind an arrival counter). Every slot is weighted, also those of
// weight 0 (a slot that saw no key has lse -inf and o 0, or NaN when a NaN value met p = 0, which
// must reach the output as in the reference); an infinite max subtracts 0 (a +inf slot gives lse
// +inf, out NaN); an empty row gives out 0 and lse +inf; attn_sink scales the merged out.
#pragma once
#include "mla_config.cuh"

namespace dualops::cuda::mla {

// The merged row's out / lse from the running max m_use, the weight sum and the lane's 16 value
// columns (acc[4k + e] is column (32k + lane) * 4 + e).
template <typename MT>
__device__ __forceinline__ void mla_merge_write(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, int b, int row,
                                                float m_use, float sum, const float (&acc)[16], int lane) {
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

// acc += w * the lane's 16 columns v (4 float4).
__device__ __forceinline__ void mla_merge_add(float (&acc)[16], float w, const float4 (&v)[4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    acc[4 * k] += w * v[k].x;
    acc[4 * k + 1] += w * v[k].y;
    acc[4 * k + 2] += w * v[k].z;
    acc[4 * k + 3] += w * v[k].w;
  }
}

// One warp merges q row `row` of request b (split slots first .. first + n - 1) into out / lse:
// 16 value columns per lane, slot by slot. The partials come from other CTAs: L2 loads (__ldcg),
// not L1.
template <typename MT>
__device__ __forceinline__ void mla_merge_row_many(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, int b, int row,
                                              int first, int n, int lane) {
  const float* la = static_cast<const float*>(p.lse_accum);
  const float* oa = static_cast<const float*>(p.o_accum);
  float m = -INFINITY;
  for (int s = 0; s < n; ++s) m = fmaxf(m, __ldcg(la + static_cast<int64_t>(first + s) * t.q_rows + row));
  const float m_use = isinf(m) ? 0.f : m;
  float acc[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) acc[k] = 0.f;
  float sum = 0.f;
  for (int s = 0; s < n; ++s) {
    const int64_t prow = static_cast<int64_t>(first + s) * t.q_rows + row;
    const float w = expf(__ldcg(la + prow) - m_use);
    sum += w;
    const float4* o = reinterpret_cast<const float4*>(oa + prow * kDv);
    float4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = __ldcg(o + k * 32 + lane);
    mla_merge_add(acc, w, v);
  }
  mla_merge_write<MT>(p, t, b, row, m_use, sum, acc, lane);
}

// Slots up to which mla_merge_row_few keeps every lse in registers.
constexpr int kMergeFewSlots = 4;

// mla_merge_row_many for n <= kMergeFewSlots: the lse of every slot and the partials of the first two
// are loaded before the first use, so the row waits for one round trip to L2 per pair of slots
// instead of two per slot. The arithmetic is mla_merge_row_many's, in the same order.
template <typename MT>
__device__ __forceinline__ void mla_merge_row_few(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, int b, int row,
                                                  int first, int n, int lane) {
  const float* la = static_cast<const float*>(p.lse_accum);
  const float* oa = static_cast<const float*>(p.o_accum);
  float l[kMergeFewSlots];
  float4 v[2][4];
  auto load_pair = [&](int s0) {
#pragma unroll
    for (int s = 0; s < 2; ++s)
      if (s0 + s < n) {
        const int64_t prow = static_cast<int64_t>(first + s0 + s) * t.q_rows + row;
        const float4* o = reinterpret_cast<const float4*>(oa + prow * kDv);
#pragma unroll
        for (int k = 0; k < 4; ++k) v[s][k] = __ldcg(o + k * 32 + lane);
      }
  };
#pragma unroll
  for (int s = 0; s < kMergeFewSlots; ++s)
    l[s] = s < n ? __ldcg(la + static_cast<int64_t>(first + s) * t.q_rows + row) : -INFINITY;
  load_pair(0);
  float m = -INFINITY;
#pragma unroll
  for (int s = 0; s < kMergeFewSlots; ++s) m = fmaxf(m, l[s]);
  const float m_use = isinf(m) ? 0.f : m;
  float acc[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) acc[k] = 0.f;
  float sum = 0.f;
#pragma unroll
  for (int s0 = 0; s0 < kMergeFewSlots; s0 += 2) {
    if (s0 >= n) break;
    if (s0 > 0) load_pair(s0);
#pragma unroll
    for (int s = 0; s < 2; ++s)
      if (s0 + s < n) {
        const float w = expf(l[s0 + s] - m_use);
        sum += w;
        mla_merge_add(acc, w, v[s]);
      }
  }
  mla_merge_write<MT>(p, t, b, row, m_use, sum, acc, lane);
}

// One warp merges q row `row` of request b (split slots first .. first + n - 1) into out / lse.
template <typename MT>
__device__ __forceinline__ void mla_merge_row(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, int b, int row,
                                              int first, int n, int lane) {
  if (n <= kMergeFewSlots)
    mla_merge_row_few<MT>(p, t, b, row, first, n, lane);
  else
    mla_merge_row_many<MT>(p, t, b, row, first, n, lane);
}

// In-kernel merge, called by the whole CTA after it wrote its partials of request b (n > 1
// splits from slot `first`) for its q rows row0 .. min(row0 + 64, row_end) - 1 (row block
// blockIdx.x). The arrival counter of (b, row block) in p.merge_counters counts the request's pieces: after the barrier, thread 0's
// acq_rel atomic releases every thread's partials (cumulativity through the barrier) and
// acquires the other CTAs'; the CTA that brings the count to n sets it back to 0 (the buffer is
// all zeros between calls and graph replays) and merges the rows, a warp per row.
template <typename MT>
__device__ __forceinline__ void mla_merge_in_kernel(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, int b,
                                                    int first, int n, int row0, int row_end) {
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    int* ctr = static_cast<int*>(p.merge_counters) + static_cast<int64_t>(b) * gridDim.x + blockIdx.x;
    last = common::atom_add_acq_rel_gpu(ctr, 1) == n - 1;
    if (last) *ctr = 0;  // (no other CTA of this call touches it again)
  }
  if (!__syncthreads_or(last)) return;
  const int rows = min(kRows, row_end - row0);
  const int nw = blockDim.x >> 5, lane = threadIdx.x & 31;
  for (int rr = threadIdx.x >> 5; rr < rows; rr += nw) mla_merge_row<MT>(p, t, b, row0 + rr, first, n, lane);
}

}  // namespace dualops::cuda::mla

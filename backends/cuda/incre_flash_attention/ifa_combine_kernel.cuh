// Split-KV combine: merges the fp32 partials of every split of a (batch, KV head, q row) with
// log-sum-exp weights into out and lse. A row no split saw gets out 0 and lse +inf.
// One CTA per (row, 32-column chunk): 16 groups of 8 threads (a float4 each) take every 16th
// split and load all of their splits' lse values and outputs at once (PartialMerge: one L2
// round trip for up to 128 splits), then group 0 merges the 16 groups' states through shared
// memory (one barrier; all 15 at once, PartialMerge::merge_all). Work per row is tiny; what
// matters is few dependent round trips and barriers.
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
    ifa_combine_kernel(const __grid_constant__ IncreFlashAttentionCudaParams p,
                       const __grid_constant__ IncreFlashAttentionCudaTiling t) {
  constexpr int TPG = kCombineCols / 4;          // threads per split group (one float4 each)
  constexpr int GROUPS = kCombineThreads / TPG;  // splits g, g + GROUPS, ... per group
  static_assert(D % kCombineCols == 0, "whole column chunks");
  __shared__ __align__(16) unsigned char part_raw[GROUPS * TPG * sizeof(PartialMerge)];
  auto part = reinterpret_cast<PartialMerge(*)[TPG]>(part_raw);  // [GROUPS][TPG]
  const int tid = threadIdx.x;
  const int q_rows = t.q_rows, ns = t.num_splits;
  const int64_t row = blockIdx.x + static_cast<int64_t>(t.whole_groups) * q_rows;  // whole groups: no partials
  const int r = static_cast<int>(row % q_rows);
  const int64_t bh = row / q_rows;  // b * h_kv + kvh
  const int kvh = static_cast<int>(bh % t.h_kv), b = static_cast<int>(bh / t.h_kv);
  const int gh = r / t.s_q, i = r - gh * t.s_q, h = kvh * t.group + gh;
  const int grp = tid / TPG, c = blockIdx.y * kCombineCols + (tid % TPG) * 4;
  const float* la = static_cast<const float*>(p.lse_accum) + bh * ns * q_rows + r;  // split stride q_rows
  const float* oa = static_cast<const float*>(p.o_accum) + (bh * ns * q_rows + r) * D + c;
  // Launched as a programmatic dependent of the split kernel: let the next kernel (the next
  // call's split kernel) be scheduled now, so its CTAs start on the SMs the split kernel frees
  // and do their set-up while this kernel runs; then wait until the partials are complete and
  // visible (a no-op when launched the ordinary way).
  pdl_launch_dependents();
  pdl_wait();
  PartialMerge st;
  st.add_splits<8>(grp, ns, GROUPS, [&](int s, float& lse, float4& o) {
    lse = __ldcg(la + static_cast<int64_t>(s) * q_rows);
    o = __ldcg(reinterpret_cast<const float4*>(oa + static_cast<int64_t>(s) * q_rows * D));
  });
  part[grp][tid % TPG] = st;
  __syncthreads();
  if (grp != 0) return;
  st.merge_all<GROUPS - 1>([&](int k) -> const PartialMerge& { return part[k + 1][tid]; });
  st.store<QT>(static_cast<QT*>(p.out) + b * p.out_stride_b + i * p.out_stride_s + h * p.out_stride_h, c);
  if (tid == 0 && blockIdx.y == 0) static_cast<float*>(p.lse)[(static_cast<int64_t>(b) * t.h_q + h) * t.s_q + i] = st.lse();
}

}  // namespace dualops::cuda::ifa

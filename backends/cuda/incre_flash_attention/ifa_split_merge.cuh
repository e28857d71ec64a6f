// Stage of the split kernel: the merge of split-KV partials inside the split kernel (arrival
// counter or thread-block cluster; the combine kernel takes the other calls).
#pragma once
#include <dualops/params.h>

#include "ifa_config.cuh"
#include "ifa_primitives.cuh"
#include "ifa_tiling.h"

namespace dualops::cuda::ifa {

// Arrival counters of the in-kernel split merge (p.merge_counters, kMaxMergeGroups int32), one per
// (batch, KV head, q tile) group: the last CTA of a group to finish merges the group's partials
// and sets its counter back to 0, so the buffer is all zeros between calls (and between replays
// of a captured graph). The Python glue keeps one zeroed buffer per stream, so calls running
// concurrently on different streams never share counters. Capacity: kMaxMergeGroups (ifa_tiling.h).

// The last CTA of a split group merges the group's fp32 partials (rows row0 .. row0 + rows - 1
// of units ubase .. ubase + ns - 1) into out / lse, as the combine kernel would: a thread per
// (row, 4 columns), every split's lse and output loaded together (one L2 round trip per 8
// splits; rounds of 16 would take the kernel's registers up and the main loop compiled around
// them would slow down).
template <typename QT, int D, int M_TILE, int NW>
__device__ __forceinline__ void merge_splits(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
                                             int b, int kvh, int64_t ubase, int row0) {
  constexpr int NT = NW * 32, C4 = D / 4;
  const int tid = threadIdx.x;
  const int ns = t.num_splits, q_rows = t.q_rows, s_q = t.s_q;
  const int rows = min(M_TILE, q_rows - row0);
  const float* la = static_cast<const float*>(p.lse_accum) + ubase * q_rows + row0;       // split stride q_rows
  const float* oa = static_cast<const float*>(p.o_accum) + (ubase * q_rows + row0) * D;  // split stride q_rows * D
  for (int slot = tid; slot < rows * C4; slot += NT) {
    const int rr = slot / C4, c = (slot % C4) * 4;
    PartialMerge st;
    // (partials of other CTAs of this grid: L2 loads, not L1)
    st.add_splits<8>(0, ns, 1, [&](int s, float& lse, float4& o) {
      lse = __ldcg(la + rr + static_cast<int64_t>(s) * q_rows);
      o = __ldcg(reinterpret_cast<const float4*>(oa + rr * D + c + static_cast<int64_t>(s) * q_rows * D));
    });
    const int r = row0 + rr, gh = r / s_q, i = r - gh * s_q, h = kvh * t.group + gh;
    st.store<QT>(static_cast<QT*>(p.out) + b * p.out_stride_b + i * p.out_stride_s + h * p.out_stride_h, c);
    if (c == 0) static_cast<float*>(p.lse)[(static_cast<int64_t>(b) * t.h_q + h) * s_q + i] = st.lse();
  }
}

// How the split partials of a (batch, KV head, q tile) group are merged (merge_mode):
//  kMergeKernel   the split kernel writes fp32 partials; the combine kernel follows;
//  kMergeCounter  partials in global memory; the last CTA of the group to arrive (an arrival
//                 counter) merges them (merge_splits);
//  kMergeCluster  the group's CTAs are one thread-block cluster (launch_variant): each keeps
//                 its partial in its own shared memory and, after a cluster barrier, merges a
//                 slice of the rows x columns from every CTA's shared memory (no global round
//                 trip, no atomic).
// The plan's codes (IfaCudaMerge, generated from ops/incre_flash_attention.yaml).
enum MergeMode : int {
  kMergeKernel = IfaCudaMerge::kKernel,
  kMergeCounter = IfaCudaMerge::kCounter,
  kMergeCluster = IfaCudaMerge::kCluster
};

// The CTA's output rows (M_TILE x D fp32, rows kOutPitch floats apart) and lse (M_TILE) in the
// K/V stages after the warps' merge buffer: the partial a cluster merge reads, and the rows an
// 8-bit cache's epilogue stages there (kStageOut). There the rows are padded by 4 floats: a warp
// stores one column of 8 rows x 4 column groups 32 apart (Cfg::pv_d), which rows D floats apart
// put in one bank. Kernels that do not stage keep rows D apart: a different pitch re-schedules
// their main loops.
template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
struct ClusterMergeLayout {
  using C = Cfg<QT, KVT, D, SHAPE>;
  static constexpr bool kStaged = C::kQuant;  // 8-bit epilogues stage their rows (kStageOut)
  static constexpr int kOutPitch = kStaged ? D + 4 : D;
  static constexpr int kOut = C::kWarps * M_TILE * D * 4;  // after ebuf
  static constexpr int kLse = kOut + M_TILE * kOutPitch * 4;
  static constexpr bool kFits = kLse + M_TILE * 4 <= SmemLayout<QT, KVT, D, M_TILE, SHAPE>::kKv;
};
constexpr int kMaxClusterSplits = 8;  // portable cluster size
}  // namespace dualops::cuda::ifa

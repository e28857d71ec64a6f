// Stages of the split kernel after the main loop: the warp merge (each warp's softmax state into
// the rows' final m / l: warp_stats, row_stats; the warps' rescaled output fragments summed
// through shared memory: stash_fragments, write_rows, write_staged_rows, write_lse) and the
// split merge inside the kernel (cluster_merge, counter_merge).
#pragma once
#include <cooperative_groups.h>
#include <dualops/params.h>

#include <cstdint>

#include "ifa_stage_mainloop.cuh"

namespace dualops::cuda::ifa {

// Value scales / offsets of the columns this thread writes (8-bit caches whose scales are not
// in shared memory: fp8): loaded right after the main loop, so that the round trip runs under
// the merge barriers instead of at the store. vsc[k]: scale d0, d1, offset d0, d1 of round k.
template <class K>
__device__ __forceinline__ void v_scales_early(float (&vsc)[K::kSlotRounds][4], const IncreFlashAttentionCudaParams& p,
                                               const Unit& u) {
  using C = typename K::C;
  constexpr int D = K::D, NT = K::NT, NTILES = K::NTILES, kSlots = K::kSlots;
  if constexpr (K::kVScalesEarly) {
    const float* v_scale = static_cast<const float*>(p.v_scale) + u.kvh * D;
    const float* v_offset = p.v_offset ? static_cast<const float*>(p.v_offset) + u.kvh * D : nullptr;
#pragma unroll
    for (int k = 0; k < K::kSlotRounds; ++k) {
      const int slot = K::tid() + k * NT;
      const int ln = slot & 31, jn = (slot >> 5) % NTILES;
      const int d0 = C::pv_d(jn, 2 * (ln & 3)), d1 = C::pv_d(jn, 2 * (ln & 3) + 1);
      const bool in = kSlots % NT == 0 || slot < kSlots;
      vsc[k][0] = in ? __ldg(v_scale + d0) : 0.f, vsc[k][1] = in ? __ldg(v_scale + d1) : 0.f;
      vsc[k][2] = in && v_offset ? __ldg(v_offset + d0) : 0.f, vsc[k][3] = in && v_offset ? __ldg(v_offset + d1) : 0.f;
    }
  }
}

// ---- merge the warps' partial softmax states, then write -------------------------------
// The warp's row sums, and its rows' m / l in shared memory (before the barrier that ends the
// main loop: warp_m / warp_l are not in the K/V stages).
template <class K>
__device__ __forceinline__ void warp_stats(RowState<K>& rs, const SmemRegions& sm, const Unit& u) {
  constexpr int MTILES = K::MTILES, M_TILE = K::M_TILE;
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float l = rs.l_run[mt][hf];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      rs.l_run[mt][hf] = l;
    }
  if (K::tq() == 0) {
#pragma unroll
    for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int rr = mt * 16 + K::g() + 8 * hf;
        // A warp that summed NaN scores (NaN q, key, bias or scale) has a NaN l, also where its
        // reference stayed -inf (every score NaN): l - l turns its reference NaN too, so that the
        // row merge below (a NaN-propagating max) makes the row's out and lse NaN. A +inf score
        // (+inf in pse_shift) leaves the reference +inf and l NaN (its weight: inf - inf): the
        // row's lse is +inf and its out NaN, as in the reference.
        const float m = rs.m_run[mt][hf];
        sm.warp_m[K::warp() * M_TILE + rr] = m == INFINITY ? m : m + (rs.l_run[mt][hf] - rs.l_run[mt][hf]);
        sm.warp_l[K::warp() * M_TILE + rr] = rs.l_run[mt][hf];
      }
  }
}

// A thread per row: the row's max over the warps' references and its weight sum (fin_m, fin_l).
// Warps past the unit's chunk count (n_active) saw no key: their states are skipped.
template <class K>
__device__ __forceinline__ void row_stats(const SmemRegions& sm, int n_active) {
  constexpr int M_TILE = K::M_TILE, NW = K::NW;
  const int tid = threadIdx.x;
  if (tid < M_TILE) {
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w)
      if (w < n_active) mx = fmax_nan(mx, sm.warp_m[w * M_TILE + tid]);  // (a NaN warp makes the row NaN)
    float l = 0.f;
    if (mx != -INFINITY)
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const float mw = w < n_active ? sm.warp_m[w * M_TILE + tid] : -INFINITY;
        if (mw != -INFINITY) l += sm.warp_l[w * M_TILE + tid] * exp2f(mw - mx);
      }
    sm.fin_m[tid] = mx;
    sm.fin_l[tid] = mx == INFINITY ? 1.f : l;  // (+inf score: lse +inf; out NaN through exp2(inf - inf))
  }
}

// Each warp stores its rescaled fragments in fragment order (16 B per lane, no bank
// conflicts); then every thread sums one slot over the warps and writes it out (write_rows).
// (Merging the row states in every thread instead, one barrier less, is slower.) A tile of
// <= 8 q rows (decode with <= 8 q heads per KV head) keeps only rows 0..7 of the m16 fragment,
// 8 B per lane (half_rows): the rows 8..15 are padding.
template <class K>
__device__ __forceinline__ void stash_fragments(const RowState<K>& rs, const SmemRegions& sm, const Unit& u,
                                                int n_active, bool half_rows) {
  constexpr int MTILES = K::MTILES, NTILES = K::NTILES;
  const int warp = K::warp(), lane = K::lane();
  float2* ebuf2 = reinterpret_cast<float2*>(sm.ebuf);  // [NW][NTILES][32] when half_rows
#pragma unroll
  for (int mt = 0; mt < MTILES && warp < n_active; ++mt) {
    float f[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int rr = mt * 16 + K::g() + 8 * hf;
      const float lt = sm.fin_l[rr];
      // (!(lt <= 0): a NaN row l passes NaN on to the output)
      f[hf] = (!(lt <= 0.f) && rs.m_run[mt][hf] != -INFINITY) ? exp2f(rs.m_run[mt][hf] - sm.fin_m[rr]) / lt : 0.f;
    }
    if (half_rows) {
#pragma unroll
      for (int jn = 0; jn < NTILES; ++jn)
        ebuf2[(warp * NTILES + jn) * 32 + lane] = make_float2(rs.acc[0][jn][0] * f[0], rs.acc[0][jn][1] * f[0]);
    } else {
#pragma unroll
      for (int jn = 0; jn < NTILES; ++jn)
        sm.ebuf[((warp * MTILES + mt) * NTILES + jn) * 32 + lane] =
            make_float4(rs.acc[mt][jn][0] * f[0], rs.acc[mt][jn][1] * f[0], rs.acc[mt][jn][2] * f[1],
                        rs.acc[mt][jn][3] * f[1]);
    }
  }
}

// Every thread sums its slots over the warps, applies the value scales / offsets (8-bit caches)
// and writes them: to out (no split), the fp32 partials, or the CTA's rows in shared memory
// (kStageOut, cluster merge). Returns whether this thread wrote an inf or NaN (then
// the exact stage, ifa_stage_exact.cuh, then redoes the tile's rows).
template <class K>
__device__ __forceinline__ bool write_rows(const IncreFlashAttentionCudaParams& p, const Unit& u, const SmemRegions& sm,
                                           const float (&vsc)[K::kSlotRounds][4], int n_active, bool half_rows,
                                           int merge_mode) {
  using QT = typename K::QT;
  using C = typename K::C;
  constexpr int D = K::D, NT = K::NT, NW = K::NW, NTILES = K::NTILES, kSlots = K::kSlots;
  constexpr int kSlotRounds = K::kSlotRounds, kOutPitch = K::kOutPitch;
  const float4* ebuf = sm.ebuf;
  const float2* ebuf2 = reinterpret_cast<const float2*>(sm.ebuf);
  auto to_rows = [&](int rr, int d0, int d1, float v0, float v1) {  // the CTA's rows in shared memory
    float* dst = sm.clu_out + rr * kOutPitch;
    dst[d0] = v0;
    dst[d1] = v1;
  };
  float chk = 0.f;  // x * 0 + chk: stays 0 while every value written is finite
  for (int slot = K::tid(), k = 0; slot < kSlots; slot += NT, ++k) {
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);  // (.z / .w: rows 8..15, unused when half_rows)
    if (half_rows) {
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        if (w >= n_active) break;
        const float2 x = ebuf2[w * kSlots + slot];
        o.x += x.x, o.y += x.y;
      }
    } else {
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        if (w >= n_active) break;
        const float4 x = ebuf[w * kSlots + slot];
        o.x += x.x, o.y += x.y, o.z += x.z, o.w += x.w;
      }
    }
    const int ln = slot & 31, jn = (slot >> 5) % NTILES, mt = (slot >> 5) / NTILES;
    const int d0 = C::pv_d(jn, 2 * (ln & 3)), d1 = C::pv_d(jn, 2 * (ln & 3) + 1);
    float sc0 = 1.f, sc1 = 1.f, of0 = 0.f, of1 = 0.f;
    if constexpr (C::kVScalesInSmem) {
      sc0 = sm.v_scale_s[d0], sc1 = sm.v_scale_s[d1];
      of0 = sm.v_scale_s[D + d0], of1 = sm.v_scale_s[D + d1];
    } else if constexpr (K::kVScalesEarly) {
#pragma unroll
      for (int kk = 0; kk < kSlotRounds; ++kk)  // (a select, not an indexed register array)
        if (kk == k) sc0 = vsc[kk][0], sc1 = vsc[kk][1], of0 = vsc[kk][2], of1 = vsc[kk][3];
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int rr = mt * 16 + (ln >> 2) + 8 * hf, r = K::row0() + rr;
      if (r >= u.q_rows) continue;
      const bool seen = !(sm.fin_l[rr] <= 0.f);  // (a NaN row is seen: NaN out)
      float v0 = hf ? o.z : o.x, v1 = hf ? o.w : o.y;
      v0 = seen ? sc0 * (v0 + of0) : 0.f;
      v1 = seen ? sc1 * (v1 + of1) : 0.f;
      chk = fmaf(v1, 0.f, fmaf(v0, 0.f, chk));
      // (kStageOut first, a branch of its own: folded into the cluster merge's condition, the
      // 16-bit kernels' main loops are scheduled anew)
      if (K::kStageOut) {
        to_rows(rr, d0, d1, v0, v1);
      } else if (u.ns == 1) {
        store2<QT>(static_cast<QT*>(p.out) + sm.out_row[rr], d0, d1, v0, v1);
      } else if (K::kClusterMerge && merge_mode == kMergeCluster) {
        to_rows(rr, d0, d1, v0, v1);
      } else {
        float* dst = static_cast<float*>(p.o_accum) + sm.out_row[rr];
        dst[d0] = v0;
        dst[d1] = v1;
      }
    }
  }
  return chk != 0.f;
}

// kStageOut: the CTA's rows from shared memory to out or the partials, whole 16-B runs of a row
// (not when a cluster merge reads them there).
template <class K>
__device__ __forceinline__ void write_staged_rows(const IncreFlashAttentionCudaParams& p, const Unit& u,
                                                  const SmemRegions& sm, int merge_mode) {
  using QT = typename K::QT;
  constexpr int D = K::D, NT = K::NT, M_TILE = K::M_TILE, kOutPitch = K::kOutPitch;
  if constexpr (K::kStageOut) {
    if (!(K::kClusterMerge && u.ns > 1 && merge_mode == kMergeCluster)) {  // (a cluster merge reads them there)
      __syncthreads();
      constexpr int C4 = D / 4;
      const int rows = min(M_TILE, u.q_rows - K::row0());
      for (int i = K::tid(); i < rows * C4; i += NT) {
        const int rr = i / C4, c = (i % C4) * 4;
        const float4 x = *reinterpret_cast<const float4*>(sm.clu_out + rr * kOutPitch + c);
        if (u.ns == 1) {
          QT* row = static_cast<QT*>(p.out) + sm.out_row[rr];
          store2<QT>(row, c, c + 1, x.x, x.y);
          store2<QT>(row, c + 2, c + 3, x.z, x.w);
        } else {
          *reinterpret_cast<float4*>(static_cast<float*>(p.o_accum) + sm.out_row[rr] + c) = x;
        }
      }
    }
  }
}

// The rows' lse: to lse (no split), the partials' lse, or shared memory (cluster merge).
template <class K>
__device__ __forceinline__ void write_lse(const IncreFlashAttentionCudaParams& p, const Unit& u, const SmemRegions& sm,
                                          int merge_mode) {
  const int tid = K::tid();
  if (tid < K::M_TILE && K::row0() + tid < u.q_rows) {
    const float lt = sm.fin_l[tid];
    // no key: lse +inf in the output, -inf in a partial (weight 0 in the merge)
    const float lse = !(lt <= 0.f) ? (sm.fin_m[tid] + __log2f(lt)) * kLn2 : (u.ns == 1 ? INFINITY : -INFINITY);
    if (K::kClusterMerge && u.ns > 1 && merge_mode == kMergeCluster)
      sm.clu_lse[tid] = lse;
    else
      static_cast<float*>(u.ns == 1 ? p.lse : p.lse_accum)[sm.lse_row[tid]] = lse;
  }
}

// Cluster merge: every CTA of the cluster holds its partial in shared memory; after the barrier
// (release / acquire at cluster scope) CTA k merges slots [k * per, (k + 1) * per) of the
// rows x (D / 4) columns, reading all CTAs' partials through distributed shared memory;
// the second barrier keeps each CTA's shared memory alive until the others are done.
template <class K>
__device__ __forceinline__ void cluster_merge(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
                                              const Unit& u, const SmemRegions& sm) {
  using QT = typename K::QT;
  constexpr int D = K::D, M_TILE = K::M_TILE, kOutPitch = K::kOutPitch;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  constexpr int C4 = D / 4;
  const int ns = u.ns, tid = K::tid();
  const int rows = min(M_TILE, u.q_rows - K::row0());
  const int per = (rows * C4 + ns - 1) / ns;
  const int slot = u.split * per + tid;
  if (tid < per && slot < rows * C4) {
    const int rr = slot / C4, c = (slot % C4) * 4;
    PartialMerge st;
    st.add_splits<kMaxClusterSplits>(0, ns, 1, [&](int s, float& lse, float4& o) {
      lse = *cluster.map_shared_rank(sm.clu_lse + rr, s);
      o = *reinterpret_cast<const float4*>(cluster.map_shared_rank(sm.clu_out + rr * kOutPitch + c, s));
    });
    st.store<QT>(static_cast<QT*>(p.out) + out_row_final(p, u, rr), c);
    if (c == 0) static_cast<float*>(p.lse)[lse_row_final(t, u, rr)] = st.lse();
  }
  cluster.sync();
}

// Counter merge, first half: publish this CTA's partials and count it in. After the barrier,
// thread 0's acq_rel atomic releases every thread's partials (cumulativity through the barrier)
// and acquires the other CTAs'; the CTA that brings the count to ns merges (true: this CTA).
// (Two __threadfence() -- a fence.sc per thread before, one after -- would cost more.)
template <class K>
__device__ __forceinline__ bool counter_arrive(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
                                               const Unit& u, const SmemRegions& sm, int*& ctr) {
  __syncthreads();
  ctr = static_cast<int*>(p.merge_counters) + (static_cast<int64_t>(u.b) * t.h_kv + u.kvh) * gridDim.y + blockIdx.y;
  if (K::tid() == 0) sm.scratch[0] = atom_add_acq_rel_gpu(ctr, 1);
  __syncthreads();
  return sm.scratch[0] == u.ns - 1;
}

}  // namespace dualops::cuda::ifa

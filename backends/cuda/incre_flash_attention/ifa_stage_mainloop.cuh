// Stages of the split kernel's main loop. One step of a warp consumes SUB of its 16-key chunks:
// step_copies (wait for the step's chunks, issue the next ones), step_scores (S = q . k^T on the
// tensor cores), step_softmax (scale, bias, mask, online softmax; p as mma A fragments) and
// step_pv (O += p . v).
#pragma once
#include <dualops/params.h>

#include <cstdint>

#include "ifa_stage_qload.cuh"

namespace dualops::cuda::ifa {

// A warp's online-softmax state of its rows: the output accumulators, the row reference max
// (log2 domain) and the row weight sum.
template <class K>
struct RowState {
  float acc[K::MTILES][K::NTILES][4];
  float m_run[K::MTILES][2], l_run[K::MTILES][2];
};

template <class K>
__device__ __forceinline__ void row_state_init(RowState<K>& rs) {
#pragma unroll
  for (int mt = 0; mt < K::MTILES; ++mt)
#pragma unroll
    for (int j = 0; j < K::NTILES; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) rs.acc[mt][j][e] = 0.f;
#pragma unroll
  for (int mt = 0; mt < K::MTILES; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) rs.m_run[mt][hf] = -INFINITY, rs.l_run[mt][hf] = 0.f;
}

// The step's chunks: first key and K / V rows in shared memory.
template <class K>
struct StepChunks {
  int kc[K::SUB];
  const uint8_t* sk[K::SUB];  // (V rows: kTensorBytesK on)
};

// Lockstep pipeline (kWideLs; launcher: lockstep_keys, the H100's long units): each warp keeps
// one step's chunks in flight (16-bit caches one chunk, 8-bit two) -- the next step's go out
// after the current one's have landed -- and the CTA's warps step together behind a named
// barrier, so the CTA reads 128 (8-bit: 256) consecutive keys at a time with 64 KB in flight
// (D 128). The barrier comes before the wait (warps issue as their own chunks land) or, with
// lockstep_burst (launcher: contiguous caches, units of >= 8192 keys), after it: every warp's
// chunks have landed and the next keys go out in one burst. GPUs of little DRAM bandwidth per
// SM stream faster so (fewer, more orderly requests; the SMs' ends spread less); the others,
// short splits and the burst on paged caches lose (the planner's rules: docs/tuning.md).
// Step st: reads the step's block flags (blk_ok), waits for its chunks and issues the next ones.
template <class K, class Issue>
__device__ __forceinline__ void step_copies(bool (&blk_ok)[K::SUB], uint32_t bad_blocks, int st, int my_issued,
                                            int lock_steps, int lockstep_burst, const Issue& issue) {
  constexpr int SUB = K::SUB, STAGES = K::STAGES, NT = K::NT;
  const int j0 = st * SUB;
  // Read this step's block flags before issuing the next chunks (different bits).
#pragma unroll
  for (int t = 0; t < SUB; ++t) blk_ok[t] = ((bad_blocks >> ((j0 + t) & 31)) & 1u) == 0;
  if constexpr (K::kLockstep) {
    const bool together = st < lock_steps;
    if (together && !lockstep_burst) asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
    cp_async_wait<0>();
    if (together && lockstep_burst) asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
    __syncwarp();
#pragma unroll
    for (int t = 0; t < SUB; ++t)  // stage (j0 + SUB + t) % STAGES: chunk j0 - SUB + t's or older, read
      if (j0 + SUB + t < my_issued) issue(j0 + SUB + t);
    cp_async_commit();
  } else {
#pragma unroll
    for (int t = 0; t < SUB; ++t) {
      if (j0 + STAGES - SUB + t < my_issued) issue(j0 + STAGES - SUB + t);
      cp_async_commit();
    }
    cp_async_wait<STAGES - SUB>();
    __syncwarp();
  }
}

template <class K>
__device__ __forceinline__ void step_chunks(StepChunks<K>& ch, const KvSources<K>& kv, int j0, int stage) {
#pragma unroll
  for (int t = 0; t < K::SUB; ++t) {
    ch.kc[t] = kv.first_key + (j0 + t) * K::kStepKeys;
    const int stg = stage + t < K::STAGES ? stage + t : stage + t - K::STAGES;
    ch.sk[t] = kv.wbase + stg * K::C::kStageBytes;
  }
}

// S = q . k^T for SUB x 16 keys: n-tile nt holds keys 8 * (nt % 2) .. + 7 of chunk nt / 2.
template <class K>
__device__ __forceinline__ void step_scores(float (&s)[K::MTILES][2 * K::SUB][4], const StepChunks<K>& ch,
                                            const Unit& u, const uint4* qfrag) {
  using MT = typename K::MT;
  using C = typename K::C;
  constexpr int MTILES = K::MTILES, SUB = K::SUB, KSTEPS = K::KSTEPS, QP = K::QP, D = K::D;
  const int lane = K::lane(), g = K::g(), tq = K::tq();
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2 * SUB; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
  if constexpr (!C::kQuant) {
    const int mi = lane >> 3, key = ((mi >> 1) << 3) + (lane & 7);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      uint32_t bk[SUB][4];
#pragma unroll
      for (int t = 0; t < SUB; ++t)
        ldmatrix_x4(smem_addr(ch.sk[t] + C::k_at(key, 2 * ks + (mi & 1))), bk[t][0], bk[t][1], bk[t][2], bk[t][3]);
#pragma unroll
      for (int mt = 0; mt < MTILES; ++mt) {
        const uint4 a4 = qfrag[(mt * KSTEPS + ks) * 32 + lane];
        const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
        for (int t = 0; t < SUB; ++t) {
          mma_16816<MT>(s[mt][2 * t], a, bk[t][0], bk[t][1]);
          mma_16816<MT>(s[mt][2 * t + 1], a, bk[t][2], bk[t][3]);
        }
      }
    }
  } else {
    using Cvt = typename CvtOf<typename K::KVT>::type;
#pragma unroll
    for (int h = 0; h < D / 64; ++h) {
      uint4 w[2 * SUB];
#pragma unroll
      for (int nt = 0; nt < 2 * SUB; ++nt) {
        w[nt] = *reinterpret_cast<const uint4*>(ch.sk[nt / 2] + C::k_at((nt % 2) * 8 + g, 4 * h + tq));
      }
#pragma unroll
      for (int s4 = 0; s4 < 4; ++s4) {
        uint32_t bk[2 * SUB][2];
#pragma unroll
        for (int nt = 0; nt < 2 * SUB; ++nt) {
          const uint32_t word = Cvt::prep(s4 == 0 ? w[nt].x : s4 == 1 ? w[nt].y : s4 == 2 ? w[nt].z : w[nt].w);
          bk[nt][0] = Cvt::lo(word);
          bk[nt][1] = Cvt::hi(word);
        }
#pragma unroll
        for (int mt = 0; mt < MTILES; ++mt) {
#pragma unroll
          for (int part = 0; part < QP; ++part) {
            const int qi = (mt * KSTEPS + 4 * h + s4) * QP + part;
            const uint4 a4 = qfrag[qi * 32 + lane];
            const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
            for (int nt = 0; nt < 2 * SUB; ++nt) mma_16816<MT>(s[mt][nt], a, bk[nt][0], bk[nt][1]);
          }
        }
      }
    }
  }
}

// The optional score terms: a boolean mask (nonzero: hidden) and an additive fp32 bias.
struct ScoreBias {
  const uint8_t* mask;
  const float* pse;
  bool has_bias;
};

// Scale, bias, mask (log2 domain), online softmax. Keys at/after a row's limit, in an
// invalid block, or masked, become -inf before anything else can touch them.
// The row reference m_run moves only when a score passes it by more than kLazySlack (log2
// units; p then stays <= 2^kLazySlack, exact in fp32 l / acc and in the p parts): most
// chunks take one warp vote instead of the row-max shuffles, the alpha exp2 and the
// accumulator rescale. pa: p (bf16: as hi + lo parts), one A fragment per chunk.
template <class K>
__device__ __forceinline__ void step_softmax(uint32_t (&pa)[K::MTILES][K::PP][K::SUB][4],
                                             float (&s)[K::MTILES][2 * K::SUB][4], RowState<K>& rs,
                                             const StepChunks<K>& ch, const bool (&blk_ok)[K::SUB],
                                             const RowLimits<K>& rl, const ScoreBias& bias, float score_mul,
                                             const IncreFlashAttentionCudaParams& p, const SmemRegions& sm,
                                             const Unit& u) {
  using MT = typename K::MT;
  constexpr int MTILES = K::MTILES, SUB = K::SUB, NTILES = K::NTILES, PP = K::PP;
  const int g = K::g(), tq = K::tq();
  const uint8_t* mask = bias.mask;
  const float* pse = bias.pse;
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt) {
    float lmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int rr = mt * 16 + g + 8 * hf;
#pragma unroll
      for (int nt = 0; nt < 2 * SUB; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = ch.kc[nt / 2] + (nt % 2) * 8 + 2 * tq + e;
          const float x = s[mt][nt][2 * hf + e] * score_mul + rl.radd[mt][hf];
          s[mt][nt][2 * hf + e] = (key >= rl.lim[mt][hf] || !blk_ok[nt / 2]) ? -INFINITY : x;
        }
      if (bias.has_bias) {  // a real branch: predicated loads would cost issue slots on every chunk
#pragma unroll
        for (int nt = 0; nt < 2 * SUB; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = ch.kc[nt / 2] + (nt % 2) * 8 + 2 * tq + e;
            float& x = s[mt][nt][2 * hf + e];
            if (x == -INFINITY) continue;
            if (mask != nullptr && mask[sm.mask_row[rr] + key * p.mask_stride_k] != 0) x = -INFINITY;
            else if (pse != nullptr) x += __ldg(pse + sm.pse_row[rr] + key * p.pse_stride_k) * kLog2e;
          }
      }
#pragma unroll
      for (int nt = 0; nt < 2 * SUB; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) lmax[hf] = fmaxf(lmax[hf], s[mt][nt][2 * hf + e]);
    }
    // (-inf + slack is -inf: a row's first key always moves its reference)
    const bool grow = lmax[0] > rs.m_run[mt][0] + kLazySlack || lmax[1] > rs.m_run[mt][1] + kLazySlack;
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float mx = lmax[hf];
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(rs.m_run[mt][hf], mx);
        const float alpha = exp2f(rs.m_run[mt][hf] - (m_new == -INFINITY ? 0.f : m_new));  // 0 from -inf
        rs.m_run[mt][hf] = m_new;
        rs.l_run[mt][hf] *= alpha;
#pragma unroll
        for (int jn = 0; jn < NTILES; ++jn) {
          rs.acc[mt][jn][2 * hf] *= alpha;
          rs.acc[mt][jn][2 * hf + 1] *= alpha;
        }
      }
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float m_use = rs.m_run[mt][hf] == -INFINITY ? 0.f : rs.m_run[mt][hf];
      float lsum = 0.f;
#pragma unroll
      for (int nt = 0; nt < 2 * SUB; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = exp2f(s[mt][nt][2 * hf + e] - m_use);
          s[mt][nt][2 * hf + e] = pv;
          lsum += pv;
        }
      rs.l_run[mt][hf] += lsum;
    }
    // C fragments of a chunk's two key n-tiles are the A fragment of p for its 16-key k-step.
#pragma unroll
    for (int t = 0; t < SUB; ++t) {
      const float(&s0)[4] = s[mt][2 * t];
      const float(&s1)[4] = s[mt][2 * t + 1];
      if constexpr (PP == 2) {
        split2<MT>(s0[0], s0[1], pa[mt][0][t][0], pa[mt][PP - 1][t][0]);
        split2<MT>(s0[2], s0[3], pa[mt][0][t][1], pa[mt][PP - 1][t][1]);
        split2<MT>(s1[0], s1[1], pa[mt][0][t][2], pa[mt][PP - 1][t][2]);
        split2<MT>(s1[2], s1[3], pa[mt][0][t][3], pa[mt][PP - 1][t][3]);
      } else {
        pa[mt][0][t][0] = pack2<MT>(s0[0], s0[1]);
        pa[mt][0][t][1] = pack2<MT>(s0[2], s0[3]);
        pa[mt][0][t][2] = pack2<MT>(s1[0], s1[1]);
        pa[mt][0][t][3] = pack2<MT>(s1[2], s1[3]);
      }
    }
  }
}

// O += p . v (hi and lo parts of p against the same v fragments), one k-step per chunk
template <class K>
__device__ __forceinline__ void step_pv(float (&acc)[K::MTILES][K::NTILES][4],
                                        const uint32_t (&pa)[K::MTILES][K::PP][K::SUB][4], const StepChunks<K>& ch,
                                        const Unit& u) {
  using MT = typename K::MT;
  using C = typename K::C;
  constexpr int MTILES = K::MTILES, SUB = K::SUB, NTILES = K::NTILES, PP = K::PP, D = K::D;
  const int lane = K::lane(), g = K::g(), tq = K::tq();
  if constexpr (!C::kQuant) {
    const int mi = lane >> 3, key = ((mi & 1) << 3) + (lane & 7);
#pragma unroll
    for (int jn = 0; jn < NTILES; jn += 2) {
#pragma unroll
      for (int t = 0; t < SUB; ++t) {
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4_trans(smem_addr(ch.sk[t] + C::kTensorBytesK + C::v_at(key, jn + (mi >> 1))), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
          for (int part = 0; part < PP; ++part) {
            mma_16816<MT>(acc[mt][jn], pa[mt][part][t], b0, b1);
            mma_16816<MT>(acc[mt][jn + 1], pa[mt][part][t], b2, b3);
          }
      }
    }
  } else {
    using Cvt = typename CvtOf<typename K::KVT>::type;
    constexpr int W = C::kVW, WORDS = W / 4;
#pragma unroll
    for (int t = 0; t < SUB; ++t)
#pragma unroll
      for (int uu = 0; uu < D / (8 * W); ++uu) {
        uint32_t wr[4][WORDS];  // rows 2t, 2t+1, 2t+8, 2t+9
#pragma unroll
        for (int rk = 0; rk < 4; ++rk) {
          const int vrow = 2 * tq + (rk & 1) + 8 * (rk >> 1);
          const int byte = uu * 8 * W + g * W;
          const uint8_t* src = ch.sk[t] + C::kTensorBytesK + C::v_at(vrow, byte >> 4) + (byte & 15);
          if constexpr (W == 16) {
            const uint4 v4 = *reinterpret_cast<const uint4*>(src);
            const uint32_t vw[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
            for (int qw = 0; qw < WORDS; ++qw) wr[rk][qw] = Cvt::prep(vw[qw]);
          } else {
            const uint2 v2 = *reinterpret_cast<const uint2*>(src);
            const uint32_t vw[2] = {v2.x, v2.y};
#pragma unroll
            for (int qw = 0; qw < WORDS; ++qw) wr[rk][qw] = Cvt::prep(vw[qw]);
          }
        }
#pragma unroll
        for (int qw = 0; qw < WORDS; ++qw) {
          const uint32_t ab_lo = prmt(wr[0][qw], wr[1][qw], 0x5140), ab_hi = prmt(wr[0][qw], wr[1][qw], 0x7362);
          const uint32_t cd_lo = prmt(wr[2][qw], wr[3][qw], 0x5140), cd_hi = prmt(wr[2][qw], wr[3][qw], 0x7362);
          const uint32_t bv[4][2] = {{Cvt::lo(ab_lo), Cvt::lo(cd_lo)},
                                     {Cvt::hi(ab_lo), Cvt::hi(cd_lo)},
                                     {Cvt::lo(ab_hi), Cvt::lo(cd_hi)},
                                     {Cvt::hi(ab_hi), Cvt::hi(cd_hi)}};
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) {
            const int jn = uu * W + 4 * qw + jj;
#pragma unroll
            for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
              for (int part = 0; part < PP; ++part)
                mma_16816<MT>(acc[mt][jn], pa[mt][part][t], bv[jj][0], bv[jj][1]);
          }
        }
      }
  }
}

}  // namespace dualops::cuda::ifa

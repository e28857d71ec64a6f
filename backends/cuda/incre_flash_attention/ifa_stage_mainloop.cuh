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
                                            const Unit& u, const uint4* qfrag, const uint4 (&qreg)[K::kQRegs > 0 ? K::kQRegs : 1]) {
  using MT = typename K::MT;
  using C = typename K::C;
  constexpr int MTILES = K::MTILES, SUB = K::SUB, KSTEPS = K::KSTEPS, QP = K::QP, D = K::D;
  constexpr int kQRegs = K::kQRegs;
  const int lane = K::lane(), g = K::g(), tq = K::tq();
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2 * SUB; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
  if constexpr ((kAblate & 1) != 0) {
    // measurement build: no q.k^T
  } else if constexpr (!C::kQuant) {
    const int mi = lane >> 3, key = ((mi >> 1) << 3) + (lane & 7);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      uint32_t bk[SUB][4];
#pragma unroll
      for (int t = 0; t < SUB; ++t)
        ldmatrix_x4(smem_addr(ch.sk[t] + C::k_at(key, 2 * ks + (mi & 1))), bk[t][0], bk[t][1], bk[t][2], bk[t][3]);
#pragma unroll
      for (int mt = 0; mt < MTILES; ++mt) {
        const uint4 a4 = kQRegs > 0 ? qreg[(mt * KSTEPS + ks) % (kQRegs > 0 ? kQRegs : 1)]
                                    : qfrag[(mt * KSTEPS + ks) * 32 + lane];
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
            const uint4 a4 = kQRegs > 0 ? qreg[qi % (kQRegs > 0 ? kQRegs : 1)] : qfrag[qi * 32 + lane];
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
                                             const IncreFlashAttentionParams& p, const SmemRegions& sm,
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
    for (int hf = 0; hf < 2 && (kAblate & 2) == 0; ++hf) {
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
    if ((kAblate & 2) == 0 && __any_sync(0xffffffffu, grow)) {
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
    for (int hf = 0; hf < 2 && (kAblate & 2) == 0; ++hf) {
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

// Two 16-bit value pairs in one: a * 0 + c per half, which is c where a is finite and NaN where
// it is inf or NaN, so the result holds an inf or NaN exactly where a or c does (a tree of these
// checks 2n registers with 2n - 1 fma, n levels deep).
template <typename MT>
__device__ __forceinline__ uint32_t keep_nonfinite2(uint32_t a, uint32_t c) {
  uint32_t d;
  if constexpr (std::is_same_v<MT, __nv_bfloat16>)
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0u), "r"(c));
  else
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0u), "r"(c));
  return d;
}

// Bit 15 / 31 set where that 16-bit half of w holds an inf or NaN (its exponent all ones).
template <typename MT>
__device__ __forceinline__ uint32_t nonfinite_tops(uint32_t w) {
  constexpr uint32_t kExp = std::is_same_v<MT, __nv_bfloat16> ? 0x7f807f80u : 0x7c007c00u;
  constexpr uint32_t kOne = std::is_same_v<MT, __nv_bfloat16> ? 0x00800080u : 0x04000400u;
  return ((w & kExp) + kOne) & 0x80008000u;
}
// 0xffff in each 16-bit half of w that holds an inf or NaN, else 0.
template <typename MT>
__device__ __forceinline__ uint32_t nonfinite_halves(uint32_t w) {
  return (nonfinite_tops<MT>(w) >> 15) * 0xffffu;
}

// The exact p . v terms of a chunk's non-finite values (inf, NaN) in n-tiles j0 .. j0 + G - 1,
// whose fragments b (as ldmatrix_x4_trans gave them) hold at least one: IEEE p * v in fp32 for
// the keys a row attends -- p = 0 gives NaN, as in the reference -- and nothing for the keys it
// does not (past its limit, in an invalid block, masked); then those values are zeroed in b, so
// that the tensor cores add the chunk's finite values as usual. Runs only for such chunks: a
// loop over the non-finite values, one per round, that lane (g, tq) of the fragments holds as
// key 2 tq + h (+ 8 for odd words) of n-tile column g.
template <class K, int G>
__device__ __forceinline__ void pv_nonfinite(float (&acc)[K::MTILES][K::NTILES][4], uint32_t (&b)[G / 2][4],
                                             int j0, int t, const uint32_t (&pa)[K::MTILES][K::PP][K::SUB][4],
                                             const StepChunks<K>& ch, const bool (&blk_ok)[K::SUB],
                                             const RowLimits<K>& rl, const ScoreBias& bias,
                                             const IncreFlashAttentionParams& p, const SmemRegions& sm) {
  using MT = typename K::MT;
  using C = typename K::C;
  constexpr int MTILES = K::MTILES;
  const int lane = K::lane(), g = K::g(), tq = K::tq();
  uint64_t pending = 0;  // bit 8 jj + 2 x + h: half h of word x of fragment jj is inf / NaN
#pragma unroll
  for (int jj = 0; jj < G / 2; ++jj)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const uint32_t e = nonfinite_halves<MT>(b[jj][x]);
      pending |= static_cast<uint64_t>((e & 1u) | ((e >> 15) & 2u)) << (8 * jj + 2 * x);
    }
  for (;;) {
    const unsigned who = __ballot_sync(0xffffffffu, pending != 0);
    if (who == 0) break;
    const int src = __ffs(who) - 1;
    int idx = 0;
    if (lane == src) {
      idx = __ffsll(static_cast<long long>(pending)) - 1;
      pending &= pending - 1;
    }
    idx = __shfl_sync(0xffffffffu, idx, src);
    const int x = (idx >> 1) & 3, jn = j0 + 2 * (idx >> 3) + (x >> 1);
    const int k = 2 * (src & 3) + (idx & 1) + 8 * (x & 1);  // key within the chunk
    const int col = src >> 2;                                // column within n-tile jn
    // the value, read by every lane from the stage (V row k, head-dim position 8 jn + col)
    const uint8_t* vrow = ch.sk[t] + C::kTensorBytesK + C::v_at(k, jn) + 2 * col;
    const float v = bits_to_f32<MT>(*reinterpret_cast<const uint16_t*>(vrow));
    const int key = ch.kc[t] + k;
    const bool mine = tq == (col >> 1);
#pragma unroll
    for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        // p of this lane's row for key k (its A-fragment word hf + 2 (k / 8), half k % 2), from the
        // lane that holds it. A non-finite v makes p * v +-inf or NaN whatever p's size: only
        // p > 0, p = 0 or NaN matter, and the 16-bit p (bf16: its hi part) keeps them.
        const uint32_t pw = (k & 8) ? pa[mt][0][t][hf + 2] : pa[mt][0][t][hf];
        const uint32_t pb = __shfl_sync(0xffffffffu, pw, (lane & ~3) | ((k & 7) >> 1));
        const float pr = bits_to_f32<MT>((k & 1) ? pb >> 16 : pb & 0xffffu);
        const int rr = mt * 16 + g + 8 * hf;
        bool hidden = key >= rl.lim[mt][hf] || !blk_ok[t];
        if (!hidden && bias.mask != nullptr) hidden = bias.mask[sm.mask_row[rr] + key * p.mask_stride_k] != 0;
        const float term = hidden || !mine ? 0.f : pr * v;
        const float t0 = (col & 1) ? 0.f : term, t1 = (col & 1) ? term : 0.f;
#pragma unroll
        for (int j = 0; j < G; ++j) {  // (adds 0 elsewhere: no indexed register array)
          acc[mt][j0 + j][2 * hf] += j0 + j == jn ? t0 : 0.f;
          acc[mt][j0 + j][2 * hf + 1] += j0 + j == jn ? t1 : 0.f;
        }
      }
  }
#pragma unroll
  for (int jj = 0; jj < G / 2; ++jj)
#pragma unroll
    for (int x = 0; x < 4; ++x) b[jj][x] &= ~nonfinite_halves<MT>(b[jj][x]);
}

// O += p . v (hi and lo parts of p against the same v fragments), one k-step per chunk.
// 16-bit caches check each chunk's value fragments for inf / NaN (a tree of fma, one per register,
// and a warp vote per chunk): a chunk that holds one takes its non-finite values out of the tensor-core
// product and adds their exact terms (pv_nonfinite), so that a key a row does not attend adds
// nothing and an attended one adds p * v as the reference has it (0 * inf on the tensor cores
// would be NaN for every row of the tile). 8-bit caches: int8 holds no inf or NaN.
template <class K>
__device__ __forceinline__ void step_pv(float (&acc)[K::MTILES][K::NTILES][4],
                                        const uint32_t (&pa)[K::MTILES][K::PP][K::SUB][4],
                                        const StepChunks<K>& ch,
                                        const bool (&blk_ok)[K::SUB], const RowLimits<K>& rl,
                                        const ScoreBias& bias, const IncreFlashAttentionParams& p,
                                        const SmemRegions& sm) {
  using MT = typename K::MT;
  using C = typename K::C;
  constexpr int MTILES = K::MTILES, SUB = K::SUB, NTILES = K::NTILES, PP = K::PP, D = K::D;
  const int lane = K::lane(), g = K::g(), tq = K::tq();
  if constexpr ((kAblate & 4) != 0) {
    acc[0][0][0] += __uint_as_float(pa[0][0][0][0] ^ pa[MTILES - 1][PP - 1][SUB - 1][3]);  // measurement build: no p.v
  } else if constexpr (!C::kQuant) {
    const int mi = lane >> 3, key = ((mi & 1) << 3) + (lane & 7);
    constexpr int G = NTILES < 16 ? NTILES : 16;  // n-tiles per check (D 256: two)
#pragma unroll
    for (int t = 0; t < SUB; ++t)
#pragma unroll
      for (int j0 = 0; j0 < NTILES; j0 += G) {
        uint32_t b[G / 2][4];
#pragma unroll
        for (int jj = 0; jj < G / 2; ++jj)
          ldmatrix_x4_trans(smem_addr(ch.sk[t] + C::kTensorBytesK + C::v_at(key, j0 + 2 * jj + (mi >> 1))), b[jj][0],
                            b[jj][1], b[jj][2], b[jj][3]);
        uint32_t chk[G];
#pragma unroll
        for (int i = 0; i < G; ++i) chk[i] = keep_nonfinite2<MT>(b[i / 2][2 * (i % 2)], b[i / 2][2 * (i % 2) + 1]);
        static_assert(G == 8 || G == 16, "a whole tree");  // (levels of constant widths: unrolled)
#pragma unroll
        for (int i = 0; i < G / 2; ++i) chk[i] = keep_nonfinite2<MT>(chk[2 * i], chk[2 * i + 1]);
#pragma unroll
        for (int i = 0; i < G / 4; ++i) chk[i] = keep_nonfinite2<MT>(chk[2 * i], chk[2 * i + 1]);
#pragma unroll
        for (int i = 0; i < G / 8; ++i) chk[i] = keep_nonfinite2<MT>(chk[2 * i], chk[2 * i + 1]);
#pragma unroll
        for (int i = 0; i < G / 16; ++i) chk[i] = keep_nonfinite2<MT>(chk[2 * i], chk[2 * i + 1]);
        if (__any_sync(0xffffffffu, nonfinite_tops<MT>(chk[0]) != 0))
          pv_nonfinite<K, G>(acc, b, j0, t, pa, ch, blk_ok, rl, bias, p, sm);
#pragma unroll
        for (int jj = 0; jj < G / 2; ++jj) {
          const int jn = j0 + 2 * jj;
#pragma unroll
          for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
            for (int part = 0; part < PP; ++part) {
              mma_16816<MT>(acc[mt][jn], pa[mt][part][t], b[jj][0], b[jj][1]);
              mma_16816<MT>(acc[mt][jn + 1], pa[mt][part][t], b[jj][2], b[jj][3]);
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

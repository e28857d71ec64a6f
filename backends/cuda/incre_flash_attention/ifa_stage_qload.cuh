// Stages of the split kernel right after the grid-dependency wait: the K/V chunk copies of a
// warp's pipeline (issue_chunk), the q tile's raw loads (load_q_raw) and its A fragments in
// shared memory with the per-row score terms (q_fragments, row_limits).
#pragma once
#include <dualops/params.h>

#include <cfloat>
#include <cstdint>

#include "ifa_stage_setup.cuh"

namespace dualops::cuda::ifa {

// Block ids of a warp's next chunks, 32 at a time: lane i holds the id for chunk (base + i), so
// the dependent block-table load is made once per 32 chunks, a window ahead of its use.
struct BlockWindow {
  int cur = -1, nxt = -1;
};

// Block ids of chunks j0 .. j0 + 31 of this warp, one per lane (paged caches).
template <class K>
__device__ __forceinline__ int block_window(const KvSources<K>& kv, const Unit& u, int lane, int j0) {
  const int kc = kv.first_key + (j0 + lane) * K::kStepKeys;
  return kc < u.k_cap ? kv.bt_row[kv.pm.block(kc)] : -1;
}

// The copies of this warp's chunk j into stage j % STAGES (keys past k_end: zero-filled rows).
// bad_blocks bit (j % 32): chunk j's block id is out of range (its keys are hidden).
template <class K>
__device__ __forceinline__ void issue_chunk(const IncreFlashAttentionCudaParams& p, const Unit& u,
                                            const KvSources<K>& kv, BlockWindow& win, uint32_t& bad_blocks,
                                            int k_end, int lane, int j) {
  using C = typename K::C;
  constexpr int64_t elt = K::elt;
  constexpr int kSwzN = K::kSwzN, kRows = K::kRows;
  const int kc = kv.first_key + j * K::kStepKeys;
  int valid = min(kChunkKeys, k_end - kc);
  int64_t k_off, v_off;  // bytes from this lane's base to the chunk's first row
  if (kv.block_size > 0) {
    if ((j & 31) == 0 && j > 0) {
      win.cur = win.nxt;
      win.nxt = block_window(kv, u, lane, j + 32);
    }
    const int blk = __shfl_sync(0xffffffffu, win.cur, j & 31);
    const int slot = kv.pm.slot(kc);  // a chunk's rows are consecutive slots of one block
    const bool ok = blk >= 0 && blk < p.num_blocks;
    bad_blocks = ok ? (bad_blocks & ~(1u << (j & 31))) : (bad_blocks | (1u << (j & 31)));
    valid = ok ? valid : 0;
    const int64_t bb = ok ? blk : 0;
    k_off = (bb * p.k_stride_0 + slot * p.k_stride_1) * elt;
    v_off = (bb * p.v_stride_0 + slot * p.v_stride_1) * elt;
  } else if constexpr (C::kQuant) {  // (k_lane / v_lane: chunk 0's rows)
    k_off = j * kv.k_jstep;
    v_off = j * kv.v_jstep;
  } else {
    k_off = static_cast<int64_t>(kc) * p.k_stride_1 * elt;
    v_off = static_cast<int64_t>(kc) * p.v_stride_1 * elt;
  }
  const char* kp = kv.k_lane + k_off;
  const char* vp = kv.v_lane + v_off;
  const uint32_t so = (j % K::STAGES) * C::kStageBytes;
#pragma unroll
  for (int i = 0; i < K::kCopies; ++i) {
    // Rows past the keys: src-size 0, nothing is read and the destination is zero-filled.
    const uint32_t n = kv.lrow + i * kRows < valid ? 16u : 0u;
    const uint32_t ro = so + (i / kSwzN) * kSwzN * kRows * C::kRowBytes;  // whole swizzle periods
    cp_async_16(kv.dst_k[i % kSwzN] + ro, kp, n);
    cp_async_16(kv.dst_v[i % kSwzN] + ro, vp, n);
    kp += kv.k_step;
    vp += kv.v_step;
  }
}

// The q tile's raw values (and key scales / int8 key offsets) in registers.
template <class K>
struct QRaw {
  uint32_t qraw[K::QIT];                          // two raw 16-bit q values (d, d + 1)
  float ksc[K::C::kQuant ? K::QIT : 1][2];        // key scales of d, d + 1
  float kof[K::kOffsetsInRegs ? K::QIT : 1][2];  // int8 key offsets of d, d + 1 (0 without offsets)
};

// ---- q tile (and key scales) into registers: every load goes out at once, with kv_lens ----
template <class K>
__device__ __forceinline__ void load_q_raw(QRaw<K>& qr, const QSources<K>& qs, const Unit& u) {
  using C = typename K::C;
#pragma unroll
  for (int it = 0; it < K::QIT; ++it) {
    int d = 0;  // 8-bit: q_src is the pair's own address
    const uint16_t* src = C::kQuant ? qs.q_src[it] : qs.pair_row(K::tid(), it, d);
    uint32_t raw = 0;
    if (src != nullptr) {
      raw = qs.q_word ? *reinterpret_cast<const unsigned int*>(src + d)
                      : static_cast<uint32_t>(src[d]) | (static_cast<uint32_t>(src[d + 1]) << 16);
    }
    qr.qraw[it] = raw;
    if constexpr (C::kQuant) {
      qr.ksc[it][0] = qs.ks_src[it][0];
      qr.ksc[it][1] = qs.ks_src[it][1];
    }
    if constexpr (K::kOffsetsInRegs) {
      qr.kof[it][0] = qs.ko_src[it] != nullptr ? qs.ko_src[it][0] : 0.f;
      qr.kof[it][1] = qs.ko_src[it] != nullptr ? qs.ko_src[it][1] : 0.f;
    }
  }
}

// ---- q tile -> A fragments in shared memory -------------------------------------------
// 8-bit caches fold the key scale into q (score = sum q_d s_d x_d + sum q_d s_d o_d); the
// scaled q is kept as hi + lo fp16 parts (two mma) after a power-of-two normalization, so
// the folding costs no precision whatever the scales' magnitude. One fp16 part is faster on
// bandwidth-bound calls but puts the lse outside the parity bound.
// Returns the log2-domain score multiplier; ends with the barrier after which the fragments
// and row_add are visible.
template <class K>
__device__ __forceinline__ float q_fragments(const IncreFlashAttentionCudaParams& p, const Unit& u, const SmemRegions& sm,
                                             const QSources<K>& qs, const QRaw<K>& qr) {
  using QT = typename K::QT;
  using MT = typename K::MT;
  using C = typename K::C;
  constexpr int D = K::D, M_TILE = K::M_TILE, NT = K::NT, NW = K::NW, QIT = K::QIT, KSTEPS = K::KSTEPS;
  constexpr int QP = K::QP, kQPairs = K::kQPairs;
  constexpr bool kOffsetsInRegs = K::kOffsetsInRegs;
  const int tid = K::tid(), lane = K::lane();
  float qmul = 1.f;
  if constexpr (C::kQuant) {
    if (tid == 0) sm.scratch[0] = 0;
    if (kOffsetsInRegs && tid < M_TILE) sm.row_add[tid] = 0.f;
    float amax = 0.f;  // over the tile's rows (rows past q_rows hold 0)
#pragma unroll
    for (int it = 0; it < QIT; ++it) {
      amax = fmaxf(amax, fabsf(bits_to_f32<QT>(qr.qraw[it] & 0xffffu) * qr.ksc[it][0]));
      amax = fmaxf(amax, fabsf(bits_to_f32<QT>(qr.qraw[it] >> 16) * qr.ksc[it][1]));
    }
    amax = warp_max(amax);
    __syncthreads();
    if (lane == 0) atomicMax(sm.scratch, __float_as_int(amax));
    __syncthreads();
    amax = __int_as_float(sm.scratch[0]);
    int e = (amax > 0.f && amax <= FLT_MAX) ? 7 - ilogbf(amax) : 0;
    e = min(max(e, -100), 100);
    qmul = ldexpf(1.f, e);
  }
  // kOffsetsInRegs: with one m-tile and NT a multiple of 128, a thread's pairs all lie in one row,
  // (lane / 16) + 8 * (lane % 2) of the warp's rows, shared with the lanes that differ in bits
  // 1..3: a local sum, three shuffles, one shared atomic per row and warp.
  float opart = 0.f;  // kOffsetsInRegs: the row's sum of q . scale . offset
#pragma unroll
  for (int it = 0; it < QIT; ++it) {
    const int idx = tid + it * NT;
    if (kQPairs % NT != 0 && idx >= kQPairs) break;
    const int reg = idx & 3, ln = (idx >> 2) & 31, ks = (idx >> 7) % KSTEPS, mt = (idx >> 7) / KSTEPS;
    float v[2] = {bits_to_f32<QT>(qr.qraw[it] & 0xffffu), bits_to_f32<QT>(qr.qraw[it] >> 16)};
    if constexpr (kOffsetsInRegs) opart += v[0] * qr.ksc[it][0] * qr.kof[it][0] + v[1] * qr.ksc[it][1] * qr.kof[it][1];
    if constexpr (C::kQuant) v[0] *= qr.ksc[it][0] * qmul, v[1] *= qr.ksc[it][1] * qmul;
    uint32_t* dst = reinterpret_cast<uint32_t*>(sm.qfrag + ((mt * KSTEPS + ks) * QP) * 32 + ln) + reg;
    if constexpr (QP == 2) {
      uint32_t hi, lo;
      split2<MT>(v[0], v[1], hi, lo);
      dst[0] = hi;
      dst[32 * 4] = lo;
    } else {
      dst[0] = pack2<MT>(v[0], v[1]);
    }
  }
  if constexpr (kOffsetsInRegs) {
#pragma unroll
    for (int o = 2; o <= 8; o <<= 1) opart += __shfl_xor_sync(0xffffffffu, opart, o);
    if ((lane & 14) == 0) {
      const int rr = (((tid >> 2) & 31) >> 2) + 8 * (lane & 1);
      atomicAdd(&sm.row_add[rr], opart * p.softmax_scale * kLog2e);
    }
  }
  // Per-row log2-domain score offset of an int8 key offset: with kOffsetsInRegs summed above
  // from the q values, scales and offsets already in registers; otherwise one warp per row reads
  // them (a global round trip).
  const float score_mul = p.softmax_scale * kLog2e / qmul;
  for (int rr = K::warp(); !kOffsetsInRegs && rr < M_TILE; rr += NW) {
    float acc = 0.f;
    if (qs.k_offset != nullptr && K::row0() + rr < u.q_rows) {
      const int r = K::row0() + rr, gh = r / u.s_q, i = r - gh * u.s_q;
      const QT* qrow = qs.q + u.b * p.q_stride_b + i * p.q_stride_s + (u.kvh * u.group + gh) * p.q_stride_h;
#pragma unroll
      for (int d = lane; d < D; d += 32) acc += to_f32(qrow[d]) * __ldg(qs.k_scale + d) * __ldg(qs.k_offset + d);
      acc = warp_sum(acc);
    }
    if (lane == 0) sm.row_add[rr] = acc * p.softmax_scale * kLog2e;
  }
  __syncthreads();
  return score_mul;
}

// Per-thread rows mt * 16 + g + 8 * half: the row's score offset and lim, the first key the row
// may not see.
template <class K>
struct RowLimits {
  float radd[K::MTILES][2];
  int lim[K::MTILES][2];
};

template <class K>
__device__ __forceinline__ void row_limits(RowLimits<K>& rl, const IncreFlashAttentionCudaParams& p, const Unit& u,
                                           const SmemRegions& sm, int kv_len, int k_end) {
#pragma unroll
  for (int mt = 0; mt < K::MTILES; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int rr = mt * 16 + K::g() + 8 * hf;
      const int r = min(K::row0() + rr, u.q_rows - 1);
      const int i = r % u.s_q;
      rl.radd[mt][hf] = sm.row_add[rr];
      rl.lim[mt][hf] = p.causal ? min(k_end, kv_len - u.s_q + i + 1) : k_end;
    }
}

}  // namespace dualops::cuda::ifa

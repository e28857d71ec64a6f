// Stage of the split kernel: set-up before the grid-dependency wait. The kernel variant's
// compile-time shape (Kern), which unit and q tile this CTA takes (Unit), where its shared-memory
// regions lie (SmemRegions), and every address the CTA reads from after the wait, computed from
// the parameters alone (QSources, KvSources; row_offsets).
#pragma once
#include <dualops/params.h>

#include <cstdint>
#include <type_traits>

#include "ifa_config.cuh"
#include "ifa_primitives.cuh"
#include "ifa_split_merge.cuh"
#include "ifa_tiling.h"

namespace dualops::cuda::ifa {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename KVT>
struct CvtOf {
  using type = Int8Cvt;
};
template <>
struct CvtOf<__nv_fp8_e4m3> {
  using type = Fp8Cvt;
};

// Compile-time shape of one split-kernel variant, as the stages use it.
template <typename QT_, typename KVT_, int D_, int M_TILE_, int SHAPE_>
struct Kern {
  using QT = QT_;
  using KVT = KVT_;
  static constexpr int D = D_, M_TILE = M_TILE_;
  using C = Cfg<QT, KVT, D, SHAPE_>;
  using MT = typename C::MT;
  using L = SmemLayout<QT, KVT, D, M_TILE, SHAPE_>;
  using CML = ClusterMergeLayout<QT, KVT, D, M_TILE, SHAPE_>;
  static constexpr bool kClusterMerge = CML::kFits;
  // 8-bit caches: the epilogue's summed fragments go to shared memory in head-dim order (the
  // cluster-merge buffer, rows kOutPitch apart) and out from there as whole 16-B runs of a row.
  // Stored straight from the fragments, a lane's two columns lie 16 apart (Cfg::pv_d), so each
  // warp store touched 32 sectors instead of 8, and the partials' release and the kernel boundary
  // waited for four times the writes. 16-bit caches keep the direct stores (staging gains nothing there).
  static constexpr bool kStageOut = CML::kFits && CML::kStaged;
  static constexpr int kOutPitch = CML::kOutPitch;
  static constexpr int NW = C::kWarps, STAGES = C::kStages, NT = NW * 32;
  static constexpr int MTILES = M_TILE / 16, KSTEPS = C::kKSteps, NTILES = C::kNTiles, QP = L::kQParts;
  static constexpr int PP = C::kPParts;
  // int8 key offsets: the per-row score term sum_d q_d s_d o_d is summed from the q values,
  // scales and offsets the q-tile load brings into registers, where each thread's q pairs
  // lie in one row (one m-tile, NT a multiple of 128); otherwise one warp per row reads them.
  // (int8 keys enter the mma exactly, as x: folding the +1152 bias of the conversion into the
  // offsets would save the subtraction but puts a 1-key request's lse off on q with a one-signed bias.)
  static constexpr bool kOffsetsInRegs = std::is_same_v<KVT, int8_t> && QP == 2 && MTILES == 1;
  // q tile: thread tid loads the pairs idx = tid + it * NT of the A-fragment order (mt, ks, lane,
  // reg). NT is a multiple of 128, so its lane and reg -- its row within an m-tile and its
  // column within a k-step -- are the same in every round: one row address per m-tile.
  static_assert(NT % 128 == 0, "whole A-fragment rounds per thread");
  static constexpr int kQPairs = MTILES * KSTEPS * 32 * 4, QIT = (kQPairs + NT - 1) / NT;
  // (kQPairs is a multiple of NT: every round lies in the tile.)
  static_assert(kQPairs % NT == 0, "whole q-tile rounds");
  static_assert(M_TILE <= NT, "a thread per row");
  // K/V copies: a round of 32 lanes covers kRows whole rows (lane -> row lane / kCpr, 16-B column
  // lane % kCpr); rows advance by kRows per copy; the swizzle repeats every kSwzPeriod copies.
  static constexpr int kStepKeys = NW * kChunkKeys;  // keys between a warp's consecutive chunks
  static constexpr int kCpr = C::kRowBytes / 16, kRows = 32 / kCpr, kCopies = kChunkKeys / kRows;
  static_assert(32 % kCpr == 0 && kChunkKeys % kRows == 0, "whole copy rounds");
  static constexpr int64_t elt = sizeof(KVT);
  static constexpr int kSwzPeriod = kRows >= 8 ? 1 : 8 / kRows;
  static constexpr int kSwzN = kSwzPeriod < kCopies ? kSwzPeriod : kCopies;
  static constexpr int kChunk0 = C::kQuant ? 1 : 0;
  // int8 (Cfg::kVScalesInSmem): value scale / offset i = tid + r * NT of the head.
  static constexpr int kVsRounds = C::kVScalesInSmem ? (2 * D + NT - 1) / NT : 1;
  // Each main-loop step consumes SUB of this warp's chunks (Cfg::kSub).
  static constexpr int SUB = MTILES <= 2 ? C::kSub : 1;  // 4 m-tiles x 2 chunks of scores would spill
  static constexpr bool kLockstep = C::kLockstep;
  static_assert(!kLockstep || STAGES >= 2 * SUB, "lockstep pipeline: a step's chunks and the next step's");
  static_assert(!kOffsetsInRegs || (MTILES == 1 && NT % 128 == 0), "one q row per thread");
  // Epilogue slots: (m-tile, n-tile, lane) of the output fragments.
  static constexpr int kSlots = MTILES * NTILES * 32;
  static constexpr bool kVScalesEarly = C::kQuant && !C::kVScalesInSmem;
  static constexpr int kSlotRounds = kVScalesEarly ? (kSlots + NT - 1) / NT : 1;
  // First q row of the CTA's tile.
  static __device__ __forceinline__ int row0() { return blockIdx.y * M_TILE; }
  // The thread's index, lane, warp and mma fragment row / column group (read from threadIdx
  // where used).
  static __device__ __forceinline__ int tid() { return threadIdx.x; }
  static __device__ __forceinline__ int lane() { return tid() & 31; }
  static __device__ __forceinline__ int warp() { return tid() >> 5; }
  static __device__ __forceinline__ int g() { return (tid() & 31) >> 2; }
  static __device__ __forceinline__ int tq() { return tid() & 3; }
};

// The CTA's unit and q tile. Unit u of the plan (docs/internals.md "IFA plan"): the first
// t.whole_groups units take a whole (batch, KV head) group each, unsplit; the others take split
// `split` of a later group.
struct Unit {
  int ns;     // splits of this unit's group
  int split;
  int span;   // keys the plan gives the unit
  int kvh, b;
  int64_t part;  // its partial's index
  int row0, q_rows, s_q, group, k_begin;
  // keys the plan allows this split (kv_lens[b] may cut it shorter): block ids below it are
  // inside the block table, so they can be fetched before kv_lens arrives
  int k_cap;
};

template <int M_TILE>
__device__ __forceinline__ Unit unit_of(const IncreFlashAttentionCudaTiling& t) {
  Unit s;
  const int u = blockIdx.x;
  const bool whole = u < t.whole_groups;
  s.ns = whole ? 1 : t.num_splits;
  const int grp = whole ? u : t.whole_groups + (u - t.whole_groups) / t.num_splits;
  s.split = whole ? 0 : (u - t.whole_groups) % t.num_splits;
  s.span = whole ? t.max_kv_len : t.split_len;
  s.kvh = grp % t.h_kv, s.b = grp / t.h_kv;
  s.part = static_cast<int64_t>(grp) * t.num_splits + s.split;
  s.row0 = blockIdx.y * M_TILE;
  s.q_rows = t.q_rows, s.s_q = t.s_q, s.group = t.group;
  s.k_begin = s.split * s.span;
  s.k_cap = min(s.k_begin + s.span, t.max_kv_len);
  return s;
}

// Dynamic shared memory (SmemLayout): K/V stages, q fragments, value scales, row offsets and
// statistics; after the main loop the K/V stages hold the warps' output fragments and the
// CTA's staged rows.
struct SmemRegions {
  uint8_t* kv_smem;
  uint4* qfrag;        // [MTILES][KSTEPS][QP][32]
  float* v_scale_s;    // kVScalesInSmem: [D] scales, [D] offsets
  int64_t* mask_row;
  int64_t* pse_row;
  int64_t* out_row;    // row's element offset in out (no split) or o_accum
  int64_t* lse_row;    // row's index in lse (no split) or lse_accum
  float* row_add;
  float* warp_m;       // [NW][M_TILE]
  float* warp_l;       // [NW][M_TILE]
  float* fin_m;        // [M_TILE]
  float* fin_l;        // [M_TILE]
  int* scratch;
  float4* ebuf;        // [NW][MTILES][NTILES][32], after the main loop
  float* clu_out;      // the CTA's rows (cluster merge, kStageOut)
  float* clu_lse;      //   [M_TILE][kOutPitch] and [M_TILE]
};

template <class K>
__device__ __forceinline__ SmemRegions smem_regions(uint8_t* smem) {
  using L = typename K::L;
  using CML = typename K::CML;
  constexpr int M_TILE = K::M_TILE, NW = K::NW;
  SmemRegions s;
  s.kv_smem = smem;
  s.qfrag = reinterpret_cast<uint4*>(smem + L::kKv);
  s.v_scale_s = reinterpret_cast<float*>(smem + L::kKv + L::kQfrag);
  s.mask_row = reinterpret_cast<int64_t*>(smem + L::kKv + L::kQfrag + L::kVScales);
  s.pse_row = s.mask_row + M_TILE;
  s.out_row = s.pse_row + M_TILE;
  s.lse_row = s.out_row + M_TILE;
  s.row_add = reinterpret_cast<float*>(s.lse_row + M_TILE);
  s.warp_m = s.row_add + M_TILE;
  s.warp_l = s.warp_m + NW * M_TILE;
  s.fin_m = s.warp_l + NW * M_TILE;
  s.fin_l = s.fin_m + M_TILE;
  s.scratch = reinterpret_cast<int*>(s.fin_l + M_TILE);
  s.ebuf = reinterpret_cast<float4*>(s.kv_smem);
  s.clu_out = reinterpret_cast<float*>(s.kv_smem + CML::kOut);
  s.clu_lse = reinterpret_cast<float*>(s.kv_smem + CML::kLse);
  return s;
}

// Final output / lse positions of tile row rr.
__device__ __forceinline__ int64_t out_row_final(const IncreFlashAttentionCudaParams& p, const Unit& u, int rr) {
  const int r = u.row0 + rr, gh = r / u.s_q, i = r - gh * u.s_q;
  return u.b * p.out_stride_b + i * p.out_stride_s + (u.kvh * u.group + gh) * p.out_stride_h;
}
__device__ __forceinline__ int64_t lse_row_final(const IncreFlashAttentionCudaTiling& t, const Unit& u, int rr) {
  const int r = u.row0 + rr, gh = r / u.s_q, i = r - gh * u.s_q;
  return (static_cast<int64_t>(u.b) * t.h_q + u.kvh * u.group + gh) * u.s_q + i;
}

// ---- before the grid-dependency wait: every address, from the parameters alone ------------
// A CTA sits in the wait while the kernel before it finishes (programmatic dependent launch),
// so what is computed here is off the call's critical path; after the wait, kv_lens, the q
// tile and the first K/V copies go out with little arithmetic in between (rather than the
// index math sitting between the wait and the first copy). pin() makes each
// value exist before the wait. Before it, global memory is only touched by the L2 prefetch of
// the first K/V copies (and, paged, the block ids it reads): hints, whose data is not used.
template <class K>
struct QSources {
  using QT = typename K::QT;
  const QT* q;
  const float* k_scale;
  const float* k_offset;
  int q_kk;                      // k index of the thread's pairs' first value
  const uint16_t* q_row[K::MTILES];  // row mt * 16 + q_rr of the tile; nullptr past q_rows
  bool q_word;                   // a pair (d, d + 1) is one aligned 32-bit word
  // 8-bit caches: every round's q pair, key scale and int8 key offset address
  const uint16_t* q_src[K::C::kQuant ? K::QIT : 1];
  const float* ks_src[K::C::kQuant ? K::QIT : 1];
  const float* ko_src[K::kOffsetsInRegs ? K::QIT : 1];

  // Round it of the q-tile load: the pair's row (nullptr past q_rows) and its head-dim index d.
  __device__ __forceinline__ const uint16_t* pair_row(int tid, int it, int& d) const {
    const int kt = (tid >> 7) + it * (K::NT / 128);  // (mt, ks) of this round
    const int ks = kt % K::KSTEPS, mt = kt / K::KSTEPS;
    d = K::C::qk_d(ks, q_kk);  // d + 1 is the pair's second
    const uint16_t* src = q_row[0];
#pragma unroll
    for (int m = 1; m < K::MTILES; ++m) src = mt == m ? q_row[m] : src;
    return src;
  }
};

template <class K>
__device__ __forceinline__ void q_sources(QSources<K>& s, const IncreFlashAttentionCudaParams& p, const Unit& u) {
  using QT = typename K::QT;
  using C = typename K::C;
  constexpr int D = K::D;
  s.q = static_cast<const QT*>(p.q);
  s.k_scale = C::kQuant ? static_cast<const float*>(p.k_scale) + u.kvh * D : nullptr;
  s.k_offset = (C::kQuant && p.k_offset) ? static_cast<const float*>(p.k_offset) + u.kvh * D : nullptr;
  const int tid = K::tid();
  const int q_ln = (tid >> 2) & 31, q_reg = tid & 3;
  const int q_rr = (q_ln >> 2) + 8 * (q_reg & 1);  // row within an m-tile
  s.q_kk = 2 * (q_ln & 3) + 8 * (q_reg >> 1);
#pragma unroll
  for (int mt = 0; mt < K::MTILES; ++mt) {
    const int r = K::row0() + mt * 16 + q_rr, gh = r / u.s_q, i = r - gh * u.s_q;
    s.q_row[mt] = r < u.q_rows ? reinterpret_cast<const uint16_t*>(s.q + u.b * p.q_stride_b + i * p.q_stride_s +
                                                                    (u.kvh * u.group + gh) * p.q_stride_h)
                               : nullptr;
    pin(s.q_row[mt]);
  }
  // a pair (d, d + 1) is one aligned 32-bit word when q and its strides allow (d is even)
  s.q_word = ((reinterpret_cast<uintptr_t>(p.q) | static_cast<uintptr_t>(p.q_stride_b | p.q_stride_s | p.q_stride_h) << 1) & 3) == 0;
  // 8-bit caches: every round's q pair, key scale and int8 key offset address before the wait,
  // so that after it a round is its loads alone (the 8-bit q rounds' index math sat between the
  // wait and the first K/V copy). The 16-bit kernels compute theirs after the wait (precomputed,
  // their main loops are scheduled otherwise, and slower).
  if constexpr (C::kQuant) {
#pragma unroll
    for (int it = 0; it < K::QIT; ++it) {
      int d;
      const uint16_t* src = s.pair_row(tid, it, d);
      s.q_src[it] = src != nullptr ? src + d : nullptr;
      s.ks_src[it] = s.k_scale + d;
      pin(s.q_src[it]), pin(s.ks_src[it]);
      if constexpr (K::kOffsetsInRegs) {
        s.ko_src[it] = s.k_offset != nullptr ? s.k_offset + d : nullptr;
        pin(s.ko_src[it]);
      }
    }
  }
}

// Per-row mask / pse / output offsets (shared memory, read after the q barrier). 8-bit caches:
// a thread of the last warps per row, one pass, instead of M_TILE / NW passes by each warp's
// lane 0 -- this loop was over half of the pre-wait code, exposed wherever nothing runs ahead
// of the kernel. 16-bit kernels gain nothing from it and keep lane 0 of each warp.
template <class K>
__device__ __forceinline__ void row_offsets(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
                                            const Unit& u, const SmemRegions& sm) {
  constexpr int D = K::D, M_TILE = K::M_TILE, NT = K::NT, NW = K::NW;
  auto one = [&](int rr) {
    const int r = min(u.row0 + rr, u.q_rows - 1), gh = r / u.s_q, i = r - gh * u.s_q, h = u.kvh * u.group + gh;
    sm.mask_row[rr] = u.b * p.mask_stride_b + h * p.mask_stride_h + i * p.mask_stride_q;
    sm.pse_row[rr] = u.b * p.pse_stride_b + h * p.pse_stride_h + i * p.pse_stride_q;
    sm.out_row[rr] = u.ns == 1 ? out_row_final(p, u, r - u.row0) : (u.part * u.q_rows + r) * D;
    sm.lse_row[rr] = u.ns == 1 ? lse_row_final(t, u, r - u.row0) : u.part * u.q_rows + r;
  };
  if constexpr (K::C::kQuant) {
    if (const int rr = K::tid() - (NT - M_TILE); rr >= 0) one(rr);
  } else {
    for (int rr = K::warp(); rr < M_TILE; rr += NW)
      if (K::lane() == 0) one(rr);
  }
}

// K/V copies: cp.async 16 B per lane and copy; a round of 32 lanes covers kRows whole rows
// (lane -> row lane / kCpr, 16-B column lane % kCpr); rows advance by kRows per copy.
// Everything but the chunk's base address is fixed per lane, so a copy costs a 64-bit add.
// The destination column is XOR-swizzled by row (Cfg::k_at / v_at), which repeats every
// kSwzPeriod copies: those few offsets are computed once.
template <class K>
struct KvSources {
  uint8_t* wbase;
  int block_size;
  PageMath pm;
  int first_key;  // key of this warp's chunk 0
  const int* bt_row;
  int lrow, lcol;
  const char* k_lane;
  const char* v_lane;
  int64_t k_step, v_step;
  uint32_t dst_k[K::kSwzN], dst_v[K::kSwzN];
  int64_t k_jstep, v_jstep;
  const int* kv_len_ptr;
  // int8 (Cfg::kVScalesInSmem): value scale / offset i = tid + r * NT of the head (i >= D: offset
  // i - D; without offsets, no bytes: zeros), copied to shared memory after the wait.
  const float* vs_src[K::kVsRounds];
  uint32_t vs_bytes[K::kVsRounds];
  __device__ __forceinline__ KvSources(uint8_t* wb, int bs) : wbase(wb), block_size(bs), pm(bs) {}
};

template <class K>
__device__ __forceinline__ void kv_sources(KvSources<K>& s, const IncreFlashAttentionCudaParams& p, const Unit& u,
                                           const SmemRegions& sm) {
  using C = typename K::C;
  constexpr int D = K::D, NT = K::NT;
  constexpr int64_t elt = K::elt;
  const int kvh = u.kvh, b = u.b;
  s.first_key = u.k_begin + K::warp() * kChunkKeys;
  s.bt_row = static_cast<const int*>(p.block_table) + static_cast<int64_t>(b) * p.block_table_stride;
  s.lrow = K::lane() / K::kCpr, s.lcol = K::lane() % K::kCpr;
  s.k_lane = static_cast<const char*>(p.k) + ((kvh * p.k_stride_2 + s.lrow * p.k_stride_1) * elt + s.lcol * 16);
  s.v_lane = static_cast<const char*>(p.v) + ((kvh * p.v_stride_2 + s.lrow * p.v_stride_1) * elt + s.lcol * 16);
  s.k_step = K::kRows * p.k_stride_1 * elt, s.v_step = K::kRows * p.v_stride_1 * elt;
#pragma unroll
  for (int i = 0; i < K::kSwzN; ++i) {
    s.dst_k[i] = smem_addr(s.wbase) + C::k_at(s.lrow + i * K::kRows, s.lcol);
    s.dst_v[i] = smem_addr(s.wbase) + C::kTensorBytesK + C::v_at(s.lrow + i * K::kRows, s.lcol);
    pin(s.dst_k[i]), pin(s.dst_v[i]);
  }
  // Contiguous caches: k_lane / v_lane start at the lane's row of batch b -- 8-bit: of this warp's
  // chunk 0, so chunk j is j * k_jstep on and its address needs no index math after the wait.
  if (s.block_size == 0) {
    s.k_lane += (b * p.k_stride_0 + static_cast<int64_t>(K::kChunk0 * s.first_key) * p.k_stride_1) * elt;
    s.v_lane += (b * p.v_stride_0 + static_cast<int64_t>(K::kChunk0 * s.first_key) * p.v_stride_1) * elt;
  }
  s.k_jstep = K::kStepKeys * p.k_stride_1 * elt, s.v_jstep = K::kStepKeys * p.v_stride_1 * elt;
  pin(s.k_lane), pin(s.v_lane), pin(s.k_step), pin(s.v_step);
  if constexpr (C::kQuant) pin(s.k_jstep), pin(s.v_jstep);
  s.kv_len_ptr = static_cast<const int*>(p.kv_lens) + b;
  pin(s.kv_len_ptr);
  if constexpr (C::kVScalesInSmem) {
    const float* v_scale = static_cast<const float*>(p.v_scale) + kvh * D;
    const float* v_offset = p.v_offset ? static_cast<const float*>(p.v_offset) + kvh * D : nullptr;
#pragma unroll
    for (int r = 0; r < K::kVsRounds; ++r) {
      const int i = K::tid() + r * NT;
      const bool off = i >= D;
      s.vs_src[r] = off ? (v_offset ? v_offset + (i - D) : v_scale) : v_scale + i;
      s.vs_bytes[r] = off && v_offset == nullptr ? 0u : 4u;
      pin(s.vs_src[r]), pin(s.vs_bytes[r]);
    }
  }
}

}  // namespace dualops::cuda::ifa

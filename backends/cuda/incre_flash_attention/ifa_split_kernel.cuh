// The IFA split kernel: one CTA per (plan unit, q-row tile). A unit is (batch b, KV head kvh,
// split); its CTA reads that head's keys [split * split_len, min(+split_len, kv_lens[b])) -- all
// of them for the plan's whole groups -- once for all G x S_q query rows of the head (rows
// ordered r = g * S_q + i, as the plan says).
// Without split-KV it writes out / lse; with it, fp32 partials, which the last CTA of each
// (batch, KV head, q tile) group merges in place when they are few (merge_splits), else the
// combine kernel (ifa_combine_kernel.cuh) does.
#pragma once
#include <cooperative_groups.h>
#include <dualops/params.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "ifa_config.cuh"
#include "ifa_measure.cuh"
#include "ifa_primitives.cuh"
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

// Block ids of a warp's next chunks, 32 at a time: lane i holds the id for chunk (base + i), so
// the dependent block-table load is made once per 32 chunks, a window ahead of its use.
struct BlockWindow {
  int cur = -1, nxt = -1;
};

}  // namespace dualops::cuda::ifa

#include "ifa_prefetch.cuh"
#include "ifa_split_merge.cuh"

namespace dualops::cuda::ifa {

template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
__global__ void __launch_bounds__(Cfg<QT, KVT, D, SHAPE>::kWarps * 32, Cfg<QT, KVT, D, SHAPE>::kCtasPerSm)
    ifa_split_kernel(const __grid_constant__ IncreFlashAttentionParams p,
                     const __grid_constant__ IncreFlashAttentionTiling t, int merge_mode, int stagger_ctas,
                     int stagger_ns, int second_fill_keys, int lockstep_burst) {
  using C = Cfg<QT, KVT, D, SHAPE>;
  using MT = typename C::MT;
  using L = SmemLayout<QT, KVT, D, M_TILE, SHAPE>;
  using CML = ClusterMergeLayout<QT, KVT, D, M_TILE, SHAPE>;
  constexpr bool kClusterMerge = CML::kFits;
  // 8-bit caches: the epilogue's summed fragments go to shared memory in head-dim order (the
  // cluster-merge buffer, rows kOutPitch apart) and out from there as whole 16-B runs of a row.
  // Stored straight from the fragments, a lane's two columns lie 16 apart (Cfg::pv_d), so each
  // warp store touched 32 sectors instead of 8, and the partials' release and the kernel boundary
  // waited for four times the writes. 16-bit caches keep the direct stores (staging gains nothing there).
  constexpr bool kStageOut = CML::kFits && CML::kStaged;
  constexpr int kOutPitch = CML::kOutPitch;
  constexpr int NW = C::kWarps, STAGES = C::kStages, NT = NW * 32;
  constexpr int MTILES = M_TILE / 16, KSTEPS = C::kKSteps, NTILES = C::kNTiles, QP = L::kQParts;
  constexpr int PP = C::kPParts;
  // int8 key offsets: the per-row score term sum_d q_d s_d o_d is summed from the q values,
  // scales and offsets the q-tile load brings into registers, where each thread's q pairs
  // lie in one row (one m-tile, NT a multiple of 128); otherwise one warp per row reads them.
  // (int8 keys enter the mma exactly, as x: folding the +1152 bias of the conversion into the
  // offsets would save the subtraction but puts a 1-key request's lse off on q with a one-signed bias.)
  constexpr bool kOffsetsInRegs = std::is_same_v<KVT, int8_t> && QP == 2 && MTILES == 1;

  DUALOPS_IFA_TRACE_BEGIN(p.out);
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* kv_smem = smem;
  uint4* qfrag = reinterpret_cast<uint4*>(smem + L::kKv);  // [MTILES][KSTEPS][QP][32]
  float* v_scale_s = reinterpret_cast<float*>(smem + L::kKv + L::kQfrag);  // kVScalesInSmem: [D] scales, [D] offsets
  int64_t* mask_row = reinterpret_cast<int64_t*>(smem + L::kKv + L::kQfrag + L::kVScales);
  int64_t* pse_row = mask_row + M_TILE;
  int64_t* out_row = pse_row + M_TILE;  // row's element offset in out (no split) or o_accum
  int64_t* lse_row = out_row + M_TILE;  // row's index in lse (no split) or lse_accum
  float* row_add = reinterpret_cast<float*>(lse_row + M_TILE);
  float* warp_m = row_add + M_TILE;      // [NW][M_TILE]
  float* warp_l = warp_m + NW * M_TILE;  // [NW][M_TILE]
  float* fin_m = warp_l + NW * M_TILE;   // [M_TILE]
  float* fin_l = fin_m + M_TILE;         // [M_TILE]
  int* scratch = reinterpret_cast<int*>(fin_l + M_TILE);
  float4* ebuf = reinterpret_cast<float4*>(kv_smem);  // [NW][MTILES][NTILES][32], after the main loop
  float* clu_out = reinterpret_cast<float*>(kv_smem + CML::kOut);  // the CTA's rows (cluster merge, kStageOut)
  float* clu_lse = reinterpret_cast<float*>(kv_smem + CML::kLse);  //   [M_TILE][kOutPitch] and [M_TILE]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;
  // Unit u of the plan (docs/internals.md "IFA plan"): the first t.whole_groups units take a
  // whole (batch, KV head) group each, unsplit; the others take split `split` of a later group.
  const int u = blockIdx.x;
  const bool whole = u < t.whole_groups;
  const int ns = whole ? 1 : t.num_splits;  // splits of this unit's group
  const int grp = whole ? u : t.whole_groups + (u - t.whole_groups) / t.num_splits;
  const int split = whole ? 0 : (u - t.whole_groups) % t.num_splits;
  const int span = whole ? t.max_kv_len : t.split_len;  // keys the plan gives the unit
  const int kvh = grp % t.h_kv, b = grp / t.h_kv;
  const int64_t part = static_cast<int64_t>(grp) * t.num_splits + split;  // its partial's index
  const int row0 = blockIdx.y * M_TILE;
  const int q_rows = t.q_rows, s_q = t.s_q, group = t.group;
  const int k_begin = split * span;
  // keys the plan allows this split (kv_lens[b] may cut it shorter): block ids below it are
  // inside the block table, so they can be fetched before kv_lens arrives
  const int k_cap = min(k_begin + span, t.max_kv_len);
  // The L2 prefetch of the first fill goes out first, ahead of the address set-up below (several
  // hundred instructions before the wait): where nothing runs ahead of the kernel to hide that
  // set-up, the DRAM stream starts that much earlier.
  // (%nsmid may exceed the SMs present: then a few CTAs of the second wave prefetch too)
  const bool first_wave =
      C::kPrefetchKeys > 0 && blockIdx.y * gridDim.x + blockIdx.x < sm_id_count() * C::kCtasPerSm;
  if (first_wave) prefetch_fill<C>(p, t, b, kvh, k_begin, k_cap, span, 0);

  // ---- before the grid-dependency wait: every address, from the parameters alone ------------
  // A CTA sits in the wait while the kernel before it finishes (programmatic dependent launch),
  // so what is computed here is off the call's critical path; after the wait, kv_lens, the q
  // tile and the first K/V copies go out with little arithmetic in between (rather than the
  // index math sitting between the wait and the first copy). pin() makes each
  // value exist before the wait. Before it, global memory is only touched by the L2 prefetch of
  // the first K/V copies (and, paged, the block ids it reads): hints, whose data is not used.
  const QT* q = static_cast<const QT*>(p.q);
  const float* k_scale = C::kQuant ? static_cast<const float*>(p.k_scale) + kvh * D : nullptr;
  const float* k_offset = (C::kQuant && p.k_offset) ? static_cast<const float*>(p.k_offset) + kvh * D : nullptr;
  // q tile: thread tid loads the pairs idx = tid + it * NT of the A-fragment order (mt, ks, lane,
  // reg). NT is a multiple of 128, so its lane and reg -- its row within an m-tile and its
  // column within a k-step -- are the same in every round: one row address per m-tile.
  static_assert(NT % 128 == 0, "whole A-fragment rounds per thread");
  constexpr int kQPairs = MTILES * KSTEPS * 32 * 4, QIT = (kQPairs + NT - 1) / NT;
  const int q_ln = (tid >> 2) & 31, q_reg = tid & 3;
  const int q_rr = (q_ln >> 2) + 8 * (q_reg & 1);   // row within an m-tile
  const int q_kk = 2 * (q_ln & 3) + 8 * (q_reg >> 1);  // k index of the pair's first value
  const uint16_t* q_row[MTILES];  // row mt * 16 + q_rr of the tile; nullptr past q_rows
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt) {
    const int r = row0 + mt * 16 + q_rr, gh = r / s_q, i = r - gh * s_q;
    q_row[mt] = r < q_rows ? reinterpret_cast<const uint16_t*>(q + b * p.q_stride_b + i * p.q_stride_s +
                                                                (kvh * group + gh) * p.q_stride_h)
                           : nullptr;
    pin(q_row[mt]);
  }
  // a pair (d, d + 1) is one aligned 32-bit word when q and its strides allow (d is even)
  const bool q_word = ((reinterpret_cast<uintptr_t>(p.q) | static_cast<uintptr_t>(p.q_stride_b | p.q_stride_s | p.q_stride_h) << 1) & 3) == 0;
  // Round it of the q-tile load: the pair's row (nullptr past q_rows) and its head-dim index d.
  // (kQPairs is a multiple of NT: every round lies in the tile.)
  static_assert(kQPairs % NT == 0, "whole q-tile rounds");
  auto q_pair_row = [&](int it, int& d) {
    const int kt = (tid >> 7) + it * (NT / 128);  // (mt, ks) of this round
    const int ks = kt % KSTEPS, mt = kt / KSTEPS;
    d = C::qk_d(ks, q_kk);  // d + 1 is the pair's second
    const uint16_t* src = q_row[0];
#pragma unroll
    for (int m = 1; m < MTILES; ++m) src = mt == m ? q_row[m] : src;
    return src;
  };
  // 8-bit caches: every round's q pair, key scale and int8 key offset address before the wait,
  // so that after it a round is its loads alone (the 8-bit q rounds' index math sat between the
  // wait and the first K/V copy). The 16-bit kernels compute theirs after the wait (precomputed,
  // their main loops are scheduled otherwise, and slower).
  const uint16_t* q_src[C::kQuant ? QIT : 1];
  const float* ks_src[C::kQuant ? QIT : 1];
  const float* ko_src[kOffsetsInRegs ? QIT : 1];
  if constexpr (C::kQuant) {
#pragma unroll
    for (int it = 0; it < QIT; ++it) {
      int d;
      const uint16_t* src = q_pair_row(it, d);
      q_src[it] = src != nullptr ? src + d : nullptr;
      ks_src[it] = k_scale + d;
      pin(q_src[it]), pin(ks_src[it]);
      if constexpr (kOffsetsInRegs) {
        ko_src[it] = k_offset != nullptr ? k_offset + d : nullptr;
        pin(ko_src[it]);
      }
    }
  }
  // final output / lse positions of tile row rr
  auto out_row_final = [&](int rr) -> int64_t {
    const int r = row0 + rr, gh = r / s_q, i = r - gh * s_q;
    return b * p.out_stride_b + i * p.out_stride_s + (kvh * group + gh) * p.out_stride_h;
  };
  auto lse_row_final = [&](int rr) -> int64_t {
    const int r = row0 + rr, gh = r / s_q, i = r - gh * s_q;
    return (static_cast<int64_t>(b) * t.h_q + kvh * group + gh) * s_q + i;
  };
  // Per-row mask / pse / output offsets (shared memory, read after the q barrier). 8-bit caches:
  // a thread of the last warps per row, one pass, instead of M_TILE / NW passes by each warp's
  // lane 0 -- this loop was over half of the pre-wait code, exposed wherever nothing runs ahead
  // of the kernel. 16-bit kernels gain nothing from it and keep lane 0 of each warp.
  auto row_offsets = [&](int rr) {
    const int r = min(row0 + rr, q_rows - 1), gh = r / s_q, i = r - gh * s_q, h = kvh * group + gh;
    mask_row[rr] = b * p.mask_stride_b + h * p.mask_stride_h + i * p.mask_stride_q;
    pse_row[rr] = b * p.pse_stride_b + h * p.pse_stride_h + i * p.pse_stride_q;
    out_row[rr] = ns == 1 ? out_row_final(r - row0) : (part * q_rows + r) * D;
    lse_row[rr] = ns == 1 ? lse_row_final(r - row0) : part * q_rows + r;
  };
  static_assert(M_TILE <= NT, "a thread per row");
  if constexpr (C::kQuant) {
    if (const int rr = tid - (NT - M_TILE); rr >= 0) row_offsets(rr);
  } else {
    for (int rr = warp; rr < M_TILE; rr += NW)
      if (lane == 0) row_offsets(rr);
  }

  // K/V copies: cp.async 16 B per lane and copy; a round of 32 lanes covers kRows whole rows
  // (lane -> row lane / kCpr, 16-B column lane % kCpr); rows advance by kRows per copy.
  // Everything but the chunk's base address is fixed per lane, so a copy costs a 64-bit add.
  // The destination column is XOR-swizzled by row (Cfg::k_at / v_at), which repeats every
  // kSwzPeriod copies: those few offsets are computed once.
  uint8_t* wbase = kv_smem + warp * STAGES * C::kStageBytes;
  const int block_size = t.block_size;
  const PageMath pm(block_size);
  const int first_key = k_begin + warp * kChunkKeys;  // key of this warp's chunk 0
  constexpr int kStepKeys = NW * kChunkKeys;         // keys between its consecutive chunks
  const int* bt_row = static_cast<const int*>(p.block_table) + static_cast<int64_t>(b) * p.block_table_stride;
  constexpr int kCpr = C::kRowBytes / 16, kRows = 32 / kCpr, kCopies = kChunkKeys / kRows;
  static_assert(32 % kCpr == 0 && kChunkKeys % kRows == 0, "whole copy rounds");
  const int lrow = lane / kCpr, lcol = lane % kCpr;
  constexpr int64_t elt = sizeof(KVT);
  const char* k_lane = static_cast<const char*>(p.k) + ((kvh * p.k_stride_2 + lrow * p.k_stride_1) * elt + lcol * 16);
  const char* v_lane = static_cast<const char*>(p.v) + ((kvh * p.v_stride_2 + lrow * p.v_stride_1) * elt + lcol * 16);
  const int64_t k_step = kRows * p.k_stride_1 * elt, v_step = kRows * p.v_stride_1 * elt;
  constexpr int kSwzPeriod = kRows >= 8 ? 1 : 8 / kRows;
  constexpr int kSwzN = kSwzPeriod < kCopies ? kSwzPeriod : kCopies;
  uint32_t dst_k[kSwzN], dst_v[kSwzN];
#pragma unroll
  for (int i = 0; i < kSwzN; ++i) {
    dst_k[i] = smem_addr(wbase) + C::k_at(lrow + i * kRows, lcol);
    dst_v[i] = smem_addr(wbase) + C::kTensorBytesK + C::v_at(lrow + i * kRows, lcol);
    pin(dst_k[i]), pin(dst_v[i]);
  }
  // Contiguous caches: k_lane / v_lane start at the lane's row of batch b -- 8-bit: of this warp's
  // chunk 0, so chunk j is j * k_jstep on and its address needs no index math after the wait.
  constexpr int kChunk0 = C::kQuant ? 1 : 0;
  if (block_size == 0) {
    k_lane += (b * p.k_stride_0 + static_cast<int64_t>(kChunk0 * first_key) * p.k_stride_1) * elt;
    v_lane += (b * p.v_stride_0 + static_cast<int64_t>(kChunk0 * first_key) * p.v_stride_1) * elt;
  }
  const int64_t k_jstep = kStepKeys * p.k_stride_1 * elt, v_jstep = kStepKeys * p.v_stride_1 * elt;
  pin(k_lane), pin(v_lane), pin(k_step), pin(v_step);
  if constexpr (C::kQuant) pin(k_jstep), pin(v_jstep);
  const int* kv_len_ptr = static_cast<const int*>(p.kv_lens) + b;
  pin(kv_len_ptr);
  // int8 (Cfg::kVScalesInSmem): value scale / offset i = tid + r * NT of the head (i >= D: offset
  // i - D; without offsets, no bytes: zeros), copied to shared memory after the wait.
  constexpr int kVsRounds = C::kVScalesInSmem ? (2 * D + NT - 1) / NT : 1;
  const float* vs_src[kVsRounds];
  uint32_t vs_bytes[kVsRounds];
  if constexpr (C::kVScalesInSmem) {
    const float* v_scale = static_cast<const float*>(p.v_scale) + kvh * D;
    const float* v_offset = p.v_offset ? static_cast<const float*>(p.v_offset) + kvh * D : nullptr;
#pragma unroll
    for (int r = 0; r < kVsRounds; ++r) {
      const int i = tid + r * NT;
      const bool off = i >= D;
      vs_src[r] = off ? (v_offset ? v_offset + (i - D) : v_scale) : v_scale + i;
      vs_bytes[r] = off && v_offset == nullptr ? 0u : 4u;
      pin(vs_src[r]), pin(vs_bytes[r]);
    }
  }

  // Launched as a programmatic dependent of the previous kernel in the stream: this CTA was
  // scheduled while that kernel was finishing; nothing in global memory is read (but the hints
  // above) or written before it has completed (its writes -- q, the caches, kv_lens -- are then
  // visible).
  // Let the next kernel (the combine, or the next call's split kernel) be scheduled now: it
  // waits for this grid's completion before touching global memory.
#if DUALOPS_IFA_TRACE >= 2 && defined(DUALOPS_IFA_TRACE_WARM)
  // (does a probe run before the stream keep its lines until the probe after it?)
  if (tid == 0) {
    uint32_t x = trace_probe(static_cast<uint32_t>(clock()));
    DUALOPS_IFA_DEP(x);
  }
#endif
  pdl_launch_dependents();
  pdl_wait();
  DUALOPS_IFA_MARK(kTrWaited);
  // A multi-wave grid of narrow CTAs (launcher: stagger_ns > 0): the first stagger_ctas CTAs --
  // the first wave -- start their work spread evenly over stagger_ns. Released by one wait, a
  // wave of equal units otherwise starts, streams and ends in step, so its CTAs' prologues and
  // epilogues (nothing streaming) fall together, and so do the next waves'; spread, the two
  // CTAs of an SM alternate and HBM stays busy.
  if (stagger_ns > 0) {
    const int cta = blockIdx.y * gridDim.x + blockIdx.x;
    if (cta < stagger_ctas) {
      const uint64_t until = global_ns() + static_cast<uint64_t>(cta) * stagger_ns / stagger_ctas;
      while (global_ns() < until) __nanosleep(128);
    }
  }
  if constexpr (C::kPrefetchKeys > 0) {  // the second fill (launcher: second_fill_keys)
    if (first_wave && second_fill_keys > 0 && span >= max(second_fill_keys, 2 * C::kPrefetchKeys))
      prefetch_fill<C>(p, t, b, kvh, k_begin + C::kPrefetchKeys, k_cap, span, 2);
  }
  if constexpr ((kAblate & 1024) != 0) {  // measurement build: launch and wait only
    DUALOPS_IFA_MARK_EXIT();
    return;
  }
  // Loads of what earlier kernels write are plain loads from here on: an __ldg (ld.global.nc)
  // counts as invariant, and the compiler was seen hoisting one above the wait.
  const int kv_len_raw = *kv_len_ptr;
  // Block ids of chunks j0 .. j0 + 31 of this warp, one per lane (paged caches).
  auto window = [&](int j0) {
    const int kc = first_key + (j0 + lane) * kStepKeys;
    return kc < k_cap ? bt_row[pm.block(kc)] : -1;
  };
  BlockWindow win;
  if (block_size > 0) {
    win.cur = window(0);
    win.nxt = window(32);
  }

  // ---- q tile (and key scales) into registers: every load goes out at once, with kv_lens ----
  uint32_t qraw[QIT];                 // two raw 16-bit q values (d, d + 1)
  float ksc[C::kQuant ? QIT : 1][2];  // key scales of d, d + 1
  float kof[kOffsetsInRegs ? QIT : 1][2];  // int8 key offsets of d, d + 1 (0 without offsets)
#pragma unroll
  for (int it = 0; it < QIT; ++it) {
    int d = 0;  // 8-bit: q_src is the pair's own address
    const uint16_t* src = C::kQuant ? q_src[it] : q_pair_row(it, d);
    uint32_t raw = 0;
    if (src != nullptr) {
      raw = q_word ? *reinterpret_cast<const unsigned int*>(src + d)
                   : static_cast<uint32_t>(src[d]) | (static_cast<uint32_t>(src[d + 1]) << 16);
    }
    qraw[it] = raw;
    if constexpr (C::kQuant) {
      ksc[it][0] = ks_src[it][0];
      ksc[it][1] = ks_src[it][1];
    }
    if constexpr (kOffsetsInRegs) {
      kof[it][0] = ko_src[it] != nullptr ? ko_src[it][0] : 0.f;
      kof[it][1] = ko_src[it] != nullptr ? ko_src[it][1] : 0.f;
    }
  }
#if DUALOPS_IFA_TRACE
  {
    int x = kv_len_raw;
    DUALOPS_IFA_DEP(x);
    DUALOPS_IFA_MARK(kTrKvLen);
  }
#endif
  // int8 (Cfg::kVScalesInSmem): the head's value scales and offsets into shared memory, in each
  // thread's first commit group (landed before its first chunk, so before the epilogue reads
  // them), instead of per-column loads in the epilogue -- a global round trip at the end of
  // every call.
  if constexpr (C::kVScalesInSmem) {
#pragma unroll
    for (int r = 0; r < kVsRounds; ++r)
      if (tid + r * NT < 2 * D) cp_async_4(smem_addr(v_scale_s + tid + r * NT), vs_src[r], vs_bytes[r]);
  }
  const int kv_len = min(max(kv_len_raw, 0), t.max_kv_len);
  const int k_end = min(k_begin + span, kv_len);
  const int n_keys = max(k_end - k_begin, 0);

  // ---- K/V pipeline: this warp's chunks, STAGES deep; the first copies go out before the q
  // tile is prepared, so that work hides under their latency ----------------------------------
  const int n_chunks = (n_keys + kChunkKeys - 1) / kChunkKeys;
  const int my_chunks = n_chunks > warp ? (n_chunks - 1 - warp) / NW + 1 : 0;
  uint32_t bad_blocks = 0;  // bit (j % 32): chunk j's block id is out of range (its keys are hidden)

  auto issue = [&](int j) {
    const int kc = first_key + j * kStepKeys;
    int valid = min(kChunkKeys, k_end - kc);
    int64_t k_off, v_off;  // bytes from this lane's base to the chunk's first row
    if (block_size > 0) {
      if ((j & 31) == 0 && j > 0) {
        win.cur = win.nxt;
        win.nxt = window(j + 32);
      }
      const int blk = __shfl_sync(0xffffffffu, win.cur, j & 31);
      const int slot = pm.slot(kc);  // a chunk's rows are consecutive slots of one block
      const bool ok = blk >= 0 && blk < p.num_blocks;
      bad_blocks = ok ? (bad_blocks & ~(1u << (j & 31))) : (bad_blocks | (1u << (j & 31)));
      valid = ok ? valid : 0;
      const int64_t bb = ok ? blk : 0;
      k_off = (bb * p.k_stride_0 + slot * p.k_stride_1) * elt;
      v_off = (bb * p.v_stride_0 + slot * p.v_stride_1) * elt;
    } else if constexpr (C::kQuant) {  // (k_lane / v_lane: chunk 0's rows)
      k_off = j * k_jstep;
      v_off = j * v_jstep;
    } else {
      k_off = static_cast<int64_t>(kc) * p.k_stride_1 * elt;
      v_off = static_cast<int64_t>(kc) * p.v_stride_1 * elt;
    }
    const char* kp = k_lane + k_off;
    const char* vp = v_lane + v_off;
    const uint32_t so = (j % STAGES) * C::kStageBytes;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      // Rows past the keys: src-size 0, nothing is read and the destination is zero-filled.
      const uint32_t n = lrow + i * kRows < valid ? 16u : 0u;
      const uint32_t ro = so + (i / kSwzN) * kSwzN * kRows * C::kRowBytes;  // whole swizzle periods
      cp_async_16(dst_k[i % kSwzN] + ro, kp, n);
      cp_async_16(dst_v[i % kSwzN] + ro, vp, n);
      kp += k_step;
      vp += v_step;
    }
  };

  // Each main-loop step consumes SUB of this warp's chunks (Cfg::kSub): its chunk count is
  // rounded up to whole steps, and the chunk past its keys is "issued" with no rows (nothing
  // read, the stage zero-filled) and masked like any key past kv_len. (Units of one chunk per
  // warp, where that would double the math, run the kSub = 1 kernel: kWide1, ifa_launch.cuh.)
  constexpr int SUB = MTILES <= 2 ? C::kSub : 1;  // 4 m-tiles x 2 chunks of scores would spill
  const int my_steps = (my_chunks + SUB - 1) / SUB, my_issued = my_steps * SUB;
  // Lockstep pipeline (kWideLs; launcher: lockstep_keys, the H100's long units): each warp keeps
  // one step's chunks in flight (16-bit caches one chunk, 8-bit two) -- the next step's go out
  // after the current one's have landed -- and the CTA's warps step together behind a named
  // barrier, so the CTA reads 128 (8-bit: 256) consecutive keys at a time with 64 KB in flight
  // (D 128). The barrier comes before the wait (warps issue as their own chunks land) or, with
  // lockstep_burst (launcher: contiguous caches, units of >= 8192 keys), after it: every warp's
  // chunks have landed and the next keys go out in one burst. GPUs of little DRAM bandwidth per
  // SM stream faster so (fewer, more orderly requests; the SMs' ends spread less); the others,
  // short splits and the burst on paged caches lose (the planner's rules: docs/tuning.md).
  constexpr bool kLockstep = C::kLockstep;
  static_assert(!kLockstep || STAGES >= 2 * SUB, "lockstep pipeline: a step's chunks and the next step's");
  const int lock_steps = (n_chunks / NW + SUB - 1) / SUB;  // steps every warp has
#pragma unroll
  for (int j = 0; j < STAGES - SUB; ++j) {
    if (j < my_issued && (j < SUB || !kLockstep)) issue(j);
    cp_async_commit();
  }
  DUALOPS_IFA_MARK(kTrIssued);
#if DUALOPS_IFA_TRACE
  {
    uint32_t x = qraw[QIT - 1];
    DUALOPS_IFA_DEP(x);
    DUALOPS_IFA_MARK(kTrQRaw);
  }
#endif

  // ---- q tile -> A fragments in shared memory -------------------------------------------
  // 8-bit caches fold the key scale into q (score = sum q_d s_d x_d + sum q_d s_d o_d); the
  // scaled q is kept as hi + lo fp16 parts (two mma) after a power-of-two normalization, so
  // the folding costs no precision whatever the scales' magnitude. One fp16 part is faster on
  // bandwidth-bound calls but puts the lse outside the parity bound (ablation bit 256).
  float qmul = 1.f;
  if constexpr (C::kQuant) {
    if (tid == 0) scratch[0] = 0;
    if (kOffsetsInRegs && tid < M_TILE) row_add[tid] = 0.f;
    float amax = 0.f;  // over the tile's rows (rows past q_rows hold 0)
#pragma unroll
    for (int it = 0; it < QIT; ++it) {
      amax = fmaxf(amax, fabsf(bits_to_f32<QT>(qraw[it] & 0xffffu) * ksc[it][0]));
      amax = fmaxf(amax, fabsf(bits_to_f32<QT>(qraw[it] >> 16) * ksc[it][1]));
    }
    amax = warp_max(amax);
    __syncthreads();
    if (lane == 0) atomicMax(scratch, __float_as_int(amax));
    __syncthreads();
    amax = __int_as_float(scratch[0]);
    int e = (amax > 0.f && amax <= FLT_MAX) ? 7 - ilogbf(amax) : 0;
    e = min(max(e, -100), 100);
    qmul = ldexpf(1.f, e);
  }
  // kOffsetsInRegs: with one m-tile and NT a multiple of 128, a thread's pairs all lie in one row,
  // (lane / 16) + 8 * (lane % 2) of the warp's rows, shared with the lanes that differ in bits
  // 1..3: a local sum, three shuffles, one shared atomic per row and warp.
  static_assert(!kOffsetsInRegs || (MTILES == 1 && NT % 128 == 0), "one q row per thread");
  float opart = 0.f;  // kOffsetsInRegs: the row's sum of q . scale . offset
#pragma unroll
  for (int it = 0; it < QIT; ++it) {
    const int idx = tid + it * NT;
    if (kQPairs % NT != 0 && idx >= kQPairs) break;
    const int reg = idx & 3, ln = (idx >> 2) & 31, ks = (idx >> 7) % KSTEPS, mt = (idx >> 7) / KSTEPS;
    float v[2] = {bits_to_f32<QT>(qraw[it] & 0xffffu), bits_to_f32<QT>(qraw[it] >> 16)};
    if constexpr (kOffsetsInRegs) opart += v[0] * ksc[it][0] * kof[it][0] + v[1] * ksc[it][1] * kof[it][1];
    if constexpr (C::kQuant) v[0] *= ksc[it][0] * qmul, v[1] *= ksc[it][1] * qmul;
    uint32_t* dst = reinterpret_cast<uint32_t*>(qfrag + ((mt * KSTEPS + ks) * QP) * 32 + ln) + reg;
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
      atomicAdd(&row_add[rr], opart * p.softmax_scale * kLog2e);
    }
  }
  // Per-row log2-domain score offset of an int8 key offset: with kOffsetsInRegs summed above
  // from the q values, scales and offsets already in registers; otherwise one warp per row reads
  // them (a global round trip).
  const float score_mul = p.softmax_scale * kLog2e / qmul;
  for (int rr = warp; !kOffsetsInRegs && rr < M_TILE; rr += NW) {
    float acc = 0.f;
    if (k_offset != nullptr && row0 + rr < q_rows) {
      const int r = row0 + rr, gh = r / s_q, i = r - gh * s_q;
      const QT* qr = q + b * p.q_stride_b + i * p.q_stride_s + (kvh * group + gh) * p.q_stride_h;
#pragma unroll
      for (int d = lane; d < D; d += 32) acc += to_f32(qr[d]) * __ldg(k_scale + d) * __ldg(k_offset + d);
      acc = warp_sum(acc);
    }
    if (lane == 0) row_add[rr] = acc * p.softmax_scale * kLog2e;
  }
  __syncthreads();

  // Per-thread rows: mt * 16 + g + 8 * half. lim = first key the row may not see.
  float radd[MTILES][2];
  int lim[MTILES][2];
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int rr = mt * 16 + g + 8 * hf;
      const int r = min(row0 + rr, q_rows - 1);
      const int i = r % s_q;
      radd[mt][hf] = row_add[rr];
      lim[mt][hf] = p.causal ? min(k_end, kv_len - s_q + i + 1) : k_end;
    }
  DUALOPS_IFA_MARK_BAR(kTrQReady, row_add);

  // ---- main loop --------------------------------------------------------------------------
  float acc[MTILES][NTILES][4];
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
    for (int j = 0; j < NTILES; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0.f;
  float m_run[MTILES][2], l_run[MTILES][2];
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) m_run[mt][hf] = -INFINITY, l_run[mt][hf] = 0.f;

  const uint8_t* mask = static_cast<const uint8_t*>(p.atten_mask);
  const float* pse = static_cast<const float*>(p.pse_shift);
  const bool has_bias = mask != nullptr || pse != nullptr;
  constexpr int kQRegs = ((kAblate & 16) != 0 && MTILES * KSTEPS * QP <= 16) ? MTILES * KSTEPS * QP : 0;
  uint4 qreg[kQRegs > 0 ? kQRegs : 1];
#pragma unroll
  for (int i = 0; i < kQRegs; ++i) qreg[i] = qfrag[i * 32 + lane];

  int stage = 0;  // stage of this step's first chunk
  for (int st = 0; st < my_steps; ++st) {
    const int j0 = st * SUB;
    // Read this step's block flags before issuing the next chunks (different bits).
    bool blk_ok[SUB];
#pragma unroll
    for (int t = 0; t < SUB; ++t) blk_ok[t] = ((bad_blocks >> ((j0 + t) & 31)) & 1u) == 0;
    if constexpr (kLockstep) {
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
#if DUALOPS_IFA_TRACE
    if (st == 0) DUALOPS_IFA_MARK(kTrFirstChunk);
#endif

    int kc[SUB];
    const uint8_t* sk[SUB];
    const uint8_t* sv[SUB];
#pragma unroll
    for (int t = 0; t < SUB; ++t) {
      kc[t] = first_key + (j0 + t) * kStepKeys;
      const int stg = stage + t < STAGES ? stage + t : stage + t - STAGES;
      sk[t] = wbase + stg * C::kStageBytes;
      sv[t] = sk[t] + C::kTensorBytesK;
    }

    // S = q . k^T for SUB x 16 keys: n-tile nt holds keys 8 * (nt % 2) .. + 7 of chunk nt / 2.
    float s[MTILES][2 * SUB][4];
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
          ldmatrix_x4(smem_addr(sk[t] + C::k_at(key, 2 * ks + (mi & 1))), bk[t][0], bk[t][1], bk[t][2], bk[t][3]);
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
      using Cvt = typename CvtOf<KVT>::type;
#pragma unroll
      for (int h = 0; h < D / 64; ++h) {
        uint4 w[2 * SUB];
#pragma unroll
        for (int nt = 0; nt < 2 * SUB; ++nt) {
          w[nt] = *reinterpret_cast<const uint4*>(sk[nt / 2] + C::k_at((nt % 2) * 8 + g, 4 * h + tq));
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

    // Scale, bias, mask (log2 domain), online softmax. Keys at/after a row's limit, in an
    // invalid block, or masked, become -inf before anything else can touch them.
    // The row reference m_run moves only when a score passes it by more than kLazySlack (log2
    // units; p then stays <= 2^kLazySlack, exact in fp32 l / acc and in the p parts): most
    // chunks take one warp vote instead of the row-max shuffles, the alpha exp2 and the
    // accumulator rescale.
    uint32_t pa[MTILES][PP][SUB][4];  // p (bf16: as hi + lo parts), one A fragment per chunk
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
            const int key = kc[nt / 2] + (nt % 2) * 8 + 2 * tq + e;
            const float x = s[mt][nt][2 * hf + e] * score_mul + radd[mt][hf];
            s[mt][nt][2 * hf + e] = (key >= lim[mt][hf] || !blk_ok[nt / 2]) ? -INFINITY : x;
          }
        if (has_bias) {  // a real branch: predicated loads would cost issue slots on every chunk
#pragma unroll
          for (int nt = 0; nt < 2 * SUB; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = kc[nt / 2] + (nt % 2) * 8 + 2 * tq + e;
              float& x = s[mt][nt][2 * hf + e];
              if (x == -INFINITY) continue;
              if (mask != nullptr && mask[mask_row[rr] + key * p.mask_stride_k] != 0) x = -INFINITY;
              else if (pse != nullptr) x += __ldg(pse + pse_row[rr] + key * p.pse_stride_k) * kLog2e;
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2 * SUB; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) lmax[hf] = fmaxf(lmax[hf], s[mt][nt][2 * hf + e]);
      }
      // (-inf + slack is -inf: a row's first key always moves its reference)
      const bool grow = lmax[0] > m_run[mt][0] + kLazySlack || lmax[1] > m_run[mt][1] + kLazySlack;
      if ((kAblate & 2) == 0 && __any_sync(0xffffffffu, grow)) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          float mx = lmax[hf];
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m_run[mt][hf], mx);
          const float alpha = exp2f(m_run[mt][hf] - (m_new == -INFINITY ? 0.f : m_new));  // 0 from -inf
          m_run[mt][hf] = m_new;
          l_run[mt][hf] *= alpha;
#pragma unroll
          for (int jn = 0; jn < NTILES; ++jn) {
            acc[mt][jn][2 * hf] *= alpha;
            acc[mt][jn][2 * hf + 1] *= alpha;
          }
        }
      }
#pragma unroll
      for (int hf = 0; hf < 2 && (kAblate & 2) == 0; ++hf) {
        const float m_use = m_run[mt][hf] == -INFINITY ? 0.f : m_run[mt][hf];
        float lsum = 0.f;
#pragma unroll
        for (int nt = 0; nt < 2 * SUB; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = exp2f(s[mt][nt][2 * hf + e] - m_use);
            s[mt][nt][2 * hf + e] = pv;
            lsum += pv;
          }
        l_run[mt][hf] += lsum;
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

    // O += p . v (hi and lo parts of p against the same v fragments), one k-step per chunk
    if constexpr ((kAblate & 4) != 0) {
      acc[0][0][0] += __uint_as_float(pa[0][0][0][0] ^ pa[MTILES - 1][PP - 1][SUB - 1][3]);  // measurement build: no p.v
    } else if constexpr (!C::kQuant) {
      const int mi = lane >> 3, key = ((mi & 1) << 3) + (lane & 7);
#pragma unroll
      for (int jn = 0; jn < NTILES; jn += 2) {
#pragma unroll
        for (int t = 0; t < SUB; ++t) {
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4_trans(smem_addr(sv[t] + C::v_at(key, jn + (mi >> 1))), b0, b1, b2, b3);
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
      using Cvt = typename CvtOf<KVT>::type;
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
            const uint8_t* src = sv[t] + C::v_at(vrow, byte >> 4) + (byte & 15);
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
    __syncwarp();  // the stages are refilled next
    stage = stage + SUB < STAGES ? stage + SUB : stage + SUB - STAGES;
  }
  cp_async_wait<0>();
  DUALOPS_IFA_MARK(kTrLoopDone);

  // Value scales / offsets of the columns this thread writes (8-bit caches whose scales are not
  // in shared memory: fp8): loaded now, so that the round trip runs under the merge barriers
  // below instead of at the store.
  constexpr int kSlots = MTILES * NTILES * 32;
  constexpr bool kVScalesEarly = C::kQuant && !C::kVScalesInSmem;
  constexpr int kSlotRounds = kVScalesEarly ? (kSlots + NT - 1) / NT : 1;
  float vsc[kSlotRounds][4];  // scale d0, d1, offset d0, d1
  if constexpr (kVScalesEarly) {
    const float* v_scale = static_cast<const float*>(p.v_scale) + kvh * D;
    const float* v_offset = p.v_offset ? static_cast<const float*>(p.v_offset) + kvh * D : nullptr;
#pragma unroll
    for (int k = 0; k < kSlotRounds; ++k) {
      const int slot = tid + k * NT;
      const int ln = slot & 31, jn = (slot >> 5) % NTILES;
      const int d0 = C::pv_d(jn, 2 * (ln & 3)), d1 = C::pv_d(jn, 2 * (ln & 3) + 1);
      const bool in = kSlots % NT == 0 || slot < kSlots;
      vsc[k][0] = in ? __ldg(v_scale + d0) : 0.f, vsc[k][1] = in ? __ldg(v_scale + d1) : 0.f;
      vsc[k][2] = in && v_offset ? __ldg(v_offset + d0) : 0.f, vsc[k][3] = in && v_offset ? __ldg(v_offset + d1) : 0.f;
    }
  }

  // ---- merge the warps' partial softmax states, then write -------------------------------
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float l = l_run[mt][hf];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      l_run[mt][hf] = l;
    }
  if (tq == 0) {  // (warp_m / warp_l are not in the K/V stages: written before the barrier)
#pragma unroll
    for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int rr = mt * 16 + g + 8 * hf;
        // A warp that summed NaN scores (NaN q, key, bias or scale) has a NaN l, also where its
        // reference stayed -inf (every score NaN): l - l turns its reference NaN too, so that the
        // row merge below (a NaN-propagating max) makes the row's out and lse NaN.
        warp_m[warp * M_TILE + rr] = m_run[mt][hf] + (l_run[mt][hf] - l_run[mt][hf]);
        warp_l[warp * M_TILE + rr] = l_run[mt][hf];
      }
  }
  __syncthreads();  // every warp is done with its K/V stages (ebuf reuses them)
  DUALOPS_IFA_MARK_BAR(kTrAllDone, warp_m);
  // Warps past the unit's chunk count saw no key: their states are skipped (short units).
  const int n_active = min(n_chunks, NW);
#if DUALOPS_IFA_TRACE >= 2
  // Probe (trace level 2, trace_probe): straight-line code with no memory access right after
  // the barrier: what running ~3 KB of code not run before costs.
  if (tid == 0) {
    uint32_t x = trace_probe(static_cast<uint32_t>(clock()));
    DUALOPS_IFA_DEP(x);
    DUALOPS_IFA_MARK(kTrAluProbe);
  }
#endif
  if (tid < M_TILE) {
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w)
      if (w < n_active) mx = fmax_nan(mx, warp_m[w * M_TILE + tid]);  // (a NaN warp makes the row NaN)
#if DUALOPS_IFA_TRACE
    DUALOPS_IFA_DEP(mx);
    DUALOPS_IFA_MARK(kTrStatsMax);
#endif
    float l = 0.f;
    if (mx != -INFINITY)
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const float mw = w < n_active ? warp_m[w * M_TILE + tid] : -INFINITY;
        if (mw != -INFINITY) l += warp_l[w * M_TILE + tid] * exp2f(mw - mx);
      }
#if DUALOPS_IFA_TRACE
    DUALOPS_IFA_DEP(l);
    DUALOPS_IFA_MARK(kTrStatsSum);
#endif
    fin_m[tid] = mx;
    fin_l[tid] = l;
  }
  __syncthreads();
  DUALOPS_IFA_MARK_BAR(kTrStats, fin_m);
  // Each warp stores its rescaled fragments in fragment order (16 B per lane, no bank
  // conflicts); then every thread sums one slot over the warps and writes it out.
  // (Merging the row states in every thread instead, one barrier less, is slower.) A tile of
  // <= 8 q rows (decode with <= 8 q heads per KV head) keeps only rows 0..7 of the m16 fragment,
  // 8 B per lane: the rows 8..15 are padding.
  const bool half_rows = MTILES == 1 && q_rows - row0 <= 8;
  float2* ebuf2 = reinterpret_cast<float2*>(ebuf);  // [NW][NTILES][32] when half_rows
#pragma unroll
  for (int mt = 0; mt < MTILES && warp < n_active; ++mt) {
    float f[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int rr = mt * 16 + g + 8 * hf;
      const float lt = fin_l[rr];
      // (!(lt <= 0): a NaN row l passes NaN on to the output)
      f[hf] = (!(lt <= 0.f) && m_run[mt][hf] != -INFINITY) ? exp2f(m_run[mt][hf] - fin_m[rr]) / lt : 0.f;
    }
    if (half_rows) {
#pragma unroll
      for (int jn = 0; jn < NTILES; ++jn)
        ebuf2[(warp * NTILES + jn) * 32 + lane] = make_float2(acc[0][jn][0] * f[0], acc[0][jn][1] * f[0]);
    } else {
#pragma unroll
      for (int jn = 0; jn < NTILES; ++jn)
        ebuf[((warp * MTILES + mt) * NTILES + jn) * 32 + lane] =
            make_float4(acc[mt][jn][0] * f[0], acc[mt][jn][1] * f[0], acc[mt][jn][2] * f[1], acc[mt][jn][3] * f[1]);
    }
  }
  __syncthreads();
  DUALOPS_IFA_MARK_BAR(kTrEbuf, fin_m);

  auto to_rows = [&](int rr, int d0, int d1, float v0, float v1) {  // the CTA's rows in shared memory
    float* dst = clu_out + rr * kOutPitch;
    dst[d0] = v0;
    dst[d1] = v1;
  };
  for (int slot = tid, k = 0; slot < kSlots; slot += NT, ++k) {
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
      sc0 = v_scale_s[d0], sc1 = v_scale_s[d1];
      of0 = v_scale_s[D + d0], of1 = v_scale_s[D + d1];
    } else if constexpr (kVScalesEarly) {
#pragma unroll
      for (int kk = 0; kk < kSlotRounds; ++kk)  // (a select, not an indexed register array)
        if (kk == k) sc0 = vsc[kk][0], sc1 = vsc[kk][1], of0 = vsc[kk][2], of1 = vsc[kk][3];
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int rr = mt * 16 + (ln >> 2) + 8 * hf, r = row0 + rr;
      if (r >= q_rows) continue;
      const bool seen = !(fin_l[rr] <= 0.f);  // (a NaN row is seen: NaN out)
      float v0 = hf ? o.z : o.x, v1 = hf ? o.w : o.y;
      v0 = seen ? sc0 * (v0 + of0) : 0.f;
      v1 = seen ? sc1 * (v1 + of1) : 0.f;
      // (kStageOut first, a branch of its own: folded into the cluster merge's condition, the
      // 16-bit kernels' main loops are scheduled anew)
      if (kStageOut) {
        to_rows(rr, d0, d1, v0, v1);
      } else if (ns == 1) {
        store2<QT>(static_cast<QT*>(p.out) + out_row[rr], d0, d1, v0, v1);
      } else if (kClusterMerge && merge_mode == kMergeCluster) {
        to_rows(rr, d0, d1, v0, v1);
      } else {
        float* dst = static_cast<float*>(p.o_accum) + out_row[rr];
        dst[d0] = v0;
        dst[d1] = v1;
      }
    }
  }
  if constexpr (kStageOut) {
    if (!(kClusterMerge && ns > 1 && merge_mode == kMergeCluster)) {  // (a cluster merge reads them there)
      __syncthreads();
      constexpr int C4 = D / 4;
      const int rows = min(M_TILE, q_rows - row0);
      for (int i = tid; i < rows * C4; i += NT) {
        const int rr = i / C4, c = (i % C4) * 4;
        const float4 x = *reinterpret_cast<const float4*>(clu_out + rr * kOutPitch + c);
        if (ns == 1) {
          QT* row = static_cast<QT*>(p.out) + out_row[rr];
          store2<QT>(row, c, c + 1, x.x, x.y);
          store2<QT>(row, c + 2, c + 3, x.z, x.w);
        } else {
          *reinterpret_cast<float4*>(static_cast<float*>(p.o_accum) + out_row[rr] + c) = x;
        }
      }
    }
  }
  if (tid < M_TILE && row0 + tid < q_rows) {
    const float lt = fin_l[tid];
    // no key: lse +inf in the output, -inf in a partial (weight 0 in the merge)
    const float lse = !(lt <= 0.f) ? (fin_m[tid] + __log2f(lt)) * kLn2 : (ns == 1 ? INFINITY : -INFINITY);
    if (kClusterMerge && ns > 1 && merge_mode == kMergeCluster)
      clu_lse[tid] = lse;
    else
      static_cast<float*>(ns == 1 ? p.lse : p.lse_accum)[lse_row[tid]] = lse;
  }
  DUALOPS_IFA_MARK(kTrStored);
  if constexpr (kClusterMerge) {
    if (ns > 1 && merge_mode == kMergeCluster) {
      // Every CTA of the cluster holds its partial in shared memory; after the barrier
      // (release / acquire at cluster scope) CTA k merges slots [k * per, (k + 1) * per) of the
      // rows x (D / 4) columns, reading all CTAs' partials through distributed shared memory;
      // the second barrier keeps each CTA's shared memory alive until the others are done.
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();
      constexpr int C4 = D / 4;
      const int rows = min(M_TILE, q_rows - row0);
      const int per = (rows * C4 + ns - 1) / ns;
      const int slot = split * per + tid;
      if (tid < per && slot < rows * C4) {
        const int rr = slot / C4, c = (slot % C4) * 4;
        PartialMerge st;
        st.add_splits<kMaxClusterSplits>(0, ns, 1, [&](int s, float& lse, float4& o) {
          lse = *cluster.map_shared_rank(clu_lse + rr, s);
          o = *reinterpret_cast<const float4*>(cluster.map_shared_rank(clu_out + rr * kOutPitch + c, s));
        });
        st.store<QT>(static_cast<QT*>(p.out) + out_row_final(rr), c);
        if (c == 0) static_cast<float*>(p.lse)[lse_row_final(rr)] = st.lse();
      }
      cluster.sync();
      DUALOPS_IFA_MARK(kTrMerged);
      DUALOPS_IFA_MARK_EXIT();
      return;
    }
  }
  if (ns > 1 && merge_mode == kMergeCounter) {
    // Publish this CTA's partials and count it in: after the barrier, thread 0's acq_rel atomic
    // releases every thread's partials (cumulativity through the barrier) and acquires the
    // other CTAs'; the CTA that brings the count to ns merges. (Two __threadfence() -- a
    // fence.sc per thread before, one after -- would cost more.)
    __syncthreads();
    int* ctr = static_cast<int*>(p.merge_counters) + (static_cast<int64_t>(b) * t.h_kv + kvh) * gridDim.y + blockIdx.y;
    if (tid == 0) scratch[0] = atom_add_acq_rel_gpu(ctr, 1);
    __syncthreads();
    if (scratch[0] != ns - 1) {
      DUALOPS_IFA_MARK_EXIT();
      return;
    }
    DUALOPS_IFA_MARK(kTrCounted);
    if (tid == 0) *ctr = 0;  // every CTA of the group has counted: ready for the next call
    merge_splits<QT, D, M_TILE, NW>(p, t, b, kvh, part - split, row0);
    DUALOPS_IFA_MARK(kTrMerged);
  }
  DUALOPS_IFA_MARK_EXIT();
}

}  // namespace dualops::cuda::ifa

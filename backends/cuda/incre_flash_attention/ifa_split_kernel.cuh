// The IFA split kernel: one CTA per (plan unit, q-row tile). A unit is (batch b, KV head kvh,
// split); its CTA reads that head's keys [split * split_len, min(+split_len, kv_lens[b])) -- all
// of them for the plan's whole groups -- once for all G x S_q query rows of the head (rows
// ordered r = g * S_q + i, as the plan says).
// Without split-KV it writes out / lse; with it, fp32 partials, which the last CTA of each
// (batch, KV head, q tile) group merges in place when they are few (merge_splits), else the
// combine kernel (ifa_combine_kernel.cuh) does.
// The kernel is a sequence of stages, each in a header of its own:
//   set-up before the grid-dependency wait  ifa_stage_setup.cuh   (unit, addresses, row offsets)
//   K/V copies, q load, q fragments         ifa_stage_qload.cuh
//   main-loop step                          ifa_stage_mainloop.cuh (copies, q.k^T, softmax, p.v)
//   warp merge, epilogue, split merge       ifa_stage_epilogue.cuh, ifa_split_merge.cuh
//   rows whose output is inf / NaN          ifa_stage_exact.cuh (exact p . v)
#pragma once
#include <dualops/params.h>

#include <cstdint>

#include "ifa_config.cuh"
#include "ifa_prefetch.cuh"
#include "ifa_primitives.cuh"
#include "ifa_split_merge.cuh"
#include "ifa_stage_epilogue.cuh"
#include "ifa_stage_exact.cuh"
#include "ifa_stage_mainloop.cuh"
#include "ifa_stage_qload.cuh"
#include "ifa_stage_setup.cuh"
#include "ifa_tiling.h"

namespace dualops::cuda::ifa {

template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
__global__ void __launch_bounds__(Cfg<QT, KVT, D, SHAPE>::kWarps * 32, Cfg<QT, KVT, D, SHAPE>::kCtasPerSm)
    ifa_split_kernel(const __grid_constant__ IncreFlashAttentionCudaParams p,
                     const __grid_constant__ IncreFlashAttentionCudaTiling t, int merge_mode, int stagger_ctas,
                     int stagger_ns, int second_fill_keys, int lockstep_burst) {
  using K = Kern<QT, KVT, D, M_TILE, SHAPE>;
  using C = typename K::C;
  constexpr int NW = K::NW, STAGES = K::STAGES, NT = K::NT, SUB = K::SUB;

  extern __shared__ __align__(128) uint8_t smem[];
  const SmemRegions sm = smem_regions<K>(smem);
  const int tid = K::tid(), lane = K::lane(), warp = K::warp();
  const Unit u = unit_of<M_TILE>(t);
  // The L2 prefetch of the first fill goes out first, ahead of the address set-up below (several
  // hundred instructions before the wait): where nothing runs ahead of the kernel to hide that
  // set-up, the DRAM stream starts that much earlier.
  // (%nsmid may exceed the SMs present: then a few CTAs of the second wave prefetch too)
  const bool first_wave =
      C::kPrefetchKeys > 0 && blockIdx.y * gridDim.x + blockIdx.x < sm_id_count() * C::kCtasPerSm;
  if (first_wave) prefetch_fill<C>(p, t, u.b, u.kvh, u.k_begin, u.k_cap, u.span, 0);

  // ---- before the grid-dependency wait: every address, from the parameters alone ----------
  QSources<K> qs;
  q_sources<K>(qs, p, u);
  row_offsets<K>(p, t, u, sm);
  KvSources<K> kv(sm.kv_smem + warp * STAGES * C::kStageBytes, t.block_size);
  kv_sources<K>(kv, p, u, sm);

  // Launched as a programmatic dependent of the previous kernel in the stream: this CTA was
  // scheduled while that kernel was finishing; nothing in global memory is read (but the hints
  // above) or written before it has completed (its writes -- q, the caches, kv_lens -- are then
  // visible).
  // Let the next kernel (the combine, or the next call's split kernel) be scheduled now: it
  // waits for this grid's completion before touching global memory.
  pdl_launch_dependents();
  pdl_wait();
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
    if (first_wave && second_fill_keys > 0 && u.span >= max(second_fill_keys, 2 * C::kPrefetchKeys))
      prefetch_fill<C>(p, t, u.b, u.kvh, u.k_begin + C::kPrefetchKeys, u.k_cap, u.span, 2);
  }
  // Loads of what earlier kernels write are plain loads from here on: an __ldg (ld.global.nc)
  // counts as invariant, and the compiler was seen hoisting one above the wait.
  const int kv_len_raw = *kv.kv_len_ptr;
  BlockWindow win;  // paged caches: block ids of this warp's next chunks
  if (kv.block_size > 0) {
    win.cur = block_window(kv, u, lane, 0);
    win.nxt = block_window(kv, u, lane, 32);
  }
  QRaw<K> qr;
  load_q_raw<K>(qr, qs, u);
  // int8 (Cfg::kVScalesInSmem): the head's value scales and offsets into shared memory, in each
  // thread's first commit group (landed before its first chunk, so before the epilogue reads
  // them), instead of per-column loads in the epilogue -- a global round trip at the end of
  // every call.
  if constexpr (C::kVScalesInSmem) {
#pragma unroll
    for (int r = 0; r < K::kVsRounds; ++r)
      if (tid + r * NT < 2 * D) cp_async_4(smem_addr(sm.v_scale_s + tid + r * NT), kv.vs_src[r], kv.vs_bytes[r]);
  }
  const int kv_len = min(max(kv_len_raw, 0), t.max_kv_len);
  const int k_end = min(u.k_begin + u.span, kv_len);
  const int n_keys = max(k_end - u.k_begin, 0);

  // ---- K/V pipeline: this warp's chunks, STAGES deep; the first copies go out before the q
  // tile is prepared, so that work hides under their latency ----------------------------------
  const int n_chunks = (n_keys + kChunkKeys - 1) / kChunkKeys;
  const int my_chunks = n_chunks > warp ? (n_chunks - 1 - warp) / NW + 1 : 0;
  uint32_t bad_blocks = 0;  // bit (j % 32): chunk j's block id is out of range (its keys are hidden)
  auto issue = [&](int j) { issue_chunk<K>(p, u, kv, win, bad_blocks, k_end, lane, j); };
  // Each main-loop step consumes SUB of this warp's chunks: its chunk count is rounded up to
  // whole steps, and the chunk past its keys is "issued" with no rows (nothing read, the stage
  // zero-filled) and masked like any key past kv_len. (Units of one chunk per warp, where that
  // would double the math, run the kSub = 1 kernel: kWide1, ifa_launch.cuh.)
  const int my_steps = (my_chunks + SUB - 1) / SUB, my_issued = my_steps * SUB;
  const int lock_steps = (n_chunks / NW + SUB - 1) / SUB;  // lockstep pipeline: steps every warp has
#pragma unroll
  for (int j = 0; j < STAGES - SUB; ++j) {
    if (j < my_issued && (j < SUB || !K::kLockstep)) issue(j);
    cp_async_commit();
  }

  // ---- q tile -> A fragments in shared memory, per-row score terms --------------------------
  const float score_mul = q_fragments<K>(p, u, sm, qs, qr);
  RowLimits<K> rl;
  row_limits<K>(rl, p, u, sm, kv_len, k_end);

  // ---- main loop --------------------------------------------------------------------------
  RowState<K> rs;
  row_state_init<K>(rs);
  const uint8_t* mask = static_cast<const uint8_t*>(p.atten_mask);
  const float* pse = static_cast<const float*>(p.pse_shift);
  const ScoreBias bias{mask, pse, mask != nullptr || pse != nullptr};

  int stage = 0;  // stage of this step's first chunk
  for (int st = 0; st < my_steps; ++st) {
    const int j0 = st * SUB;
    bool blk_ok[SUB];
    step_copies<K>(blk_ok, bad_blocks, st, my_issued, lock_steps, lockstep_burst, issue);
    StepChunks<K> ch;
    step_chunks<K>(ch, kv, j0, stage);
    float s[K::MTILES][2 * SUB][4];
    step_scores<K>(s, ch, u, sm.qfrag);
    uint32_t pa[K::MTILES][K::PP][SUB][4];
    step_softmax<K>(pa, s, rs, ch, blk_ok, rl, bias, score_mul, p, sm, u);
    step_pv<K>(rs.acc, pa, ch, u);
    __syncwarp();  // the stages are refilled next
    stage = stage + SUB < STAGES ? stage + SUB : stage + SUB - STAGES;
  }
  cp_async_wait<0>();

  // ---- warp merge: the warps' partial softmax states into the rows', then write ------------
  float vsc[K::kSlotRounds][4];
  v_scales_early<K>(vsc, p, u);
  warp_stats<K>(rs, sm, u);
  __syncthreads();  // every warp is done with its K/V stages (ebuf reuses them)
  const int n_active = min(n_chunks, NW);  // warps that saw a key
  row_stats<K>(sm, n_active);
  __syncthreads();
  const bool half_rows = K::MTILES == 1 && u.q_rows - K::row0() <= 8;
  stash_fragments<K>(rs, sm, u, n_active, half_rows);
  __syncthreads();

  // ---- epilogue -----------------------------------------------------------------------------
  const bool nonfinite = write_rows<K>(p, u, sm, vsc, n_active, half_rows, merge_mode);
  // an inf / NaN reached the output: the tile's rows exactly (rare)
  if (__syncthreads_or(nonfinite)) exact_rows<K>(p, t, smem, merge_mode);
  write_staged_rows<K>(p, u, sm, merge_mode);
  write_lse<K>(p, u, sm, merge_mode);

  // ---- split merge --------------------------------------------------------------------------
  if constexpr (K::kClusterMerge) {
    if (u.ns > 1 && merge_mode == kMergeCluster) {
      cluster_merge<K>(p, t, u, sm);
      return;
    }
  }
  if (u.ns > 1 && merge_mode == kMergeCounter) {
    int* ctr;
    if (!counter_arrive<K>(p, t, u, sm, ctr)) return;
    if (tid == 0) *ctr = 0;  // every CTA of the group has counted: ready for the next call
    merge_splits<QT, D, M_TILE, NW>(p, t, u.b, u.kvh, u.part - u.split, K::row0());
  }
}

}  // namespace dualops::cuda::ifa

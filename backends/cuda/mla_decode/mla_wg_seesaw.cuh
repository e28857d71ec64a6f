// The seesaw tile loop of the wgmma MLA kernel for 16-bit caches (bf16 and fp16 q): both
// warpgroups compute scores, softmaxes and P V, so that one runs its softmax while MMAs keep the
// tensor cores busy (docs/mla_decode_cuda.md). Warpgroup c owns value columns 256c .. 256c + 255
// of O and its share of the rows' sums. The tiles go in pairs: tile A = 2k in KV buffer 0, tile
// B = 2k + 1 in KV buffer 1; warpgroup 0 owns A's scores and softmax, warpgroup 1 B's:
//
//   warpgroup 0: [S_A done] softmax A (from the max after the previous B) -> P_A to shared
//                memory, rescale factors -> [arrive P_A] -> P_A V_A (P from registers) -> done:
//                copy its part of tile A + 2 -> [sync P_B] O rescaled -> P_B V_B (P_B from shared
//                memory) -> done: copy its part of tile B + 2 -> S_A+2 (as its parts land)
//   warpgroup 1: [S_B done] -> [sync P_A] O rescaled -> P_A V_A (P_A from shared memory), and
//                meanwhile softmax B (from the max after A) -> done: copy its part of tile A + 2
//                -> P_B to shared memory, rescale factors -> [arrive P_B] -> P_B V_B (from
//                registers) -> done: copy its part of tile B + 2 -> S_B+2 (as its parts land)
//
// So both O halves, both sums and the P tiles handed over are relative to the same running max,
// and each softmax overlaps P V work: B's overlaps both P V of A, A's overlaps S of B. The copies
// of a tile start as soon as the P V that read its blocks is done: warpgroup c copies value half
// c (blocks 4c .. 4c + 3) and, of the tile whose softmax it does not own, the RoPE block (d_qk
// 576), by TMA (boxes of 64
// values x gcd(page, 64) tokens, issued by one thread; a box of tokens past the range or in a
// block outside the cache arrives as zeros, and the tail of a range that ends inside a tile is
// zeroed in shared memory before the P V that reads it). Completion goes to one mbarrier per
// (buffer, warpgroup) (its bytes; tile n completes phase n / 2 of buffer n % 2's). An S waits for both parts of its tile; a P V reads
// value blocks of the warpgroup's own part only, and waits for that part alone: the other part's
// mbarrier may already be a phase further (the next tile's copies), which a parity wait cannot
// tell apart from the phase it waits for. One P tile holds P_A, then P_B (each written after
// every reader of the other is done). A pair without tile B (odd tile
// count) ends after the P V of A; warpgroup 1's softmax then sees a fully masked tile (no
// change). Two mbarriers (P_A / P_B published, common::MbarHandoffs) pair the warpgroups (every
// thread of the producer arrives, the consumer waits; each producer waits on its consumer before
// its next arrival, so no phase is lapped); named barriers 10 and 5 are warpgroup 0's and
// warpgroup 1's own (the exact path of keys hidden from some rows that hold NaN / inf values:
// each warpgroup checks and zeroes its own value half, before it publishes P or after it takes
// P over).
#pragma once
#include "../common/tma.cuh"
#include "mla_wg_pipe.cuh"

namespace dualops::cuda::mla {

__device__ __forceinline__ int ss_bar(int c) { return c ? kWgLoadBarrier : kBarWg0; }

template <class Tr>
struct SsSmem {
  unsigned char* base;
  __device__ unsigned char* kv(int x) const { return base + Tr::kOffKv + x * Tr::kTileBytes; }
  __device__ unsigned char* pt() const { return base + Tr::kOffP; }
  __device__ float* red(int x) const { return reinterpret_cast<float*>(base + Tr::kOffRed) + 2 * kRows * x; }
  // mbarrier of (buffer x, warpgroup c): bars() + 16x + 8c
  __device__ uint32_t bars() const { return smem_addr(base + Tr::kOffFlags); }
  __device__ int* rows(int c) const { return reinterpret_cast<int*>(base + Tr::kOffFlags + 32) + 8 * c; }
};

// The TMA copies of warpgroup c's part of a pair's tiles (value blocks 4c .. 4c + 3, and the
// RoPE block of the tile whose softmax the other warpgroup owns), issued by its thread 0, which
// also keeps the tensor rows of the pair's boxes (rows: [tile][box], in shared memory).
template <class Tr>
struct SsCopy {
  const CUtensorMap* tmap;
  int* rows;
  int box;
  bool issuer;
  __device__ void locate(const MlaDecodeCudaParams& p, int r, int tile0, int end) const {
    if (!issuer) return;
#pragma unroll
    for (int x = 0; x < 2; ++x)
#pragma unroll
      for (int b = 0; b < kTile / 16; ++b)
        rows[4 * x + b] = b * box < kTile ? kv_box_row(p, r, tile0 + x * kTile + b * box, end) : -kTile;
  }
  // The block ids of the two tiles from token tile0 on, read a pair ahead of their use (ids_rows)
  // so that the read's latency stays off the loop; only for boxes of a whole tile (pages of a
  // multiple of 64 tokens, as the plan gives this loop), else ids_rows reads them itself.
  __device__ void fetch_ids(const MlaDecodeCudaParams& p, int r, int tile0, int end, int (&ids)[2]) const {
    if (!issuer || box < kTile) return;
    ids[0] = token_block_id(p, r, tile0, end);
    ids[1] = token_block_id(p, r, tile0 + kTile, end);
  }
  __device__ void ids_rows(const MlaDecodeCudaParams& p, int r, int tile0, int end, const int (&ids)[2]) const {
    if (!issuer) return;
    if (box < kTile) return locate(p, r, tile0, end);
    rows[0] = kv_box_row_of(p, ids[0], tile0);
    rows[4] = kv_box_row_of(p, ids[1], tile0 + kTile);
  }
  // Warpgroup c's part of tile x into the KV buffer at kv; completion (bytes) on mbarrier bar.
  __device__ void copy(uint32_t kv, int x, int c, uint32_t bar) const {
    if (!issuer) return;
    constexpr int kRope = Tr::D / 64 - kDv / 64;  // RoPE blocks: 1 (d_qk 576) or 0
    const int nblocks = 4 + (x != c ? kRope : 0);
    common::mbar_expect_tx(bar, nblocks * Tr::kBlockBytes);
    for (int i = 0; i < nblocks; ++i) {
      const int j = i < 4 ? 4 * c + i : kDv / 64;
      for (int b = 0; b * box < kTile; ++b)
        common::tma_load_2d(kv + j * Tr::kBlockBytes + b * box * 128, tmap, 64 * j, rows[4 * x + b], bar);
    }
  }
};

// Value half c of tile rows n0 .. 63 set to 0 (a range that ends inside the tile: its boxes read
// on into the page, whose unused slots may hold anything), visible to the warpgroup's wgmma.
template <class Tr>
__device__ __forceinline__ void ss_zero_tail(unsigned char* kv, int n0, int c, int tid) {
  for (int i = tid; i < (kTile - n0) * 32; i += kWgLoaders)
    *reinterpret_cast<uint4*>(kv + Tr::off(n0 + i / 32, 32 * c + i % 32)) = make_uint4(0, 0, 0, 0);
  fence_proxy_async_smem();
  named_barrier(ss_bar(c), kWgLoaders);
}

// Warpgroup c's own part of the tile of phase j of buffer x landed, visible to its wgmma (its
// other reads of the tile are in its own part, or in the S that waited for both parts).
__device__ __forceinline__ void ss_own_landed(uint32_t bars, int x, int c, int j) {
  common::mbar_wait(bars + 16 * x + 8 * c, static_cast<uint32_t>(j & 1));
  fence_proxy_async_smem();
}

// S of the tile of phase j of buffer x (at kv), once both parts have landed; waited for. (The
// mbarrier waits stay out of the wgmma chain: a wait loop between two wgmma of one chain makes
// ptxas serialize every wgmma of the kernel.)
template <class Tr>
__device__ __forceinline__ void ss_scores(float (&s)[8][4], uint32_t q_base, uint32_t kv, uint32_t bars, int x,
                                          int j) {
  float(&sf)[32] = reinterpret_cast<float(&)[32]>(s);
  common::mbar_wait(bars + 16 * x, static_cast<uint32_t>(j & 1));
  common::mbar_wait(bars + 16 * x + 8, static_cast<uint32_t>(j & 1));
  fence_proxy_async_smem();
  wg_scores_issue<Tr>(s, q_base, kv);
  wgmma_wait<0>();
  wgmma_fence_regs(sf);
}

// Warpgroup c: do value half c of the tile's keys hidden from some rows hold NaN / inf values?
template <class Tr>
__device__ __forceinline__ bool ss_exact(const unsigned char* kv, int tile0, const MlaPiece& pc, int c, int tid) {
  const int t0 = max(pc.hidden0 - tile0, 0), t1 = min(pc.end - tile0, kTile);
  if (t0 >= t1) return false;  // uniform
  return named_barrier_or(ss_bar(c), kWgLoaders, values_nonfinite<Tr, kDv / 16, kWgLoaders>(kv, t0, t1, 32 * c, tid));
}

// Warpgroup c's exact path of a tile (O rescaled to the max of P, P in shared memory): the NaN / inf
// entries of its value half added exactly to the rows that attend them, then set to 0 for its P V.
template <class Tr>
__device__ __forceinline__ void ss_exact_apply(RowState& st, unsigned char* kv, const unsigned char* pt, int tile0,
                                               const int (&lim)[2], int c, int tid) {
  const int r0 = ((threadIdx.x >> 5) & 3) * 16 + ((threadIdx.x & 31) >> 2);
  named_barrier(ss_bar(c), kWgLoaders);  // the P tile complete
  add_nonfinite_values<Tr>(st, kv, pt, tile0, lim, r0, c);
  named_barrier(ss_bar(c), kWgLoaders);
  zero_nonfinite_values<Tr, kDv / 16, kWgLoaders>(kv, 32 * c, tid);
  fence_proxy_async_smem();
  named_barrier(ss_bar(c), kWgLoaders);
}

// P of a tile stored: the rows' rescale factors and maxima to red, then the other warpgroup may
// take them (hand-off kHand: the tile's P published).
template <int kHand>
__device__ __forceinline__ void ss_publish(const RowState& st, const float (&alpha)[2], float* red, int g,
                                           common::MbarHandoffs& hs) {
  wg_put_softmax(st, alpha, red, g);
  fence_proxy_async_smem();
  hs.template arrive<kHand>();
}

// The other warpgroup's softmax of a tile taken over: O and this warpgroup's sums rescaled.
template <int kHand>
__device__ __forceinline__ void ss_take(RowState& st, const float* red, int g, common::MbarHandoffs& hs) {
  hs.template wait<kHand>();
  float alpha[2];
  wg_take_softmax(st, red, alpha, g);
  rescale_o(st, alpha);
#pragma unroll
  for (int j = 0; j < 2; ++j) st.l[j] = scaled_sum(st.l[j], alpha[j]);
}

// Pair k of a piece: its tiles' first tokens and which tiles exist (this pair's B, the next
// pair's A and B, the pair after next).
struct SsPair {
  int ta, tb;
  bool has_b, next_a, next_b, far;
  __device__ SsPair(const MlaPiece& pc, int k)
      : ta(pc.start + 2 * k * kTile), tb(ta + kTile), has_b(2 * k + 1 < pc.ntiles),
        next_a(2 * k + 2 < pc.ntiles), next_b(2 * k + 3 < pc.ntiles), far(2 * k + 4 < pc.ntiles) {}
};

// Warpgroup 0's part of one request piece (tid 0 .. 127; cp: its copies, the rows of pair 1 located).
// kExact: the piece holds keys hidden from some rows (causal s_q > 1), whose values are checked.
template <class Tr, bool kExact>
__device__ __forceinline__ void ss_wg0(const MlaDecodeCudaParams& p, RowState& st, const SsSmem<Tr>& sm,
                                       const MlaPiece& pc, int r, float scale_log2, int g, int tid,
                                       const SsCopy<Tr>& cp, common::MbarHandoffs& hs) {
  const uint32_t q_base = smem_addr(sm.base), kv0 = smem_addr(sm.kv(0)), kv1 = smem_addr(sm.kv(1));
  float(&of)[128] = reinterpret_cast<float(&)[128]>(st.o);
  float s[8][4];
  ss_scores<Tr>(s, q_base, kv0, sm.bars(), 0, 0);
  for (int k = 0; 2 * k < pc.ntiles; ++k) {
    const SsPair pr(pc, k);
    const int ta = pr.ta, tb = pr.tb;
    const uint32_t bars = sm.bars();
    int ids[2];
    if (pr.far) cp.fetch_ids(p, r, ta + 4 * kTile, pc.end, ids);  // pair k + 2
    if (pc.end - ta < kTile) ss_zero_tail<Tr>(sm.kv(0), pc.end - ta, 0, tid);
    const bool exact_a = kExact && ss_exact<Tr>(sm.kv(0), ta, pc, 0, tid);
    PFrag f;
    float alpha[2];
    wg_softmax_p<Tr>(st, s, f, alpha, ta, pc.lim, scale_log2, g);
    wg_store_p(f.p, sm.pt(), g);
    rescale_o(st, alpha);
    if (exact_a) ss_exact_apply<Tr>(st, sm.kv(0), sm.pt(), ta, pc.lim, 0, tid);
    ss_publish<kHandSoftmax>(st, alpha, sm.red(0), g, hs);
    wg_pv_issue_rs<Tr>(st, f, kv0);
    wgmma_wait<0>();
    wgmma_fence_regs(of);
    fence_u32(f.p);
    if (pr.next_a) cp.copy(kv0, 0, 0, bars);
    if (pr.has_b) {
      ss_own_landed(bars, 1, 0, k);  // (its reads of tile B: value blocks 0 .. 3)
      const bool exact_b = kExact && ss_exact<Tr>(sm.kv(1), tb, pc, 0, tid);
      ss_take<kHandPB>(st, sm.red(1), g, hs);
      if (pc.end - tb < kTile) ss_zero_tail<Tr>(sm.kv(1), pc.end - tb, 0, tid);
      if (exact_b) ss_exact_apply<Tr>(st, sm.kv(1), sm.pt(), tb, pc.lim, 0, tid);
      wg_pv_issue<Tr>(st, smem_addr(sm.pt()), kv1, 0);
      wg_pv_wait(st);
      if (pr.next_b) cp.copy(kv1, 1, 0, bars + 16);
      if (pr.far) cp.ids_rows(p, r, ta + 4 * kTile, pc.end, ids);  // pair k + 2
    }
    if (pr.next_a) ss_scores<Tr>(s, q_base, kv0, bars, 0, k + 1);
  }
}

// Warpgroup 1's part of one request piece (tid 0 .. 127; cp: its copies, the rows of pair 1 located).
template <class Tr, bool kExact>
__device__ __forceinline__ void ss_wg1(const MlaDecodeCudaParams& p, RowState& st, const SsSmem<Tr>& sm,
                                       const MlaPiece& pc, int r, float scale_log2, int g, int tid,
                                       const SsCopy<Tr>& cp, common::MbarHandoffs& hs) {
  const uint32_t q_base = smem_addr(sm.base), kv0 = smem_addr(sm.kv(0)), kv1 = smem_addr(sm.kv(1));
  const uint32_t bars = sm.bars();
  float s[8][4];
  if (pc.ntiles > 1) ss_scores<Tr>(s, q_base, kv1, bars, 1, 0);
  for (int k = 0; 2 * k < pc.ntiles; ++k) {
    const SsPair pr(pc, k);
    const int ta = pr.ta, tb = pr.tb;
    const bool has_b = pr.has_b;
    int ids[2];
    if (pr.far) cp.fetch_ids(p, r, ta + 4 * kTile, pc.end, ids);  // pair k + 2
    ss_own_landed(bars, 0, 1, k);  // (its reads of tile A: value blocks 4 .. 7)
    const bool exact_a = kExact && ss_exact<Tr>(sm.kv(0), ta, pc, 1, tid);
    const bool exact_b = kExact && has_b && ss_exact<Tr>(sm.kv(1), tb, pc, 1, tid);
    if (has_b && pc.end - tb < kTile) ss_zero_tail<Tr>(sm.kv(1), pc.end - tb, 1, tid);
    ss_take<kHandSoftmax>(st, sm.red(0), g, hs);
    if (pc.end - ta < kTile) ss_zero_tail<Tr>(sm.kv(0), pc.end - ta, 1, tid);
    if (exact_a) ss_exact_apply<Tr>(st, sm.kv(0), sm.pt(), ta, pc.lim, 1, tid);
    wg_pv_issue<Tr>(st, smem_addr(sm.pt()), kv0, 1);
    // softmax B while P V of A runs (without tile B every token is masked: no change)
    PFrag f;
    float alpha[2];
    wg_softmax_p<Tr>(st, s, f, alpha, has_b ? tb : pc.end, pc.lim, scale_log2, g);
    wg_pv_wait(st);
    if (pr.next_a) cp.copy(kv0, 0, 1, bars + 8);
    if (has_b) {
      wg_store_p(f.p, sm.pt(), g);
      rescale_o(st, alpha);
      if (exact_b) ss_exact_apply<Tr>(st, sm.kv(1), sm.pt(), tb, pc.lim, 1, tid);
      ss_publish<kHandPB>(st, alpha, sm.red(1), g, hs);
      wg_pv_issue_rs<Tr>(st, f, kv1 + 4 * Tr::kBlockBytes);
      wg_pv_wait(st);
      fence_u32(f.p);
      if (pr.next_b) {
        cp.copy(kv1, 1, 1, bars + 24);
        if (pr.far) cp.ids_rows(p, r, ta + 4 * kTile, pc.end, ids);  // pair k + 2
        ss_scores<Tr>(s, q_base, kv1, bars, 1, k + 1);
      }
    }
  }
}

// One request piece, Q's copies issued: the mbarriers set up, each warpgroup's part of tiles 0
// and 1 copied, then the warpgroups' loops.
template <class Tr>
__device__ __forceinline__ void wg_seesaw_piece(const MlaDecodeCudaParams& p, RowState& st, unsigned char* smem,
                                                const CUtensorMap* tmap, const MlaPiece& pc, int r,
                                                float scale_log2, int c, int g, common::MbarHandoffs& hs) {
  const SsSmem<Tr> sm{smem};
  const int tid = threadIdx.x & 127;
  const uint32_t bars = sm.bars();
  cp_async_commit();  // Q
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) common::mbar_init(bars + 8 * i);
    common::mbar_init_fence();
  }
  fence_proxy_async_smem();  // the previous piece's writes to the KV buffers before the copies'
  __syncthreads();  // the mbarriers are set up
  const SsCopy<Tr> cp{tmap, sm.rows(c), kv_box_rows(p.page_block_size), tid == 0};
  cp.locate(p, r, pc.start, pc.end);
  cp.copy(smem_addr(sm.kv(0)), 0, c, bars + 8 * c);
  if (pc.ntiles > 1) cp.copy(smem_addr(sm.kv(1)), 1, c, bars + 16 + 8 * c);
  if (pc.ntiles > 2) cp.locate(p, r, pc.start + 2 * kTile, pc.end);
  cp_async_wait<0>();  // Q
  fence_proxy_async_smem();
  __syncthreads();
  // pieces without hidden keys (every piece of an s_q = 1 call) run the loops without the exact path
  const bool exact = pc.hidden0 < pc.end;
  if (c == 0) {
    if (exact) {
      ss_wg0<Tr, true>(p, st, sm, pc, r, scale_log2, g, tid, cp, hs);
    } else {
      ss_wg0<Tr, false>(p, st, sm, pc, r, scale_log2, g, tid, cp, hs);
    }
  } else if (exact) {
    ss_wg1<Tr, true>(p, st, sm, pc, r, scale_log2, g, tid, cp, hs);
  } else {
    ss_wg1<Tr, false>(p, st, sm, pc, r, scale_log2, g, tid, cp, hs);
  }
  __syncthreads();  // the rescale factors are read: write_piece's row sums take their place
}

}  // namespace dualops::cuda::mla

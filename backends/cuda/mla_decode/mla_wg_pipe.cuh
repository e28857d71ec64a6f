// The pipelined tile loop of the wgmma MLA kernel for bf16 q, every cache format
// (how a tile arrives: WgArrival below; docs/mla_decode_cuda.md): the warpgroups hand work to each other through named barriers
// instead of CTA barriers, warpgroup 0 keeps P in registers for its own P V (RS form), and it
// queues S of the next tile behind that P V, so that the tensor cores go from one to the other
// without a CTA-wide round trip. Per tile n (KV buffer n % 2):
//
//   warpgroup 0: softmax(n) -> P V(n) cols 0..255 -> [sync red free] rescale
//                factors -> [arrive P] -> [sync half A] S(n + 1) blocks 0..3 -> [sync tile]
//                S(n + 1) rest -> P V(n) done: [arrive free] -> S(n + 1) done
//   warpgroup 1: [sync P] rescale O -> P V(n) cols 256..511 -> tile n + 1 (copied a tile ago)
//                landed: [arrive half A], hidden-value check, [arrive tile] -> [sync free]
//                (FP8: [arrive landed] instead of half A, and its value blocks dequantized;
//                warpgroup 0 dequantizes blocks 0 .. 3 after [sync landed], before S(n + 1))
//                copy blocks 0..3 of tile n + 2 into buffer n % 2 -> P V(n) done: [arrive red
//                free] -> copy the rest of tile n + 2
//
// So a tile's copies start as soon as the P V that read its buffer is done (a whole tile ahead
// of its S, as in the serial loop). Shared P tiles: P of tile n in p(n % 2) (the KV tile's RoPE
// block for d_qk 576, dead once S(n) is done; else one of two P tiles); the rescale factors are
// written once warpgroup 1's P V of tile n - 1 has taken the last ones over. Named barriers 6..9 and
// 11 pair the two warpgroups (bar.arrive by the producer, bar.sync by the consumer, the same
// number of each per piece, and each producer waits on its consumer before its next arrival,
// so no barrier is lapped); 10 and 5 are warpgroup 0's and warpgroup 1's own; FP8 caches: 12
// (landed) pairs them instead of 11, 13 joins their hidden-value checks (bar.red.or, all 256).
// The hand-offs of values written by threads (P's rescale factors and maxima, the landed tile's
// flag, the FP8 scales read) also go through an mbarrier (common::MbarHandoffs): arrived on
// before the bar.arrive, waited for after the bar.sync (found complete), so that
// compute-sanitizer's racecheck orders them (docs/mla_decode_cuda.md).
#pragma once
#include "mla_wg_attend.cuh"
#include "mla_wg_load.cuh"

namespace dualops::cuda::mla {

constexpr int kBarFree = 6, kBarPvDone = 7, kBarP = 8, kBarTile = 9, kBarWg0 = 10, kBarTileA = 11;
constexpr int kBarLanded = 12, kBarHidden = 13;  // FP8 caches

// How tile n + 1 arrives, per thread. Warpgroup 1: locate() a token's source a tile ahead, copy<part>()
// it into a KV buffer (part 0: what value blocks 0 .. 3 need, part 1: the rest; committed by the
// caller), land() once its P V(n) is issued: tile n + 1 handed to warpgroup 0 (take(), before
// S(n + 1)), and whether the tile's keys hidden from some rows (tokens t0 .. t1 - 1) hold NaN /
// inf values. 16-bit caches: cp.async of the rows, signalled half by half.
template <class Tr, bool kRaw = !Tr::kDirect>
struct WgArrival {
  const unsigned char* src = nullptr;
  uint32_t n = 0;
  __device__ void locate(const MlaDecodeCudaParams& p, int r, int tok, int end) { n = kv_row_src<Tr>(p, r, tok, end, src); }
  template <int kPart>
  __device__ void copy(const MlaDecodeCudaParams&, unsigned char* kv, int tid) const {
    constexpr int kHalf = kDv / 16;  // chunks of value columns 0 .. 255: blocks 0 .. 3
    copy_kv_row<Tr, 2>(smem_addr(kv), tid >> 1, tid & 1, src, n, kPart ? kHalf : 0, kPart ? Tr::kChunks : kHalf);
  }
  __device__ bool land(const unsigned char* nxt, int tid, int t0, int t1, common::MbarHandoffs&) const {
    cp_async_wait<1>();
    fence_proxy_async_smem();
    named_arrive(kBarTileA, kThreads);
    cp_async_wait<0>();
    if (t0 >= t1) return false;  // uniform: only tiles with hidden keys pay for the check
    named_barrier(kWgLoadBarrier, kWgLoaders);  // every loader's copies landed
    return named_barrier_or(kWgLoadBarrier, kWgLoaders, values_nonfinite<Tr, kDv / 8, kWgLoaders>(nxt, t0, t1, 0, tid));
  }
  static __device__ void take(unsigned char*, int, int, int, common::MbarHandoffs&) {
    named_barrier(kBarTileA, kThreads);  // (the wgmma alone reads the landed values)
  }
};

// FP8 caches: the raw bytes staged in the buffer (mla_wg_load.cuh), dequantized in place once
// landed: value blocks 0 .. 3 by warpgroup 0 (idle behind its P V until S(n + 1)), the rest by
// warpgroup 1; each checks its own value columns of the hidden keys.
template <class Tr>
struct WgArrival<Tr, true> {
  static constexpr bool kBatch = true;  // dequant_blocks: raw bytes of all its blocks read first
  Fp8Src src{nullptr, nullptr};
  __device__ void locate(const MlaDecodeCudaParams& p, int r, int tok, int end) { src = fp8_src<Tr>(p, r, tok, end); }
  template <int kPart>
  __device__ void copy(const MlaDecodeCudaParams& p, unsigned char* kv, int tid) const {
    load_kv_raw_part<Tr, kPart>(p, smem_addr(kv), tid >> 1, tid & 1, src);
  }
  __device__ bool land(unsigned char* nxt, int tid, int t0, int t1, common::MbarHandoffs& hs) const {
    cp_async_wait<0>();
    named_barrier(kWgLoadBarrier, kWgLoaders);  // every copy of the tile landed
    const Fp8Scales sc = read_fp8_scales<Tr>(nxt, tid >> 1);
    hs.template arrive<kHandScales>();  // (the scales read: block 0 may be written)
    named_arrive(kBarLanded, kThreads);
    dequant_blocks<Tr, 4, Fp8Tile<Tr>::kFp8Blocks, true, kWgLoadBarrier, kBatch>(nxt, tid >> 1, tid & 1, sc);
    if (t0 >= t1) return false;
    named_barrier(kWgLoadBarrier, kWgLoaders);
    return named_barrier_or(kBarHidden, kThreads,
                            values_nonfinite<Tr, kDv / 16, kWgLoaders>(nxt, t0, t1, kDv / 16, tid));
  }
  static __device__ void take(unsigned char* nxt, int tid, int t0, int t1, common::MbarHandoffs& hs) {
    named_barrier(kBarLanded, kThreads);
    hs.template wait<kHandScales>();
    wgmma_fence();  // (the P V in flight: without it ptxas serializes the wgmma behind the wait loop)
    dequant_blocks<Tr, 0, 4, false, kBarWg0, kBatch>(nxt, tid >> 1, tid & 1, read_fp8_scales<Tr>(nxt, tid >> 1));
    if (t0 < t1) {
      named_barrier(kBarWg0, kWgLoaders);
      named_barrier_or(kBarHidden, kThreads, values_nonfinite<Tr, kDv / 16, kWgLoaders>(nxt, t0, t1, 0, tid));
    }
    fence_proxy_async_smem();
    named_barrier(kBarWg0, kWgLoaders);  // this warpgroup's values all written
  }
};

template <class Tr>
struct WgPipeSmem {
  unsigned char* base;
  __device__ unsigned char* kv(int i) const { return base + Tr::kOffKv + i * Tr::kTileBytes; }
  __device__ unsigned char* pt(int i) const {
    return Tr::kPInRope ? kv(i) + Tr::kRopeOff : base + Tr::kOffP + i * kRows * kPRowBytes;
  }
  __device__ float* red() const { return reinterpret_cast<float*>(base + Tr::kOffRed); }
  __device__ int* flags() const { return reinterpret_cast<int*>(base + Tr::kOffFlags); }
};

// Warpgroup 0's part of one request piece (tile 0 resident; exact: tile 0 takes the exact path).
template <class Tr>
__device__ __forceinline__ void wg_pipe_scores(RowState& st, const WgPipeSmem<Tr>& sm, const MlaPiece& pc,
                                               float scale_log2, int g, bool exact, common::MbarHandoffs& hs) {
  const int lane = threadIdx.x & 31, r0 = g * 16 + (lane >> 2);
  const uint32_t q_base = smem_addr(sm.base);
  float(&of)[128] = reinterpret_cast<float(&)[128]>(st.o);
  PFrag f;
  float s[8][4];
  float(&sf)[32] = reinterpret_cast<float(&)[32]>(s);
  wg_scores_issue<Tr>(s, q_base, smem_addr(sm.kv(0)));
  wgmma_wait<0>();
  wgmma_fence_regs(sf);
  for (int n = 0; n < pc.ntiles; ++n) {
    const int tile0 = pc.start + n * kTile;
    unsigned char* kv = sm.kv(n & 1);
    float alpha[2];
    wg_softmax_regs<Tr>(st, s, f, sm.pt(n & 1), alpha, tile0, pc.lim, scale_log2, g);
    // rescale factors for warpgroup 1, once its P V of tile n - 1 is issued (it took the last ones)
    auto publish = [&]() {
      named_barrier(kBarPvDone, kThreads);
      wg_put_softmax(st, alpha, sm.red(), g);
      if (n + 1 == pc.ntiles) wg_put_sums(st, sm.red() + 2 * kRows, g);  // the rows' final sums
      fence_proxy_async_smem();
      hs.template arrive<kHandSoftmax>();
      named_arrive(kBarP, kThreads);
    };
    if (!exact) {
      wg_pv_issue_rs<Tr>(st, f, smem_addr(kv));
      publish();
    } else {  // keys hidden from some rows hold NaN / inf values: exact products, then zeros
      publish();
      named_barrier(kBarWg0, kWgLoaders);  // this warpgroup's P tiles complete
      add_nonfinite_values<Tr>(st, kv, sm.pt(n & 1), tile0, pc.lim, r0, 0);
      named_barrier(kBarWg0, kWgLoaders);
      zero_nonfinite_values<Tr, kDv / 16, kWgLoaders>(kv, 0, threadIdx.x);
      fence_proxy_async_smem();
      named_barrier(kBarWg0, kWgLoaders);
      wg_pv_issue_rs<Tr>(st, f, smem_addr(kv));
    }
    if (n + 1 < pc.ntiles) {  // S(n + 1) queued behind this P V, in two parts as its halves land
      unsigned char* nxt = sm.kv((n + 1) & 1);
      const uint32_t kv_next = smem_addr(nxt);
      const int next0 = tile0 + kTile;
      WgArrival<Tr>::take(nxt, threadIdx.x, max(pc.hidden0 - next0, 0), min(pc.end - next0, kTile), hs);  // value blocks 0 .. 3
      wg_scores_part<Tr, 0, kDv / 32>(s, q_base, kv_next);
      named_barrier(kBarTile, kThreads);  // the rest, and its check of hidden values
      hs.template wait<kHandTile>();
      wgmma_fence();  // (without it ptxas serializes the wgmma behind the wait loop)
      exact = sm.flags()[(n + 1) & 1] != 0;
      wg_scores_part<Tr, kDv / 32, Tr::D / 16>(s, q_base, kv_next);
      if (n + 2 < pc.ntiles) {
        wgmma_wait<1>();  // this P V done: warpgroup 1 may refill blocks 0 .. 3 of tile n's buffer
        named_arrive(kBarFree, kThreads);
      }
    }
    // (waited for here, not at the top of the next trip: no wgmma is in flight across the
    // loop's back edge, where register moves would make ptxas serialize the wgmma pipeline)
    wgmma_wait<0>();
    wgmma_fence_regs(sf);
    wgmma_fence_regs(of);
    fence_u32(f.p);
  }
}

// Warpgroup 1's part of one request piece (tid 0 .. 127).
template <class Tr>
__device__ __forceinline__ void wg_pipe_values(const MlaDecodeCudaParams& p, RowState& st, const WgPipeSmem<Tr>& sm,
                                               const MlaPiece& pc, int r, int g, int tid, bool exact,
                                               common::MbarHandoffs& hs) {
  const int lane = threadIdx.x & 31, r0 = g * 16 + (lane >> 2);
  constexpr int kHalf = kDv / 16;  // chunks of value columns 0 .. 255: blocks 0 .. 3
  WgArrival<Tr> in;
  if (pc.ntiles > 1) {  // tile 1 into the free buffer
    in.locate(p, r, pc.start + kTile + (tid >> 1), pc.end);
    in.template copy<0>(p, sm.kv(1), tid);
    cp_async_commit();
    in.template copy<1>(p, sm.kv(1), tid);
    cp_async_commit();
    if (pc.ntiles > 2) in.locate(p, r, pc.start + 2 * kTile + (tid >> 1), pc.end);
  }
  named_arrive(kBarPvDone, kThreads);  // red is free
  for (int n = 0; n < pc.ntiles; ++n) {
    const int tile0 = pc.start + n * kTile, next0 = tile0 + kTile;
    unsigned char* kv = sm.kv(n & 1);
    named_barrier(kBarP, kThreads);  // P(n) and its rescale factors
    hs.template wait<kHandSoftmax>();
    wg_follow_softmax(st, sm.red(), g);
    if (exact) {
      add_nonfinite_values<Tr>(st, kv, sm.pt(n & 1), tile0, pc.lim, r0, 1);
      named_barrier(kWgLoadBarrier, kWgLoaders);
      zero_nonfinite_values<Tr, kDv / 16, kWgLoaders>(kv, kHalf, tid);
      fence_proxy_async_smem();
      named_barrier(kWgLoadBarrier, kWgLoaders);
    }
    wg_pv_issue<Tr>(st, smem_addr(sm.pt(n & 1)), smem_addr(kv), 1);
    if (n + 1 < pc.ntiles) {  // tile n + 1 (copied a tile ago) to warpgroup 0, half by half
      unsigned char* nxt = sm.kv((n + 1) & 1);
      exact = in.land(nxt, tid, max(pc.hidden0 - next0, 0), min(pc.end - next0, kTile), hs);
      if (tid == 0) sm.flags()[(n + 1) & 1] = exact;
      fence_proxy_async_smem();
      hs.template arrive<kHandTile>();
      named_arrive(kBarTile, kThreads);
    }
    const bool refill = n + 2 < pc.ntiles;  // tile n + 2 into this buffer
    if (refill) {
      named_barrier(kBarFree, kThreads);  // warpgroup 0's P V of tile n done: blocks 0 .. 3 free
      in.template copy<0>(p, kv, tid);
      cp_async_commit();
    }
    wg_pv_wait(st);
    if (n + 1 < pc.ntiles) named_arrive(kBarPvDone, kThreads);  // red is free for tile n + 1
    if (refill) {
      in.template copy<1>(p, kv, tid);
      cp_async_commit();
      if (n + 3 < pc.ntiles) in.locate(p, r, next0 + 2 * kTile + (tid >> 1), pc.end);
    }
  }
}

// One request piece with tile 0's copies issued by the whole CTA (and Q's).
template <class Tr>
__device__ __forceinline__ void wg_pipe_piece(const MlaDecodeCudaParams& p, RowState& st, unsigned char* smem,
                                              const MlaPiece& pc, int r, float scale_log2, int c, int g,
                                              common::MbarHandoffs& hs) {
  const WgPipeSmem<Tr> sm{smem};
  cp_async_wait<0>();
  fence_proxy_async_smem();
  hs.template cta_barrier<kHandCta>();  // tile 0 (FP8: dequantized by warpgroup 1) and Q landed
  const bool exact = hidden_values_nonfinite<Tr>(sm.kv(0), pc.start, pc.hidden0, pc.end);
  if (c == 0) {
    wg_pipe_scores<Tr>(st, sm, pc, scale_log2, g, exact, hs);
  } else {
    wg_pipe_values<Tr>(p, st, sm, pc, r, g, threadIdx.x - kWgLoaders, exact, hs);
  }
}

}  // namespace dualops::cuda::mla

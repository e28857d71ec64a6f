// The pipelined wgmma MLA decode split kernel (16-bit caches of q's dtype). Same grid, plan
// walk, loads, NaN rules and epilogue as mla_split_kernel. Per tile n of a request piece:
//   warpgroup 0: [tile n copied] S(n) = Q K^T, softmax -> P(n) (hi + lo) and the rows' rescale
//                factors to shared memory -> O[:, 0:256] += P(n) V(n)
//   warpgroup 1: [P(n) ready] rescale -> O[:, 256:512] += P(n) V(n) -> [buffer n free] copy
//                tile n + 2 into it
// so warpgroup 1's P V of tile n runs on the tensor cores while warpgroup 0 computes S(n + 1)
// and its softmax. Hand-offs: an mbarrier per KV buffer (warpgroup 1's cp.async copies done),
// named barriers P-ready (5), P-free (6), buffer-free (7); per-warpgroup barriers 8, 9.
#pragma once
#include "../common/mbarrier.cuh"
#include "mla_epilogue.cuh"
#include "mla_load.cuh"
#include "mla_wg_attend.cuh"

namespace dualops::cuda::mla {

using common::mbarrier_arrive_cp_async;
using common::mbarrier_init;
using common::mbarrier_wait;
using common::named_arrive;
using common::named_sync;
using common::named_sync_or;

enum PipeBarrier : int { kBarPReady = 5, kBarPFree = 6, kBarBufFree = 7, kBarWg0 = 8 };

// Warpgroup c's share of the exact path of a tile whose hidden keys hold NaN / inf values (its
// value columns only): exact products into O, then those entries zeroed for its MMA.
template <class Tr>
__device__ __forceinline__ void wg_exact_half(RowState& st, unsigned char* kv, const unsigned char* sp,
                                              const unsigned char* sp_lo, int tile0, const int (&lim)[2], int g,
                                              int c) {
  const int tid = threadIdx.x & 127;
  add_nonfinite_values<Tr>(st, kv, sp, sp_lo, Tr::kLoRowBytes, tile0, lim, g * 16 + ((threadIdx.x & 31) >> 2), c);
  named_sync(kBarWg0 + c, 128);  // the warpgroup has read its values
  zero_nonfinite_values<Tr, 32, 128>(kv, 32 * c, tid);
  fence_proxy_async_smem();
  named_sync(kBarWg0 + c, 128);
}

template <class Tr>
__global__ void __launch_bounds__(kThreads, 1)
    mla_wg_pipe_split_kernel(const __grid_constant__ MlaDecodeParams p, const __grid_constant__ MlaDecodeTiling t) {
  static_assert(Tr::kWg && Tr::kNumKvBufs == 2, "wgmma layout, two KV buffers");
  extern __shared__ __align__(1024) unsigned char smem_wp[];
  unsigned char* sq = smem_wp;
  unsigned char* sp = smem_wp + Tr::kOffP;
  float* red = reinterpret_cast<float*>(smem_wp + Tr::kOffRed);  // [alpha | m] (softmax), then row sums
  float* red_sum = red + 2 * kRows;
  const uint32_t bar0 = smem_addr(smem_wp + Tr::kOffBar);        // mbarrier of KV buffer b: bar0 + 8b
  auto kvbuf = [&](int i) { return smem_wp + Tr::kOffKv + i * Tr::kTileBytes; };
  auto lo_of = [&](unsigned char* kv) { return Tr::kLoInKv ? kv + Tr::kLoInKvOff : smem_wp + Tr::kOffPLo; };

  pdl_launch_dependents();
  const int* plan = static_cast<const int*>(p.plan);
  const int* rec = plan + kHeaderInts + blockIdx.z * t.part_stride;
  const int* ns = plan + kHeaderInts + t.num_sm_parts * t.part_stride;
  const int* seqlens = static_cast<const int*>(p.cache_seqlens);
  const int begin_req = rec[0], end_req = min(rec[1], t.batch - 1), begin_tok = rec[2], end_tok = rec[3];
  const int begin_split = rec[4];
  const int row0 = blockIdx.x * kRows;
  const int lane = threadIdx.x & 31;
  const int c = threadIdx.x >> 7, g = (threadIdx.x >> 5) & 3;  // warpgroup, warp in it (= row group)
  const float scale_log2 = p.softmax_scale * kLog2e;
  const uint32_t q_base = smem_addr(sq);
  if (q_base & 1023u) __trap();  // the 128-byte swizzle needs 1024-byte aligned tiles
  if (threadIdx.x == 0) {
    mbarrier_init(bar0, kThreads / 2);  // warpgroup 1's threads arrive when their copies are done
    mbarrier_init(bar0 + 8, kThreads / 2);
  }
  uint32_t phase = 0;  // bit b: parity of the next completion of buffer b's mbarrier

  for (int r = max(begin_req, 0); r <= end_req; ++r) {
    const int len = max(seqlens[r], 0);
    const int end = r == end_req ? min(end_tok, len) : len;
    const int start = r == begin_req ? begin_tok : 0;
    const int ntiles = end > start ? (end - start + kTile - 1) / kTile : 0;
    const int n_splits = ns[r + 1] - ns[r];
    const int slot = ns[r] + (r == begin_req ? begin_split : 0);
    const int hidden0 = p.causal ? len - t.s_q + 1 : end;
    int lim[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int gr = row0 + g * 16 + (lane >> 2) + 8 * j;
      const int i = gr < t.q_rows ? gr / t.h_q : 0;
      lim[j] = p.causal ? min(end, len - t.s_q + i + 1) : end;
    }
    RowState st;
    init_state(st);
    __syncthreads();  // the previous piece is done with every buffer (and the mbarriers are initialized)
    if (ntiles > 0) {
      // Q and tile 0 by the whole CTA; tile 1 by warpgroup 1 through buffer 1's mbarrier.
      load_q<Tr>(p, t, sq, r, row0);
      load_kv_tile<Tr>(p, kvbuf(0), r, start, end);
      cp_async_commit();
      cp_async_wait<0>();
      fence_proxy_async_smem();
      __syncthreads();
      if (c == 1 && ntiles > 1) {
        load_kv_tile<Tr, kThreads / 2>(p, kvbuf(1), r, start + kTile, end, threadIdx.x - kThreads / 2);
        mbarrier_arrive_cp_async(bar0 + 8);
      }
      for (int n = 0; n < ntiles; ++n) {
        const int tile0 = start + n * kTile, b = n & 1;
        unsigned char* kv = kvbuf(b);
        const uint32_t bar = bar0 + 8 * b;
        // Keys of this tile hidden from some rows (causal, s_q > 1): uniform over the CTA.
        const int h0 = max(hidden0 - tile0, 0), h1 = min(end - tile0, kTile);
        if (c == 0) {
          if (n > 0) {
            mbarrier_wait(bar, (phase >> b) & 1);
            fence_proxy_async_smem();  // warpgroup 1's copies, seen by this thread's wgmma
          }
          const bool exact =
              h0 < h1 && named_sync_or(kBarWg0, 128, values_nonfinite<Tr, 32, 128>(kv, h0, h1, 0, threadIdx.x));
          float s[8][4];
          wg_scores_issue<Tr>(s, q_base, smem_addr(kv));
          if (n > 0) named_sync(kBarPFree, kThreads);  // warpgroup 1 is done with P(n - 1) and red
          wg_softmax<Tr>(st, s, sp, lo_of(kv), red, tile0, lim, scale_log2, g);
          fence_proxy_async_smem();
          named_arrive(kBarPReady, kThreads);
          if (exact) {
            __syncwarp();  // the P rows of this warp
            wg_exact_half<Tr>(st, kv, sp, lo_of(kv), tile0, lim, g, 0);
          }
          wg_pv<Tr>(st, smem_addr(sp), smem_addr(lo_of(kv)), smem_addr(kv), 0);
          if (n + 2 < ntiles) named_arrive(kBarBufFree, kThreads);  // buffer b may take tile n + 2
        } else {
          named_sync(kBarPReady, kThreads);
          wg_follow_softmax(st, red, g);
          if (n > 0 && h0 < h1) mbarrier_wait(bar, (phase >> b) & 1);
          const bool exact =
              h0 < h1 && named_sync_or(kBarWg0 + 1, 128, values_nonfinite<Tr, 32, 128>(kv, h0, h1, 32, threadIdx.x - 128));
          if (exact) wg_exact_half<Tr>(st, kv, sp, lo_of(kv), tile0, lim, g, 1);
          wg_pv<Tr>(st, smem_addr(sp), smem_addr(lo_of(kv)), smem_addr(kv), 1);
          if (n + 2 < ntiles) named_sync(kBarBufFree, kThreads);
          if (n + 1 < ntiles) named_arrive(kBarPFree, kThreads);
          if (n + 2 < ntiles) {
            load_kv_tile<Tr, kThreads / 2>(p, kv, r, tile0 + 2 * kTile, end, threadIdx.x - kThreads / 2);
            mbarrier_arrive_cp_async(bar);
          }
        }
        if (n > 0) phase ^= 1u << b;
      }
    }
    write_piece<Tr>(p, t, st, red_sum, r, row0, n_splits, slot, g, c);
  }
}

}  // namespace dualops::cuda::mla

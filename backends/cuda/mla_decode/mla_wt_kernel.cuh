// The transposed-tile wgmma MLA decode split kernel, for calls with at most 32 q rows
// (s_q * h_q): the same grid, plan walk, NaN rules and epilogue semantics as the other split
// kernels, with the tile math of mla_wt_attend.cuh (tokens and value dims on the 64-row side of
// each wgmma, NQ = 8 / 16 / 32 q rows on N). Few MMAs per tile, so the per-tile work is a chain
// of latencies (copies, dependent MMAs, barriers); the kernel runs two such chains per CTA:
// warpgroup c takes the piece's tiles n with n % 2 == c entirely on its own (S^T over all dims,
// its softmax state, O^T over all 512 value dims), synchronized only by named barriers of its
// 128 threads, and the two states are merged at the end of the piece (mla_wt_epilogue.cuh).
// Each warpgroup copies its own tiles: 16-bit caches by TMA into its ring of 8 KiB block slots
// (the next tile's blocks in flight while a tile is computed; the next request's first blocks in
// flight during a piece's merge), FP8 caches part by part into its raw slot, dequantized by the
// warpgroup while the other one runs its MMAs (docs/mla_decode_cuda.md).
// The split partials of a request are merged by the CTA that writes its last piece (arrival
// counters in p.merge_counters, mla_merge.cuh); without counters, by the combine kernel.
#pragma once
#include "mla_merge.cuh"
#include "mla_piece.cuh"
#include "mla_wt_epilogue.cuh"
#include "mla_wt_load.cuh"

namespace dualops::cuda::mla {

template <class Tr, int NQ>
__global__ void __launch_bounds__(kThreads, 1)
    mla_wt_split_kernel(const __grid_constant__ MlaDecodeCudaParams p, const __grid_constant__ MlaDecodeTiling t,
                        const __grid_constant__ CUtensorMap tmap) {
  using L = WtLayout<Tr, NQ>;
  using Ld = WtChainLoad<Tr, L>;
  constexpr int NB = L::kNb;
  // 16-bit caches, NQ <= 16: copies into the slots of value blocks 0 .. 3 during P V (measured:
  // faster at NQ 16, slower at NQ 32)
  constexpr bool kEarly = NQ <= 16;
  extern __shared__ __align__(1024) unsigned char smem_wt[];
  const int c = threadIdx.x >> 7;  // warpgroup = chain
  WgBarrier wb(c);
  unsigned char* sq = smem_wt;
  unsigned char* ring = smem_wt + L::kOffKv + c * L::kRingBytes;
  unsigned char* const sp_own = smem_wt + L::kOffP + c * L::kPBytes;  // (P^T tile, beside the rings)
  unsigned char* raw = smem_wt + L::kOffRaw + c * L::kRawBytes;
  float* red = reinterpret_cast<float*>(smem_wt + L::kOffRed) + c * 4 * NQ;
  WtKv<L> kv{smem_addr(ring), ring, 0};
  const uint32_t bars = smem_addr(smem_wt + L::kOffBar) + c * 8 * 2 * L::kNb;  // (16-bit caches)
  uint32_t phase = 0;  // 16-bit caches: parity of each ring slot's next phase
  if constexpr (Tr::kDirect) {
    if ((threadIdx.x & 127) == 0) {
      common::tma_prefetch_map(&tmap);
      for (int s = 0; s < L::kSlots; ++s) common::mbar_init(bars + 8 * s);
    }
    common::mbar_init_fence();
  }

  pdl_launch_dependents();
  const MlaPart part = mla_part<Tr::kSparse>(p, t);
  // (dense calls have one m-block here: rows 0 .. q_rows - 1)
  const int row0 = Tr::kSparse ? mla_row0<true>(t) : 0, row_end = mla_row_end<Tr::kSparse>(t);
  const int lane = threadIdx.x & 31;
  const float scale_log2 = p.softmax_scale * kLog2e;
  const uint32_t q_base = smem_addr(sq);
  if (q_base & 1023u) __trap();  // the 128-byte swizzle needs 1024-byte aligned tiles

  Ld ld(p, c, smem_addr(ring), smem_addr(raw), &tmap, bars);
  bool early = false;  // 16-bit caches: ld holds this request's piece, its first blocks in flight
  for (int r = max(part.begin_req, 0); r <= part.end_req; ++r) {
    const int kr = mla_keys<Tr::kSparse>(t, r);  // the rows' key list
    const MlaPiece pc = mla_piece(t, part, r, kr, 0, p.causal != 0);
    const int start = pc.start, end = pc.end, ntiles = pc.ntiles;
    const int nt = ntiles > c ? (ntiles - c + 1) / 2 : 0;  // tiles of this chain
    const int len = max(part.seqlens[kr], 0);
    int lim[L::kCols];  // keys below lim[k] are visible to the thread's q row k
#pragma unroll
    for (int k = 0; k < L::kCols; ++k) {
      const int gr = wt_col(k, lane);
      const int i = gr < t.q_rows ? gr / t.h_q : 0;
      lim[k] = p.causal ? min(end, len - t.s_q + i + 1) : end;
    }
    WtState<L> st;
    wt_init(st);
    fence_proxy_async_smem();  // the merge's writes to the rings before the copies' (async proxy)
    __syncthreads();  // the previous request's readers of Q / KV / P / merge areas are done
    if (ntiles > 0) {
      wt_load_q<Tr, L>(p, t, sq, r, row0, row_end);
      cp_async_commit();
      if (!early) ld.begin(kr, start, end, nt);
      // Prologue: 16-bit: chain tile 0, then the ring's other slots (tile 1; past the blocks
      // issued during the previous piece's merge); FP8: a raw part per raw slot, one cp.async
      // group each.
      if constexpr (Tr::kDirect) {
        ld.blocks(L::kSlots);
        cp_async_commit();
      } else {
#pragma unroll
        for (int u = 0; u < L::kRawBufs; ++u) {
          ld.raw_part();
          cp_async_commit();
        }
      }
      cp_async_wait<Tr::kDirect ? 0 : L::kRawBufs>();  // Q (copied by the whole CTA)
      fence_proxy_async_smem();
      __syncthreads();
      for (int j = 0; j < nt; ++j) {
        const int tile0 = start + (2 * j + c) * kTile;
        // 16-bit caches: S^T waits for the tile block by block; a tile the range end cuts or with
        // hidden keys is waited for whole first (its checks read it).
        const uint32_t ph = phase;
        if constexpr (Tr::kDirect) {
          kv.s0 = Ld::slot_of(j * NB);
          ld.next_phase(j, phase);
          if (end - tile0 < kTile || pc.hidden0 < tile0 + kTile) ld.wait_tile(j, ph);
          if (end - tile0 < kTile) {  // the range ends inside the tile: its tail to zeros
            ld.zero_tail(kv, max(end - tile0, 0));
            fence_proxy_async_smem();
            wb.sync();
          }
        } else {
#pragma unroll 1
          for (int q = 0; q < Ld::kParts; ++q) {  // (kParts is a multiple of kRawBufs)
            cp_async_wait<L::kRawBufs - 1>();  // the oldest part in flight (part q) has landed
            wb.sync();  // raw part visible; (q = 0) the last tile's readers done
            wt_dequant<Tr, L::kRawPer>(raw + (q % L::kRawBufs) * L::kRawSlot, ring, q * L::kRawTok);
            fence_proxy_async_smem();
            wb.sync();  // raw slot free; (last part) the 16-bit tile visible
            ld.raw_part();  // into the slot just freed
            cp_async_commit();
          }
        }
        unsigned char* const sp = L::kPInRope ? kv.blk(NB - 1) : sp_own;  // P^T
        const bool exact = wt_hidden_nonfinite<Tr, L>(kv, tile0, pc.hidden0, end, wb);
        float s[L::kAcc];
        wt_scores<Tr, L>(s, q_base, kv, [&](int i) { ld.wait_block(j, i, ph); });
        wt_softmax<Tr, L>(st, s, sp, red, tile0, lim, scale_log2, wb);
        fence_proxy_async_smem();
        wb.sync();  // P^T visible to the warpgroup's wgmma
        if (exact) {  // keys hidden from some q rows hold NaN / inf values: exact products, then zeros
          wt_add_nonfinite<Tr, L>(st, kv, sp, tile0, lim);
          wb.sync();  // every thread has read the values
          wt_zero_nonfinite<Tr, L>(kv);
          fence_proxy_async_smem();
          wb.sync();
        }
        wt_pv<Tr, L>(st, kv, smem_addr(sp), [&] {
          if constexpr (Tr::kDirect && kEarly) {  // value blocks 0 .. 3 of tile j read: their slots
            wb.sync();
            ld.blocks(min(j * NB + 4 + L::kSlots, (j + 2) * NB));  // (tile j + 1 only)
          }
        });
        if constexpr (Tr::kDirect) {
          wb.sync();  // every reader of tile j's slots is done
          ld.blocks((j + 2) * NB);  // the rest of tile j + 1
          ld.blocks((j + 1) * NB + L::kSlots);  // blocks of tile j + 2 that fit
        }
      }
      cp_async_wait<0>();  // (only empty groups can be pending)
    }
    // 16-bit caches: the next request's first blocks of this chain, into the slots the merge
    // leaves alone (the chain's readers of its ring are done)
    early = false;
    if constexpr (Tr::kDirect) {
      if (r < part.end_req) {
        const MlaPiece nx = mla_piece(t, part, r + 1, r + 1, 0, p.causal != 0);
        const int nt_next = nx.ntiles > c ? (nx.ntiles - c + 1) / 2 : 0;
        if (nt_next > 0) {
          wb.sync();
          ld.begin(r + 1, nx.start, nx.end, nt_next);
          ld.blocks(L::kSlots - L::kRing0);
          early = true;
        }
      }
    }
    wt_write_piece<Tr, L>(p, t, st, red, reinterpret_cast<float*>(smem_wt + L::kOffKv), r, row0, row_end, pc.n_splits,
                          pc.slot, wb);
  }
  // The CTA's split requests (its part's first and last): the last piece of each to finish
  // merges its partials (no combine kernel). After the request loop, whose registers are then
  // free (inside it, the merge made the NQ 32 loop spill).
  if (p.merge_counters != nullptr) {
#pragma unroll 1
    for (int r = max(part.begin_req, 0); r <= part.end_req; ++r) {
      const int first = part.ns[r], n = part.ns[r + 1] - first;
      if (n > 1) mla_merge_in_kernel<typename Tr::MT>(p, t, r, first, n, row0, row_end);
    }
  }
}

}  // namespace dualops::cuda::mla

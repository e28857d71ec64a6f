// The wgmma MLA decode split kernel: grid (num_m_blocks, h_kv, num_sm_parts) of the plan (sparse
// decode: s_q * ceil(h_q / 64) row blocks, mla_row0 in mla_piece.cuh); CTA (m, 0, part) walks the
// part's requests, attends each request's token range for its 64 q rows tile by tile, and writes
// out / lse or its split slot's partials. Q and two KV tiles in the blocked 128-byte-swizzled layout (FP8 caches: raw
// bytes staged in the KV buffer and dequantized there, mla_wg_load.cuh). Tile loops: the seesaw
// loop of mla_wg_seesaw.cuh (plan kernel wgmma_seesaw, 16-bit caches); else bf16 q the pipelined
// loop of mla_wg_pipe.cuh, fp16 q the tiles one after the other (the loop below, FP8 tiles
// dequantized by warpgroup 1). The tile stages are mla_wg_attend.cuh (docs/mla_decode_cuda.md).
#pragma once
#include "mla_epilogue.cuh"
#include "mla_load.cuh"
#include "mla_piece.cuh"
#include "mla_wg_attend.cuh"
#include "mla_wg_load.cuh"
#include "mla_wg_pipe.cuh"
#include "mla_wg_seesaw.cuh"

namespace dualops::cuda::mla {

template <class Tr>
__global__ void __launch_bounds__(kThreads, 1)
    mla_wg_split_kernel(const __grid_constant__ MlaDecodeCudaParams p, const __grid_constant__ MlaDecodeTiling t,
                        const __grid_constant__ CUtensorMap tmap) {
  extern __shared__ __align__(1024) unsigned char smem_wg[];
  unsigned char* sq = smem_wg;
  unsigned char* sp = smem_wg + Tr::kOffP;
  float* red = reinterpret_cast<float*>(smem_wg + Tr::kOffRed);  // [alpha | m] (softmax), then row sums
  float* red_sum = red + 2 * kRows;
  auto kvbuf = [&](int i) { return smem_wg + Tr::kOffKv + i * Tr::kTileBytes; };

  pdl_launch_dependents();
  const MlaPart part = mla_part<Tr::kSparse>(p, t);
  const int row0 = mla_row0<Tr::kSparse>(t);
  const int lane = threadIdx.x & 31;
  const int c = threadIdx.x >> 7, g = (threadIdx.x >> 5) & 3;  // warpgroup, warp in it (= row group)
  const float scale_log2 = p.softmax_scale * kLog2e;
  const uint32_t q_base = smem_addr(sq);
  if (q_base & 1023u) __trap();  // the 128-byte swizzle needs 1024-byte aligned tiles
  // The hand-off mbarriers between the warpgroups (kHandSoftmax ..; every thread keeps their
  // phases): the softmax of a tile (pipelined loop: warpgroup 0 -> 1; seesaw loop: P_A, 0 -> 1),
  // P_B of the seesaw loop (1 -> 0), the CTA barriers of a pipelined piece's start and of the
  // epilogue's row-sum exchange (all 256 threads), the pipelined loop's landed tile and FP8
  // scales read (1 -> 0). Set up before the first piece's CTA barrier.
  const uint32_t hand = smem_addr(smem_wg + Tr::kOffHand);
  if (threadIdx.x == 0) {
    common::mbar_init(hand + 8 * kHandSoftmax, kWgLoaders);
    common::mbar_init(hand + 8 * kHandPB, kWgLoaders);
    common::mbar_init(hand + 8 * kHandCta, kThreads);
    common::mbar_init(hand + 8 * kHandTile, kWgLoaders);
    common::mbar_init(hand + 8 * kHandScales, kWgLoaders);
  }
  common::MbarHandoffs hs(hand);

  for (int r = max(part.begin_req, 0); r <= part.end_req; ++r) {
    const int kr = mla_keys<Tr::kSparse>(t, r);  // the rows' key list
    const MlaPiece pc = mla_piece(t, part, r, kr, row0 + g * 16 + (lane >> 2), p.causal != 0);
    const int start = pc.start, end = pc.end, ntiles = pc.ntiles, hidden0 = pc.hidden0;
    RowState st;
    init_state(st);
    __syncthreads();  // the previous request's readers of Q / KV / P are done
    if (ntiles > 0) {
      load_q<Tr>(p, sq, r, row0, mla_row_end<Tr::kSparse>(t), t.h_q);
      if constexpr (Tr::kWgSeesaw) {  // (dense decode only: the host entry says so)
        wg_seesaw_piece<Tr>(p, st, smem_wg, &tmap, pc, r, scale_log2, c, g, hs);
      } else {
        if constexpr (Tr::kDirect) {
          load_kv_tile<Tr>(p, kvbuf(0), kr, start, end);
        } else if (c == 1) {  // FP8: warpgroup 1 copies and dequantizes tile 0
          load_kv_raw_wg<Tr>(p, kvbuf(0), kr, start, end, threadIdx.x - kWgLoaders);
          cp_async_commit();
          cp_async_wait<0>();
          dequant_kv_wg<Tr>(kvbuf(0), threadIdx.x - kWgLoaders);
        }
        cp_async_commit();
        if constexpr (Tr::kWgPipe) {
          wg_pipe_piece<Tr>(p, st, smem_wg, pc, kr, scale_log2, c, g, hs);
        } else {  // serial: S and softmax (warpgroup 0), then both P V, CTA barriers between
          for (int n = 0; n < ntiles; ++n) {
            const int tile0 = start + n * kTile;
            unsigned char* kv = kvbuf(n & 1);
            // Tile n (this thread's copies, or warpgroup 1's dequantized values) visible to the
            // wgmma (async proxy); every reader of the other buffer, the P tiles and red (tile n - 1) is done.
            cp_async_wait<0>();
            fence_proxy_async_smem();
            __syncthreads();
            const bool exact = hidden_values_nonfinite<Tr>(kv, tile0, hidden0, end);
            float s[8][4];
            if (c == 0) {
              wg_scores_issue<Tr>(s, q_base, smem_addr(kv));
              wg_softmax<Tr>(st, s, sp, red, tile0, pc.lim, scale_log2, g);
            } else if (n + 1 < ntiles) {  // warpgroup 1 loads the next tile meanwhile
              if constexpr (Tr::kDirect) {
                load_kv_tile<Tr, kWgLoaders>(p, kvbuf((n + 1) & 1), kr, tile0 + kTile, end, threadIdx.x - kWgLoaders);
              } else {
                load_kv_raw_wg<Tr>(p, kvbuf((n + 1) & 1), kr, tile0 + kTile, end, threadIdx.x - kWgLoaders);
              }
              cp_async_commit();
            }
            fence_proxy_async_smem();
            __syncthreads();  // P visible to both warpgroups' wgmma, red to warpgroup 1
            if (c == 1) wg_follow_softmax(st, red, g);
            if (exact) {  // keys hidden from some rows hold NaN / inf values: exact products, then zeros
              add_nonfinite_values<Tr>(st, kv, sp, tile0, pc.lim, g * 16 + (lane >> 2), c);
              __syncthreads();  // every thread has read the values
              zero_nonfinite_values<Tr>(kv);
              fence_proxy_async_smem();
              __syncthreads();
            }
            wg_pv_issue<Tr>(st, smem_addr(sp), smem_addr(kv), c);
            if constexpr (!Tr::kDirect) {
              // FP8: warpgroup 1 dequantizes the next tile while the tensor cores run P V
              if (c == 1 && n + 1 < ntiles) {
                cp_async_wait<0>();
                dequant_kv_wg<Tr>(kvbuf((n + 1) & 1), threadIdx.x - kWgLoaders);
              }
            }
            wg_pv_wait(st);
          }
        }
      }
    }
    // The pipelined loop hands warpgroup 0's sums over (warpgroup 1 keeps none); the other loops
    // exchange them across a CTA barrier.
    write_piece<Tr, Tr::kWgPipe>(p, t, st, red_sum, r, row0, mla_row_end<Tr::kSparse>(t), pc.n_splits, pc.slot, g, c,
                                 hs, ntiles > 0);
  }
}

}  // namespace dualops::cuda::mla

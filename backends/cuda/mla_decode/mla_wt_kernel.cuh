// The transposed-tile wgmma MLA decode split kernel, for calls with at most 32 q rows
// (s_q * h_q): the same grid, plan walk, loads, NaN rules and epilogue semantics as the other
// split kernels, with the tile math of mla_wt_attend.cuh (tokens and value dims on the 64-row
// side of each wgmma, NQ = 8 / 16 / 32 q rows on N). Few MMAs per tile, so the kernel is built
// for bytes in flight: 16-bit caches copy 8 KiB blocks into a ring of block slots as soon as
// they free (cp.async by all threads; the blocks of the next tiles stay in flight while a tile
// is computed); FP8 caches keep a ring of raw tiles in flight, each dequantized into the one
// 16-bit tile by the whole CTA (docs/mla_decode_cuda.md).
#pragma once
#include "mla_piece.cuh"
#include "mla_wt_epilogue.cuh"
#include "mla_wt_load.cuh"

namespace dualops::cuda::mla {

template <class Tr, int NQ>
__global__ void __launch_bounds__(kThreads, 1)
    mla_wt_split_kernel(const __grid_constant__ MlaDecodeParams p, const __grid_constant__ MlaDecodeTiling t) {
  using L = WtLayout<Tr, NQ>;
  constexpr int S = L::kStages, NB = L::kNb;
  extern __shared__ __align__(1024) unsigned char smem_wt[];
  unsigned char* sq = smem_wt;
  unsigned char* sp = smem_wt + L::kOffP;
  unsigned char* sp_lo = smem_wt + L::kOffPLo;
  float* xs = reinterpret_cast<float*>(smem_wt + L::kOffXs);
  const int c = threadIdx.x >> 7;  // warpgroup
  float* red = reinterpret_cast<float*>(smem_wt + L::kOffRed) + c * 4 * NQ;
  auto raw = [&](int i) { return smem_wt + L::kOffRaw + i * L::kRawBytes; };
  WtKv<L> kv{smem_addr(smem_wt + L::kOffKv), smem_wt + L::kOffKv, 0};

  pdl_launch_dependents();
  const MlaPart part = mla_part(p, t);
  const int lane = threadIdx.x & 31;
  const float scale_log2 = p.softmax_scale * kLog2e;
  const uint32_t q_base = smem_addr(sq);
  if (q_base & 1023u) __trap();  // the 128-byte swizzle needs 1024-byte aligned tiles

  for (int r = max(part.begin_req, 0); r <= part.end_req; ++r) {
    const MlaPiece pc = mla_piece(t, part, r, 0, p.causal != 0);
    const int start = pc.start, end = pc.end, ntiles = pc.ntiles;
    const int len = max(part.seqlens[r], 0);
    int lim[L::kCols];  // keys below lim[k] are visible to the thread's q row k
#pragma unroll
    for (int k = 0; k < L::kCols; ++k) {
      const int gr = wt_col(k, lane);
      const int i = gr < t.q_rows ? gr / t.h_q : 0;
      lim[k] = p.causal ? min(end, len - t.s_q + i + 1) : end;
    }
    WtState<L> st;
    wt_init(st);
    __syncthreads();  // the previous request's readers of Q / KV / P / staging are done
    if (ntiles > 0) {
      wt_load_q<Tr, L>(p, t, sq, r);
      // Copies: 4 threads per token; the block id of the thread's token in the tile after the
      // one being copied is read a tile ahead (nid), so no copy waits for a block-table read.
      const int ltok = threadIdx.x >> 2, lsub = threadIdx.x & 3;
      const int64_t bbytes = static_cast<int64_t>(p.page_block_size) * token_bytes<Tr>();
      int nid = token_block_id(p, r, start + ltok, end);
      const unsigned char* src = nullptr;  // the thread's token row of tile g_next / NB
      int g_next = 0;                      // 16-bit caches: next block to copy (tile g / NB, block g % NB)
      auto next_tile_src = [&](int m) {    // tile m's source row, then the id for tile m + 1
        const int tok = start + m * kTile + ltok;
        const unsigned char* b = block_base(p, nid, bbytes);
        src = b ? b + static_cast<int64_t>(tok % p.page_block_size) * Tr::kRowBytes : nullptr;
        nid = token_block_id(p, r, tok + kTile, end);
      };
      auto copy_blocks = [&](int g_end) {  // 16-bit caches: blocks g_next .. g_end - 1 into their slots
        for (; g_next < g_end; ++g_next) {
          const int m = g_next / NB, j = g_next - m * NB;
          if (j == 0) next_tile_src(m);
          const uint32_t dst = kv.base + (g_next % L::kSlots) * Tr::kBlockBytes + ltok * 128;
          const uint32_t n = src ? 16u : 0u;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int ch = lsub + 4 * h;
            cp_async_16(dst + ((ch ^ (ltok & 7)) << 4), n ? src + (8 * j + ch) * 16 : p.kv_cache, n);
          }
        }
      };
      auto copy_raw = [&](unsigned char* dst, int m) {  // FP8: raw tile m
        const int tok = start + m * kTile + ltok;
        load_kv_token<Tr, 4>(p, smem_addr(dst), ltok, lsub, block_base(p, nid, bbytes), tok % p.page_block_size);
        nid = token_block_id(p, r, tok + kTile, end);
      };
      const int total = ntiles * NB;
      if constexpr (Tr::kDirect) {  // prologue: tile 0 (with Q), then the ring's other slots
        copy_blocks(min(NB, total));
        cp_async_commit();
        copy_blocks(min(L::kSlots, total));
        cp_async_commit();
      } else {  // prologue: raw tiles 0 .. S - 1, one group each
#pragma unroll
        for (int i = 0; i < S; ++i) {
          if (i < ntiles) copy_raw(raw(i), i);
          cp_async_commit();
        }
      }
      for (int n = 0; n < ntiles; ++n) {
        const int tile0 = start + n * kTile;
        if constexpr (Tr::kDirect) {
          // Tile n was copied by the groups before the last one (which holds only later tiles).
          cp_async_wait<1>();
          fence_proxy_async_smem();
          __syncthreads();  // tile n visible; every reader of tile n - 1's slots and of P is done
          kv.s0 = (n * NB) % L::kSlots;
          copy_blocks(min((n + 2) * NB, min(n * NB + L::kSlots, total)));  // the rest of tile n + 1
          cp_async_commit();
          copy_blocks(min(n * NB + L::kSlots, total));  // blocks of tile n + 2 that fit
          cp_async_commit();
        } else {
          cp_async_wait<S - 1>();
          __syncthreads();  // raw tile n visible; the 16-bit tile and P are free
          wt_dequant<Tr>(raw(n % S), kv.ptr);
          fence_proxy_async_smem();
          __syncthreads();  // the 16-bit tile visible to the wgmma; raw stage n % S free
          if (n + S < ntiles) copy_raw(raw(n % S), n + S);
          cp_async_commit();
        }
        const bool exact = wt_hidden_nonfinite<Tr, L>(kv, tile0, pc.hidden0, end);
        float s[L::kAcc];
        wt_scores<Tr, L>(s, q_base, kv, xs, c);
        wt_softmax<Tr, L>(st, s, sp, sp_lo, red, tile0, lim, scale_log2, c);
        fence_proxy_async_smem();
        __syncthreads();  // P^T visible to both warpgroups' wgmma
        if (exact) {  // keys hidden from some q rows hold NaN / inf values: exact products, then zeros
          wt_add_nonfinite<Tr, L>(st, kv, sp, sp_lo, tile0, lim, c);
          __syncthreads();  // every thread has read the values
          wt_zero_nonfinite<Tr, L>(kv);
          fence_proxy_async_smem();
          __syncthreads();
        }
        wt_pv<Tr, L>(st, kv, smem_addr(sp), smem_addr(sp_lo), c);
      }
      cp_async_wait<0>();  // (only empty groups can be pending)
    }
    wt_write_piece<Tr, L>(p, t, st, red, r, pc.n_splits, pc.slot, c);
  }
}

}  // namespace dualops::cuda::mla

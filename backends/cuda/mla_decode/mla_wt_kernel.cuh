// The transposed-tile wgmma MLA decode split kernel, for calls with at most 32 q rows
// (s_q * h_q): the same grid, plan walk, loads, NaN rules and epilogue semantics as the other
// split kernels, with the tile math of mla_wt_attend.cuh (tokens and value dims on the 64-row
// side of each wgmma, NQ = 8 / 16 / 32 q rows on N). Few MMAs per tile, so the kernel is built
// for bytes in flight: 16-bit caches keep a ring of kStages KV tiles in flight (cp.async by all
// threads, issued as soon as a buffer frees); FP8 caches a ring of raw tiles, each dequantized
// into the one 16-bit tile by the whole CTA (docs/mla_decode_cuda.md).
#pragma once
#include "mla_piece.cuh"
#include "mla_wt_epilogue.cuh"
#include "mla_wt_load.cuh"

namespace dualops::cuda::mla {

template <class Tr, int NQ>
__global__ void __launch_bounds__(kThreads, 1)
    mla_wt_split_kernel(const __grid_constant__ MlaDecodeParams p, const __grid_constant__ MlaDecodeTiling t) {
  using L = WtLayout<Tr, NQ>;
  constexpr int S = L::kStages;
  extern __shared__ __align__(1024) unsigned char smem_wt[];
  unsigned char* sq = smem_wt;
  unsigned char* sp = smem_wt + L::kOffP;
  unsigned char* sp_lo = smem_wt + L::kOffPLo;
  float* xs = reinterpret_cast<float*>(smem_wt + L::kOffXs);
  const int c = threadIdx.x >> 7;  // warpgroup
  float* red = reinterpret_cast<float*>(smem_wt + L::kOffRed) + c * 4 * NQ;
  auto kvbuf = [&](int i) { return smem_wt + L::kOffKv + i * Tr::kTileBytes; };
  auto raw = [&](int i) { return smem_wt + L::kOffRaw + i * L::kRawBytes; };

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
      // Tile m is copied by 4 threads per token; the block id of the thread's token of the next
      // tile to copy is read one tile ahead (nid), so no copy waits for a block-table read.
      const int ltok = threadIdx.x >> 2, lsub = threadIdx.x & 3;
      const int64_t bbytes = static_cast<int64_t>(p.page_block_size) * token_bytes<Tr>();
      int nid = token_block_id(p, r, start + ltok, end);
      auto issue = [&](unsigned char* dst, int m) {  // tile m (m < ntiles), then the id for tile m + 1
        const int tok = start + m * kTile + ltok;
        load_kv_token<Tr, 4>(p, smem_addr(dst), ltok, lsub, block_base(p, nid, bbytes), tok % p.page_block_size);
        nid = token_block_id(p, r, tok + kTile, end);
      };
      // Prologue: tiles 0 .. S - 2 (16-bit) or raw tiles 0 .. S - 1 (FP8), one group each.
#pragma unroll
      for (int i = 0; i < (Tr::kDirect ? S - 1 : S); ++i) {
        if (i < ntiles) issue(Tr::kDirect ? kvbuf(i) : raw(i), i);
        cp_async_commit();
      }
      for (int n = 0; n < ntiles; ++n) {
        const int tile0 = start + n * kTile;
        unsigned char* kv;
        if constexpr (Tr::kDirect) {
          cp_async_wait<S - 2>();  // tile n's copies (this thread's)
          fence_proxy_async_smem();
          __syncthreads();  // tile n visible; every reader of tile n - 1's buffer and of P is done
          if (n + S - 1 < ntiles) issue(kvbuf((n + S - 1) % S), n + S - 1);
          cp_async_commit();
          kv = kvbuf(n % S);
        } else {
          cp_async_wait<S - 1>();
          __syncthreads();  // raw tile n visible; the 16-bit tile and P are free
          kv = kvbuf(0);
          wt_dequant<Tr>(raw(n % S), kv);
          fence_proxy_async_smem();
          __syncthreads();  // the 16-bit tile visible to the wgmma; raw stage n % S free
          if (n + S < ntiles) issue(raw(n % S), n + S);
          cp_async_commit();
        }
        const bool exact = hidden_values_nonfinite<Tr>(kv, tile0, pc.hidden0, end);
        float s[L::kAcc];
        wt_scores<Tr, L>(s, q_base, smem_addr(kv), xs, c);
        wt_softmax<Tr, L>(st, s, sp, sp_lo, red, tile0, lim, scale_log2, c);
        fence_proxy_async_smem();
        __syncthreads();  // P^T visible to both warpgroups' wgmma
        if (exact) {  // keys hidden from some q rows hold NaN / inf values: exact products, then zeros
          wt_add_nonfinite<Tr, L>(st, kv, sp, sp_lo, tile0, lim, c);
          __syncthreads();  // every thread has read the values
          zero_nonfinite_values<Tr>(kv);
          fence_proxy_async_smem();
          __syncthreads();
        }
        wt_pv<Tr, L>(st, smem_addr(kv), smem_addr(sp), smem_addr(sp_lo), c);
      }
      cp_async_wait<0>();  // (only empty groups can be pending)
    }
    wt_write_piece<Tr, L>(p, t, st, red, r, pc.n_splits, pc.slot, c);
  }
}

}  // namespace dualops::cuda::mla

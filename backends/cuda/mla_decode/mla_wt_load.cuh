// Loads of the transposed-tile wgmma MLA kernel: the Q tile of NQ rows (blocked layout of
// WtLayout) and, for the 16-bit caches, the TMA copies of one MMA warpgroup's tile chain (the FP8
// caches' producer warpgroup is in mla_wt_produce.cuh).
#pragma once
#include "../common/tma.cuh"
#include "mla_load.cuh"
#include "mla_wt_layout.cuh"

namespace dualops::cuda::mla {

// q rows 0 .. NQ - 1 of request b (zero past q_rows) into the blocked Q tile.
template <class Tr, class L>
__device__ __forceinline__ void wt_load_q(const MlaDecodeParams& p, const MlaDecodeTiling& t, unsigned char* sq,
                                          int b) {
  using MT = typename Tr::MT;
  const MT* q = static_cast<const MT*>(p.q);
  const uint32_t base = smem_addr(sq);
  for (int c = threadIdx.x; c < L::kNq * Tr::kChunks; c += kThreads) {
    const int row = c / Tr::kChunks, chunk = c - row * Tr::kChunks;
    const bool ok = row < t.q_rows;
    const int i = ok ? row / t.h_q : 0, h = ok ? row - i * t.h_q : 0;
    const MT* src = q + b * p.q_stride_b + i * p.q_stride_s + h * p.q_stride_h + chunk * 8;
    cp_async_16(base + L::q_off(row, chunk), ok ? src : q, ok ? 16u : 0u);
  }
}

// The KV copies of warpgroup c's chain (piece tiles n = 2j + c, chain tile j), 16-bit caches:
// block g = kNb j + i (dims 64i .. of chain tile j) into ring slot g % kSlots by
// TMA (`tmap`: the cache as rows of d_qk 16-bit values, boxes of 64 values x `box` tokens, box =
// gcd(page, 64), so a box never crosses a page), issued by the warpgroup's first thread; the
// slot's mbarrier completes when its 8 KiB have landed (wait_tile). A box whose tokens are past
// the range end, past the block table's width or in a block outside the cache is addressed out
// of bounds and arrives as zeros; a box the range end cuts is zeroed past the end (zero_tail).
template <class Tr, class L>
struct WtChainLoad {
  const MlaDecodeParams& p;
  int r, end, tok0;       // request; range end; first token of chain tile 0
  int total;              // blocks of the chain
  uint32_t ring;          // shared address of the warpgroup's ring
  int g_next = 0;         // next block to copy
  // The tensor map, the warpgroup's slot mbarriers, box rows, whether this thread issues the
  // copies, and the out-of-bounds-or-cache row of each box of the tile being copied.
  const CUtensorMap* tmap;
  uint32_t bars;
  int box;
  bool issuer;
  int rows[kTile / 16];

  __device__ __forceinline__ WtChainLoad(const MlaDecodeParams& p_, int r_, int start, int end_, int nt, int c,
                                         uint32_t ring_, const CUtensorMap* tmap_, uint32_t bars_)
      : p(p_), r(r_), end(end_), tok0(start + c * kTile), total(nt * L::kNb), ring(ring_), tmap(tmap_), bars(bars_) {
    box = p.page_block_size % 64 == 0 ? 64 : p.page_block_size % 32 == 0 ? 32 : 16;
    issuer = (threadIdx.x & 127) == 0;
  }
  // Blocks g_next .. g_end - 1 into their slots (the issuing thread; the slots'
  // earlier readers are done).
  __device__ __forceinline__ void blocks(int g_end) {
    g_end = min(g_end, total);
    if (!issuer) return;
    for (; g_next < g_end; ++g_next) {
      const int m = g_next / L::kNb, j = g_next - m * L::kNb;
      const int nbox = kTile / box;
      if (j == 0) {
#pragma unroll
        for (int b = 0; b < kTile / 16; ++b) {
          if (b >= nbox) break;
          const int tok = tok0 + 2 * m * kTile + b * box;
          const int blk = token_block_id(p, r, tok, end);
          rows[b] = blk >= 0 && blk < p.num_blocks ? blk * p.page_block_size + tok % p.page_block_size : -kTile;
        }
      }
      const int s = g_next % L::kSlots;
      const uint32_t bar = bars + 8 * s, dst = ring + s * Tr::kBlockBytes;
      common::mbar_expect_tx(bar, Tr::kBlockBytes);
#pragma unroll
      for (int b = 0; b < kTile / 16; ++b)
        if (b < nbox) common::tma_load_2d(dst + b * box * 128, tmap, 64 * j, rows[b], bar);
    }
  }
  // Every thread waits for the blocks of chain tile j (phase: the thread's parity
  // bit per slot, flipped at each use).
  __device__ __forceinline__ void wait_tile(int j, uint32_t& phase) const {
#pragma unroll 1
    for (int i = 0; i < L::kNb; ++i) {
      const int s = (j * L::kNb + i) % L::kSlots;
      common::mbar_wait(bars + 8 * s, (phase >> s) & 1u);
      phase ^= 1u << s;
    }
  }
  // Tokens n0 .. 63 of the current tile (past the range end, copied from their
  // cache block by a box the end cuts) set to 0 in every block, by the warpgroup's 128 threads.
  template <class Kv>
  __device__ __forceinline__ void zero_tail(const Kv& kv, int n0) const {
    for (int i = threadIdx.x & 127; i < (kTile - n0) * 8 * L::kNb; i += 128) {
      const int blk = i / ((kTile - n0) * 8), rem = i - blk * (kTile - n0) * 8;
      *reinterpret_cast<uint4*>(kv.blk(blk) + (n0 + (rem >> 3)) * 128 + ((rem & 7) << 4)) = make_uint4(0, 0, 0, 0);
    }
  }
};

}  // namespace dualops::cuda::mla

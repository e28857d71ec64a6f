// Loads of the transposed-tile wgmma MLA kernel: the Q tile of NQ rows (blocked layout of
// WtLayout), the KV copies of one warpgroup's tile chain, and the dequantization of a raw FP8
// slot (mla_load.cuh rows of Tr::kRawRow: e4m3 data, scales, bf16 RoPE part) into the
// warpgroup's blocked 16-bit KV tile.
#pragma once
#include "../common/tma.cuh"
#include "mla_load.cuh"
#include "mla_wt_layout.cuh"

namespace dualops::cuda::mla {

// q rows row0 .. row0 + NQ - 1 of request b (zero from row_end on) into the blocked Q tile.
template <class Tr, class L>
__device__ __forceinline__ void wt_load_q(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, unsigned char* sq,
                                          int b, int row0, int row_end) {
  using MT = typename Tr::MT;
  const MT* q = static_cast<const MT*>(p.q);
  const uint32_t base = smem_addr(sq);
  for (int c = threadIdx.x; c < L::kNq * Tr::kChunks; c += kThreads) {
    const int row = c / Tr::kChunks, chunk = c - row * Tr::kChunks;
    const int gr = row0 + row;
    const bool ok = gr < row_end;
    const int i = ok ? gr / t.h_q : 0, h = ok ? gr - i * t.h_q : 0;
    const MT* src = q + b * p.q_stride_b + i * p.q_stride_s + h * p.q_stride_h + chunk * 8;
    cp_async_16(base + L::q_off(row, chunk), ok ? src : q, ok ? 16u : 0u);
  }
}

// kRawTok tokens of a raw FP8 / int8 slot -> tokens tok0 .. of the warpgroup's 16-bit KV tile (e4m3 / int8 *
// scale in fp32, rounded to q's dtype, as the wgmma kernel's), by the 128 threads of the warpgroup:
// thread kPer t + s converts the kCh = 8 / kPer 16-byte output chunks 8i + kCh s .. of token t in
// every 64-dim block i (one raw read per block), and kCh of the token's 8 RoPE chunks. Unrolled,
// so a thread's raw reads are in flight together.
template <class Tr, int kPer>
__device__ __forceinline__ void wt_dequant(const unsigned char* stage, unsigned char* kv, int tok0) {
  using MT = typename Tr::MT;
  using Raw = std::conditional_t<kPer == 4, uint4, uint2>;
  static_assert(kPer == 4 || kPer == 8, "4 or 8 threads per token");
  constexpr int kCh = 8 / kPer;
  constexpr bool kV32 = Tr::kV32;
  constexpr int kBlocks = kV32 ? 8 : 7;       // 64-dim e4m3 blocks
  constexpr int kRope = kV32 ? 528 : 448;     // RoPE bytes in the raw row
  const int tid = threadIdx.x & 127, t = tid / kPer, s = tid % kPer;
  const unsigned char* row = stage + t * Tr::kRawRow;
  float sc[kBlocks];
  if constexpr (kV32) {  // fp32 scale per 128 dims
    const float4 v = *reinterpret_cast<const float4*>(row + 512);
    const float s4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) sc[j] = s4[j >> 1];
  } else {  // e8m0 exponent per 64 dims (bytes 0 .. 6; byte 7 is not a scale)
    const uint2 v = *reinterpret_cast<const uint2*>(row + 576);
    if (!e8m0_special(v.x) && !e8m0_special((v.y & 0x00ffffffu) | 0x01000000u)) {
#pragma unroll
      for (int j = 0; j < 7; ++j) sc[j] = __uint_as_float(((j < 4 ? v.x : v.y) >> ((j & 3) * 8) & 0xffu) << 23);
    } else {
#pragma unroll
      for (int j = 0; j < 7; ++j) sc[j] = e8m0_scale(((j < 4 ? v.x : v.y) >> ((j & 3) * 8)) & 0xffu);
    }
  }
  uint4 rope[kCh];
#pragma unroll
  for (int u = 0; u < kCh; ++u) rope[u] = *reinterpret_cast<const uint4*>(row + kRope + (kCh * s + u) * 16);
  Raw raw[kBlocks];
#pragma unroll
  for (int i = 0; i < kBlocks; ++i) raw[i] = *reinterpret_cast<const Raw*>(row + (8 * i + kCh * s) * 8);
  const int tok = tok0 + t;
#pragma unroll
  for (int i = 0; i < kBlocks; ++i) {
    if constexpr (kPer == 4) {
      const uint4 w = raw[i];
      *reinterpret_cast<uint4*>(kv + Tr::off(tok, 8 * i + 2 * s)) = values8_scaled<Tr>(make_uint2(w.x, w.y), sc[i]);
      *reinterpret_cast<uint4*>(kv + Tr::off(tok, 8 * i + 2 * s + 1)) = values8_scaled<Tr>(make_uint2(w.z, w.w), sc[i]);
    } else {
      *reinterpret_cast<uint4*>(kv + Tr::off(tok, 8 * i + s)) = values8_scaled<Tr>(raw[i], sc[i]);
    }
  }
#pragma unroll
  for (int u = 0; u < kCh; ++u)
    *reinterpret_cast<uint4*>(kv + Tr::off(tok, 8 * kBlocks + kCh * s + u)) = bf16x8_to<MT>(rope[u]);
}

// The KV copies of warpgroup c's chain (piece tiles n = 2j + c, chain tile j), one request piece
// at a time (begin).
// 16-bit caches: block g = kNb j + i (dims 64i .. of chain tile j) into ring slot
// (kRing0 + g) % kSlots by TMA (`tmap`: the cache as rows of d_qk 16-bit values, boxes of 64
// values x `box` tokens, box = gcd(page, 64), so a box never crosses a page), issued by the
// warpgroup's first thread; the slot's mbarrier completes when its 8 KiB have landed
// (wait_tile). A piece's first blocks go to slots kRing0 .. kSlots - 1, which the end-of-piece
// merge leaves alone (it uses the first kRing0), so the next piece's first blocks can be issued
// before the merge. A box whose tokens are past the range end, past the block table's width or
// in a block outside the cache is addressed out of bounds and arrives as zeros; a box the range
// end cuts is zeroed past the end (zero_tail).
// FP8 caches: raw part u = kParts j + q (tokens kRawTok q ..) into raw slot u % kRawBufs, kRawPer
// threads per token (cp.async); the block id of the next part is read one copy ahead.
template <class Tr, class L>
struct WtChainLoad {
  static constexpr int kParts = Tr::kDirect ? 1 : kTile / L::kRawTok;
  static_assert(Tr::kDirect || kParts % L::kRawBufs == 0, "kParts a multiple of kRawBufs (raw part u uses slot u % kRawBufs)");
  const MlaDecodeCudaParams& p;
  int c;                  // warpgroup = chain
  int r = 0, end = 0, tok0 = 0;  // request; range end; 16-bit: first token of chain tile 0, FP8: the thread's
  int total = 0;          // blocks (16-bit) or raw parts (FP8) of the chain
  int ltok = 0, lsub = 0, nid = 0;  // FP8: the thread's token and share; token_entry of its next copy
  int64_t bbytes;                   // bytes of a cache block (dense decode)
  uint32_t ring, raw;     // shared addresses of the warpgroup's ring and raw slot
  int g_next = 0;         // next block / part to copy
  // 16-bit caches: the tensor map, the warpgroup's slot mbarriers, box rows, whether this thread
  // issues the copies, the out-of-bounds-or-cache row of each box of the tile being copied, and
  // the block ids of the next tile's boxes (read a tile ahead, so that no block-table read sits
  // between a tile's first copy and the chain).
  const CUtensorMap* tmap = nullptr;
  uint32_t bars = 0;
  int box = kTile;
  bool issuer = false;
  int rows[kTile / 16];
  int next_ids[kTile / 16];

  __device__ __forceinline__ WtChainLoad(const MlaDecodeCudaParams& p_, int c_, uint32_t ring_, uint32_t raw_,
                                         const CUtensorMap* tmap_, uint32_t bars_)
      : p(p_), c(c_), ring(ring_), raw(raw_), tmap(tmap_), bars(bars_) {
    bbytes = static_cast<int64_t>(p.page_block_size) * token_bytes<Tr>();
    if constexpr (Tr::kDirect) {
      box = kv_box_rows(p.page_block_size);
      issuer = (threadIdx.x & 127) == 0;
    } else {
      ltok = (threadIdx.x & 127) / L::kRawPer;
      lsub = (threadIdx.x & 127) % L::kRawPer;
    }
  }
  // 16-bit caches: the ring slot of the piece's block g.
  static __device__ __forceinline__ int slot_of(int g) { return (L::kRing0 + g) % L::kSlots; }
  // The chain's part of request r's piece [start, end) (nt chain tiles); no copy issued yet.
  __device__ __forceinline__ void begin(int r_, int start, int end_, int nt) {
    r = r_;
    end = end_;
    g_next = 0;
    total = nt * (Tr::kDirect ? L::kNb : kParts);
    if constexpr (Tr::kDirect) {
      tok0 = start + c * kTile;
      if (issuer) read_ids(0);
    } else {
      tok0 = start + c * kTile + ltok;
      nid = token_entry<Tr::kSparse>(p, r, tok0, end);
    }
  }
  // 16-bit caches: the block ids of chain tile m's boxes into next_ids (block-table reads whose
  // values are first used when the tile's copies are issued).
  __device__ __forceinline__ void read_ids(int m) {
#pragma unroll
    for (int b = 0; b < kTile / 16; ++b)
      if (b < kTile / box) next_ids[b] = token_block_id(p, r, tok0 + 2 * m * kTile + b * box, end);
  }
  // 16-bit caches: blocks g_next .. g_end - 1 into their slots (the issuing thread; the slots'
  // earlier readers are done).
  __device__ __forceinline__ void blocks(int g_end) {
    g_end = min(g_end, total);
    if (!issuer) return;
    for (; g_next < g_end; ++g_next) {
      const int m = g_next / L::kNb, j = g_next - m * L::kNb;
      const int nbox = kTile / box;
      if (j == 0) {
#pragma unroll
        for (int b = 0; b < kTile / 16; ++b)
          if (b < nbox) rows[b] = kv_box_row_of(p, next_ids[b], tok0 + 2 * m * kTile + b * box);
        read_ids(m + 1);
      }
      const uint64_t policy = common::evict_first_policy();  // the KV stream is read once
      const int s = slot_of(g_next);
      const uint32_t bar = bars + 8 * s, dst = ring + s * Tr::kBlockBytes;
      common::mbar_expect_tx(bar, Tr::kBlockBytes);
#pragma unroll
      for (int b = 0; b < kTile / 16; ++b)
        if (b < nbox) common::tma_load_2d_hint(dst + b * box * 128, tmap, 64 * j, rows[b], bar, policy);
    }
  }
  // 16-bit caches: every thread waits for block i of chain tile j, or for all its blocks (ph: the
  // thread's parity bit per slot for the tile's use; the wait of a landed block returns at once).
  __device__ __forceinline__ void wait_block(int j, int i, uint32_t ph) const {
    const int s = slot_of(j * L::kNb + i);
    common::mbar_wait(bars + 8 * s, (ph >> s) & 1u);
  }
  __device__ __forceinline__ void wait_tile(int j, uint32_t ph) const {
#pragma unroll 1
    for (int i = 0; i < L::kNb; ++i) wait_block(j, i, ph);
  }
  // The parity bits of chain tile j's slots flipped (the slots' next use).
  __device__ __forceinline__ void next_phase(int j, uint32_t& ph) const {
#pragma unroll
    for (int i = 0; i < L::kNb; ++i) ph ^= 1u << slot_of(j * L::kNb + i);
  }
  // 16-bit caches: tokens n0 .. 63 of the current tile (past the range end, copied from their
  // cache block by a box the end cuts) set to 0 in every block, by the warpgroup's 128 threads.
  template <class Kv>
  __device__ __forceinline__ void zero_tail(const Kv& kv, int n0) const {
    for (int i = threadIdx.x & 127; i < (kTile - n0) * 8 * L::kNb; i += 128) {
      const int blk = i / ((kTile - n0) * 8), rem = i - blk * (kTile - n0) * 8;
      *reinterpret_cast<uint4*>(kv.blk(blk) + (n0 + (rem >> 3)) * 128 + ((rem & 7) << 4)) = make_uint4(0, 0, 0, 0);
    }
  }
  // FP8 caches: the next raw part into its raw slot (none past the chain).
  __device__ __forceinline__ void raw_part() {
    if (g_next >= total) return;
    const int m = g_next / kParts, q = g_next - m * kParts;
    const int tok = tok0 + 2 * m * kTile + q * L::kRawTok;
    const uint32_t dst = raw + (g_next % L::kRawBufs) * L::kRawSlot;
    if constexpr (Tr::kSparse) {
      int off, pbs;
      const unsigned char* blk = entry_block<true>(p, nid, tok, token_bytes<Tr>(), off, pbs);
      load_kv_token<Tr, L::kRawPer, true>(p, dst, ltok, lsub, blk, off, pbs);
    } else {
      load_kv_token<Tr, L::kRawPer, true>(p, dst, ltok, lsub, block_base(p, nid, bbytes), tok % p.page_block_size,
                                          p.page_block_size);
    }
    nid = token_entry<Tr::kSparse>(p, r, q + 1 < kParts ? tok + L::kRawTok : tok - q * L::kRawTok + 2 * kTile, end);
    ++g_next;
  }
};

}  // namespace dualops::cuda::mla

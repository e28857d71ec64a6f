// The producer warpgroup of the transposed-tile wgmma MLA kernel with the FP8 caches (threads
// 256 .. 383 of its CTA): it copies the cache bytes of the CTA's part of the plan into a ring of
// raw parts (16 tokens each, one bulk copy per part and cache region, completing on the part's
// mbarrier), dequantizes each part into the 16-bit tile of the MMA warpgroup that computes it
// (e4m3 * scale in fp32, rounded to q's dtype, as dequant_tile; the bf16 RoPE part converted to
// q's dtype) and hands the tiles over, so that the MMA warpgroups' chains hold no conversion and
// the copies of the next parts are in flight during the conversions.
//
// Hand-over, per MMA warpgroup c (one 16-bit tile each): its uses of the tile, in plan order,
// are the piece tiles n with n % 2 == c, then the end-of-piece merge (which keeps the chains'
// states in the tiles). For each use the producer waits for empty[c] (the last use is over: 128
// arrivals), writes the tile when it is a KV tile, and arrives on full[c]; the MMA warpgroup
// waits for full[c], uses the tile, arrives on empty[c]. The two sides alternate strictly, so
// one parity bit per barrier and side suffices.
#pragma once
#include "../common/cp_async.cuh"
#include "../common/tma.cuh"
#include "mla_piece.cuh"
#include "mla_wt_layout.cuh"

namespace dualops::cuda::mla {

// Tokens tok0 .. tok0 + 15 of a 16-bit KV tile from a raw part (WtLayout: fp8_v32 rows of 656
// bytes: 512 e4m3, 4 fp32 scales, 64 bf16; fp8_model1 16 x 576 data bytes: 448 e4m3, 64 bf16,
// then 16 x 8 e8m0 scale bytes, 255 = NaN), by the 128 producer threads, 8 per token: thread s
// of a token converts the 16-byte chunks 8i + s of every 64-dim block i. Tokens n .. 15 of the
// part (past the range end, or all when its cache block is out of range) become zeros.
template <class Tr, class L>
__device__ __forceinline__ void wt_dequant_part(const unsigned char* part, unsigned char* kv, int tok0, int n) {
  using MT = typename Tr::MT;
  constexpr bool kV32 = Tr::kFmt == kFmtV32;
  constexpr int kBlocks = kV32 ? 8 : 7;    // 64-dim e4m3 blocks
  constexpr int kRope = kV32 ? 528 : 448;  // offset of the bf16 RoPE part in a token's data
  const int tid = threadIdx.x & 127, t = tid >> 3, s = tid & 7;
  unsigned char* dst = kv + Tr::off(tok0 + t, s);  // chunk 8i + s: + i kBlockBytes (blocked layout)
  if (t >= n) {
#pragma unroll
    for (int i = 0; i <= kBlocks; ++i) *reinterpret_cast<uint4*>(dst + i * Tr::kBlockBytes) = make_uint4(0, 0, 0, 0);
    return;
  }
  const unsigned char* row = part + t * L::kRawPitch;
  float sc[kBlocks];
  if constexpr (kV32) {  // fp32 scale per 128 dims
    const float4 v = *reinterpret_cast<const float4*>(row + 512);
    const float s4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) sc[i] = s4[i >> 1];
  } else {  // e8m0 exponent per 64 dims
    const uint2 v = *reinterpret_cast<const uint2*>(part + L::kRawTok * L::kRawPitch + t * 8);
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) sc[i] = e8m0_scale(((i < 4 ? v.x : v.y) >> ((i & 3) * 8)) & 0xffu);
  }
  const uint4 rope = *reinterpret_cast<const uint4*>(row + kRope + s * 16);
  uint2 raw[kBlocks];
#pragma unroll
  for (int i = 0; i < kBlocks; ++i) raw[i] = *reinterpret_cast<const uint2*>(row + (8 * i + s) * 8);
#pragma unroll
  for (int i = 0; i < kBlocks; ++i)
    *reinterpret_cast<uint4*>(dst + i * Tr::kBlockBytes) = e4m3x8_scaled<MT>(raw[i], sc[i]);
  *reinterpret_cast<uint4*>(dst + kBlocks * Tr::kBlockBytes) = bf16x8_to<MT>(rope);
}

// A walk over the raw parts of a CTA's part of the plan, in the order they are dequantized:
// requests with tokens, their piece's tiles, kTok-token parts. next() moves to the next part
// (false past the last one): request r, first token tok, the piece's end and the end of its tiles.
template <int kTok>
struct WtPartWalk {
  int r, tok = 0, end = 0, last = 0;
  __device__ __forceinline__ bool next(const MlaDecodeTiling& t, const MlaPart& w) {
    tok += kTok;
    while (tok >= last) {
      if (++r > w.end_req) return false;
      const MlaPiece pc = mla_piece(t, w, r, 0, false);
      tok = pc.start;
      end = pc.end;
      last = pc.start + pc.ntiles * kTile;
    }
    return true;
  }
};

// The producer's copies (its first thread): part u into raw slot u % kRawSlots. A part copies its
// tokens up to the range end from their cache block (the page holds the whole part: pages are
// multiples of 16 tokens and pieces start on 64-token boundaries); its slot's valid-token count
// (0 past the block table's width or for a block out of range) goes next to the mbarriers,
// published by the mbarrier's arrival. The parts' block-table entries are read kAhead parts
// ahead by cp.async into a shared ring (bid), so that no copy waits for a global load.
template <class Tr, class L>
struct WtRawCopies {
  static constexpr int kAhead = 16;
  const MlaDecodeParams& p;
  const MlaDecodeTiling& t;
  const MlaPart& part;
  WtPartWalk<L::kRawTok> ahead, cur;  // the next part to look up, the last part copied
  int v = 0, u = 0;                   // parts looked up, parts copied

  __device__ __forceinline__ WtRawCopies(const MlaDecodeParams& p_, const MlaDecodeTiling& t_, const MlaPart& w)
      : p(p_), t(t_), part(w) {
    ahead.r = cur.r = max(w.begin_req, 0) - 1;
  }
  // Column of the block table holding a part's tokens, or -1 when the part is past its piece's end
  // or past the table's width.
  __device__ __forceinline__ int column(const WtPartWalk<L::kRawTok>& x) const {
    const int col = x.tok / p.page_block_size;
    return x.tok < x.end && col < p.max_blocks ? col : -1;
  }
  // The block-table entry of the next part into bid[v % (2 kAhead)] (one cp.async group, empty past the end).
  __device__ __forceinline__ void look_up(int* bid) {
    if (ahead.next(t, part)) {
      const int col = column(ahead);
      if (col >= 0)
        common::cp_async_4(smem_addr(bid + v % (2 * kAhead)),
                           static_cast<const int*>(p.block_table) + ahead.r * p.block_table_stride + col, 4);
    }
    cp_async_commit();
    ++v;
  }
  __device__ __forceinline__ void start(int* bid) {
    for (int i = 0; i < kAhead; ++i) look_up(bid);
  }
  __device__ __forceinline__ void issue(unsigned char* raw, uint32_t bars, int* nvalid, int* bid) {
    if (!cur.next(t, part)) return;
    cp_async_wait<kAhead - 1>();  // this part's look-up (kAhead - 1 later ones may be in flight)
    const int col = column(cur);
    const int blk = col >= 0 ? bid[u % (2 * kAhead)] : -1;
    look_up(bid);  // (into the other half of bid's ring)
    const int s = u % L::kRawSlots;
    const int n = blk >= 0 && blk < p.num_blocks ? min(cur.end - cur.tok, L::kRawTok) : 0;
    const uint32_t bar = bars + 8 * s, dst = smem_addr(raw + s * L::kRawPart);
    const int64_t pbs = p.page_block_size, off = cur.tok % p.page_block_size;
    const unsigned char* base = static_cast<const unsigned char*>(p.kv_cache) + max(blk, 0) * pbs * token_bytes<Tr>();
    nvalid[s] = n;
    if constexpr (Tr::kFmt == kFmtV32) {
      common::mbar_expect_tx(bar, n * 656);
      if (n > 0) common::bulk_load(dst, base + off * 656, n * 656, bar);
    } else {  // model1 block: [pbs x 576 data][pbs x 8 scales]; scales of an even token count (in the block)
      const int ns = (n + 1) & ~1;
      common::mbar_expect_tx(bar, n * 576 + ns * 8);
      if (n > 0) {
        common::bulk_load(dst, base + off * 576, n * 576, bar);
        common::bulk_load(dst + L::kRawTok * 576, base + pbs * 576 + off * 8, ns * 8, bar);
      }
    }
    ++u;
  }
};

// The producer warpgroup's loop (see the top of the file). smem: the CTA's shared memory.
template <class Tr, class L>
__device__ __forceinline__ void wt_produce(const MlaDecodeParams& p, const MlaDecodeTiling& t, const MlaPart& part,
                                           unsigned char* smem) {
  const int tid = threadIdx.x & 127;
  const uint32_t full = smem_addr(smem + L::kOffBar), empty = full + 16, bars = full + 32;
  int* nvalid = reinterpret_cast<int*>(smem + L::kOffBar + 32 + 8 * 16);
  int* bid = nvalid + 16;
  unsigned char* raw = smem + L::kOffRaw;
  WtRawCopies<Tr, L> copies(p, t, part);
  if (tid == 0) {
    copies.start(bid);
    for (int i = 0; i < L::kRawSlots; ++i) copies.issue(raw, bars, nvalid, bid);
  }
  uint32_t ephase = 3u;  // parity bit per MMA warpgroup (a fresh mbarrier's preceding phase counts as complete)
  int u = 0;             // parts dequantized
  const auto take = [&](int c) {  // the next use of tile c may start
    common::mbar_wait(empty + 8 * c, (ephase >> c) & 1u);
    ephase ^= 1u << c;
  };
  for (int r = max(part.begin_req, 0); r <= part.end_req; ++r) {
    const MlaPiece pc = mla_piece(t, part, r, 0, false);
#pragma unroll 1
    for (int n = 0; n < pc.ntiles; ++n) {
      const int c = n & 1;
      unsigned char* tile = smem + L::kOffKv + c * L::kRingBytes;
      take(c);
#pragma unroll 1
      for (int q = 0; q < kTile / L::kRawTok; ++q, ++u) {
        const int s = u % L::kRawSlots;
        common::mbar_wait(bars + 8 * s, (u / L::kRawSlots) & 1);
        wt_dequant_part<Tr, L>(raw + s * L::kRawPart, tile, q * L::kRawTok, nvalid[s]);
        if (q == kTile / L::kRawTok - 1) fence_proxy_async_smem();  // the tile, for the wgmma (async proxy)
        named_barrier(L::kBarProd, 128);  // every producer thread is done with slot s (and the tile)
        if (tid == 0) {
          copies.issue(raw, bars, nvalid, bid);
          if (q == kTile / L::kRawTok - 1) common::mbar_arrive(full + 8 * c);
        }
      }
    }
#pragma unroll 1
    for (int c = 0; c < 2; ++c) {  // the merge's use of both tiles
      take(c);
      if (tid == 0) common::mbar_arrive(full + 8 * c);
    }
  }
}

}  // namespace dualops::cuda::mla

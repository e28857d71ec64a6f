// FP8 KV tiles of the wgmma MLA kernel: warpgroup 1 copies a tile's raw bytes with cp.async into
// the KV buffer it will fill (no separate staging tile: the kernel's shared memory holds Q and two
// 16-bit KV tiles); they are dequantized in place to the blocked 128-byte-swizzled layout of
// q's dtype while the tensor cores run P V of the previous tile (serial loop: by warpgroup 1;
// pipelined loop, mla_wg_pipe.cuh: each warpgroup its own value blocks).
//
// In-buffer staging of one tile (64 tokens; block j = 8 KiB = dims 64j .. 64j + 63 once dequantized):
//  * the e4m3 bytes of dims 64j .. 64j + 63 (4 KiB) in the upper half of block j, for the
//    kFp8Blocks FP8 blocks (v32: 8, model1: 7). 16-byte chunk s (dims 64j + 16s ..) of token t
//    sits at (s & 1) * 2048 + (2t + (s >> 1)) * 16, so that thread 2t + h reads its 32 bytes
//    (chunks 2h, 2h + 1) with two conflict-free 16-byte loads;
//  * the token's scales (v32: 4 fp32 per 128 dims; model1: 7 e8m0 bytes and a pad) at t * 16 of
//    block 0 (its lower half, free until block 0 is written);
//  * the RoPE part (64 bf16 values) straight into its final swizzled block kFp8Blocks (for fp16
//    q converted in place).
// Tokens past the range end or with a block id out of range are zero-filled (dequantized to 0).
#pragma once
#include "../common/wgmma.cuh"
#include "mla_load.cuh"

namespace dualops::cuda::mla {

constexpr int kWgLoaders = kThreads / 2;  // warpgroup 1
constexpr int kWgLoadBarrier = 5;         // named barrier of warpgroup 1

template <class Tr>
struct Fp8Tile {
  static constexpr int kFp8Blocks = Tr::kV32 ? 8 : 7;  // e4m3 (int8_v32: int8) dims / 64
  static constexpr int kRopeSrc = Tr::kV32 ? 528 : 448;  // RoPE bytes in the token's data row
  static constexpr int kDataRow = Tr::kV32 ? 656 : 576;  // data row pitch in a cache block
  static constexpr int kTokenBytes = Tr::kV32 ? 656 : 584;
  static constexpr int kRawHalf = Tr::kBlockBytes / 2;
  static __device__ __forceinline__ uint32_t raw_off(int j, int t, int s) {
    return static_cast<uint32_t>(j * Tr::kBlockBytes + kRawHalf + (s & 1) * 2048 + (2 * t + (s >> 1)) * 16);
  }
};

// Where token t's FP8 row and scales are (row nullptr: zero fill), for load_kv_raw_part.
struct Fp8Src {
  const unsigned char* row;
  const unsigned char* sc;
};

template <class Tr>
__device__ __forceinline__ Fp8Src fp8_src(const MlaDecodeCudaParams& p, int r, int tok, int end) {
  using F = Fp8Tile<Tr>;
  int off, pbs;
  const unsigned char* blk = token_block<Tr::kSparse>(p, r, tok, end, F::kTokenBytes, off, pbs);
  if (!blk) return {nullptr, nullptr};
  const unsigned char* sc = Tr::kV32 ? blk + static_cast<int64_t>(off) * F::kDataRow + 512
                                                : blk + static_cast<int64_t>(pbs) * 576 + off * 8;
  return {blk + static_cast<int64_t>(off) * F::kDataRow, sc};
}

// Part kPart of token t's raw bytes (thread h = 0, 1 of the token) into KV buffer `base` (in-buffer
// staging): part 0 = the e4m3 bytes of blocks 0 .. 3 and the scales, part 1 = the other e4m3
// blocks and the RoPE part. Not committed.
template <class Tr, int kPart>
__device__ __forceinline__ void load_kv_raw_part(const MlaDecodeCudaParams& p, uint32_t base, int t, int h, Fp8Src s) {
  using F = Fp8Tile<Tr>;
  const unsigned char* any = static_cast<const unsigned char*>(p.kv_cache);
  const uint32_t n = s.row ? 16u : 0u;
  constexpr int c0 = kPart ? 16 : 0, c1 = kPart ? F::kFp8Blocks * 4 : 16;
#pragma unroll
  for (int ci = c0 + h; ci < c1; ci += 2)  // chunk ci: block ci / 4, 16-byte step ci % 4
    cp_async_16(base + F::raw_off(ci >> 2, t, ci & 3), n ? s.row + ci * 16 : any, n);
  if constexpr (kPart == 1) {
#pragma unroll
    for (int k = h; k < 8; k += 2)
      cp_async_16(base + Tr::off(t, 8 * F::kFp8Blocks + k), n ? s.row + F::kRopeSrc + k * 16 : any, n);
  } else if (h == 0) {
    if constexpr (Tr::kV32) {
      cp_async_16(base + t * 16, n ? s.sc : any, n);
    } else {  // model1: per block [pbs x 576 data][pbs x 8 scales]
      cp_async_8(base + t * 16, n ? s.sc : any, n ? 8u : 0u);
    }
  }
}

// Raw bytes of tokens tile0 .. tile0 + 63 of request r into KV buffer dst (in-buffer staging),
// by the 128 threads of warpgroup 1 (tid 0 .. 127, two per token). Not waited for.
template <class Tr>
__device__ __forceinline__ void load_kv_raw_wg(const MlaDecodeCudaParams& p, unsigned char* dst, int r, int tile0,
                                               int end, int tid) {
  const int t = tid >> 1, h = tid & 1;
  const Fp8Src s = fp8_src<Tr>(p, r, tile0 + t, end);
  load_kv_raw_part<Tr, 0>(p, smem_addr(dst), t, h, s);
  load_kv_raw_part<Tr, 1>(p, smem_addr(dst), t, h, s);
}

// Token t's scales (read from block 0's lower half before block 0 is written): v32 4 fp32 (one
// per two blocks), model1 7 e8m0 bytes (one per block), kept as read.
struct Fp8Scales {
  uint4 w;
};
template <class Tr>
__device__ __forceinline__ Fp8Scales read_fp8_scales(const unsigned char* kv, int t) {
  if constexpr (Tr::kV32) {
    return {*reinterpret_cast<const uint4*>(kv + t * 16)};
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(kv + t * 16);
    return {make_uint4(v.x, v.y, 0u, 0u)};
  }
}
// The scale of e4m3 block j (j a compile-time constant after unrolling).
template <class Tr>
__device__ __forceinline__ float fp8_scale(const Fp8Scales& s, int j) {
  const uint32_t w[4] = {s.w.x, s.w.y, s.w.z, s.w.w};
  if constexpr (Tr::kV32) {
    return __uint_as_float(w[j >> 1]);
  } else {
    return e8m0_scale((w[j >> 2] >> ((j & 3) * 8)) & 0xffu);
  }
}

// Blocks j0 .. j1 - 1 of a landed raw tile dequantized in place (e4m3 or int8 * scale in fp32, rounded to
// q's dtype); with kRope, the RoPE part converted to q's dtype
// too, by the 128 threads of one warpgroup (named barrier kBar). Thread 2t + h writes 16-byte
// chunks 4h .. 4h + 3 of token t in every block. Every raw byte of a block is read (by the whole
// warpgroup) before the block is written: block by block, or (kBatch) all blocks' bytes into
// registers first, one barrier.
template <class Tr, int j0, int j1, bool kRope, int kBar = kWgLoadBarrier, bool kBatch = false>
__device__ __forceinline__ void dequant_blocks(unsigned char* kv, int t, int h, const Fp8Scales& sc) {
  using MT = typename Tr::MT;
  using F = Fp8Tile<Tr>;
  constexpr int kN = kBatch ? j1 - j0 : 1;
  uint4 a[kN], b[kN];
  auto read = [&](int j, int i) {
    a[i] = *reinterpret_cast<const uint4*>(kv + F::raw_off(j, t, 2 * h));
    b[i] = *reinterpret_cast<const uint4*>(kv + F::raw_off(j, t, 2 * h + 1));
  };
  auto write = [&](int j, int i) {
    const float scale = fp8_scale<Tr>(sc, j);
    const uint2 raw[4] = {make_uint2(a[i].x, a[i].y), make_uint2(a[i].z, a[i].w), make_uint2(b[i].x, b[i].y),
                          make_uint2(b[i].z, b[i].w)};
#pragma unroll
    for (int k = 0; k < 4; ++k)
      *reinterpret_cast<uint4*>(kv + Tr::off(t, 8 * j + 4 * h + k)) = values8_scaled<Tr>(raw[k], scale);
  };
  if constexpr (kBatch) {
#pragma unroll
    for (int j = j0; j < j1; ++j) read(j, j - j0);
    named_barrier(kBar, kWgLoaders);  // the blocks' outputs cover their raw halves (block 0: the scales)
#pragma unroll
    for (int j = j0; j < j1; ++j) write(j, j - j0);
  } else {
#pragma unroll
    for (int j = j0; j < j1; ++j) {
      read(j, 0);
      named_barrier(kBar, kWgLoaders);  // block j's output covers its raw half (block 0: the scales)
      write(j, 0);
    }
  }
  if constexpr (kRope && !std::is_same_v<MT, __nv_bfloat16>) {  // the RoPE part is bf16 in the cache
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint4* w = reinterpret_cast<uint4*>(kv + Tr::off(t, 8 * F::kFp8Blocks + 4 * h + k));
      *w = bf16x8_to<MT>(*w);
    }
  }
}

// Warpgroup 1, once its raw copies of `kv` are complete (cp.async.wait by each thread): the whole
// tile dequantized in place, then made visible to the async proxy.
template <class Tr>
__device__ __forceinline__ void dequant_kv_wg(unsigned char* kv, int tid) {
  const int t = tid >> 1, h = tid & 1;
  named_barrier(kWgLoadBarrier, kWgLoaders);  // every loader's copies landed
  dequant_blocks<Tr, 0, Fp8Tile<Tr>::kFp8Blocks, true>(kv, t, h, read_fp8_scales<Tr>(kv, t));
  common::fence_proxy_async_smem();  // the wgmma reads the tile through the async proxy
}

}  // namespace dualops::cuda::mla

// Loads of one MLA CTA: the 64-row q tile, and one 64-token KV tile of a request, either copied
// as it is (16-bit cache of q's dtype) or staged raw (FP8 / int8 formats) and dequantized in shared
// memory to q's dtype. Tokens past the range end and tokens whose block id is outside the cache
// are zero-filled and never read (their slots may hold anything, NaN included).
#pragma once
#include <climits>

#include "../common/cp_async.cuh"
#include "mla_config.cuh"

namespace dualops::cuda::mla {

// q rows row0 .. row0 + 63 of request b (row = query token * h_q + head; zeros from row_end on)
// into the swizzled Q tile.
template <class Tr>
__device__ __forceinline__ void load_q(const MlaDecodeCudaParams& p, unsigned char* sq, int b, int row0, int row_end,
                                       int h_q) {
  using MT = typename Tr::MT;
  const MT* q = static_cast<const MT*>(p.q);
  const uint32_t base = smem_addr(sq);
  for (int c = threadIdx.x; c < kRows * Tr::kChunks; c += kThreads) {
    const int row = c / Tr::kChunks, chunk = c - row * Tr::kChunks;
    const int gr = row0 + row;
    const bool ok = gr < row_end;
    const int i = ok ? gr / h_q : 0, h = ok ? gr - i * h_q : 0;
    const MT* src = q + b * p.q_stride_b + i * p.q_stride_s + h * p.q_stride_h + chunk * 8;
    cp_async_16(base + Tr::off(row, chunk), ok ? src : q, ok ? 16u : 0u);
  }
}

// Block id of token `tok` of request r (a block-table read), or -1 when the token is past `end`
// or past the block table's width; block_base checks the id against the cache.
__device__ __forceinline__ int token_block_id(const MlaDecodeCudaParams& p, int r, int tok, int end) {
  if (tok >= end) return -1;
  const int col = tok / p.page_block_size;
  if (col >= p.max_blocks) return -1;  // past the block table's width
  return static_cast<const int*>(p.block_table)[r * p.block_table_stride + col];
}
__device__ __forceinline__ const unsigned char* block_base(const MlaDecodeCudaParams& p, int blk, int64_t block_bytes) {
  if (blk < 0 || blk >= p.num_blocks) return nullptr;
  return static_cast<const unsigned char*>(p.kv_cache) + blk * block_bytes;
}

// Where token `tok` of key list r is (dense: block-table row r; sparse: compacted list r, see
// mla_piece.cuh), in two steps so that a loader can read the first one copy ahead:
// token_entry, the list's word for the token (dense: its block id, or -1 past `end` or past the
// block table's width; sparse: the list entry, or kNoEntry past `end`); entry_block, the base of
// the token's cache block (nullptr: zero fill, for -1 / kNoEntry or a block id outside the
// cache), its offset in the block and the block's page size (the extra pool has its own).
// token_bytes: bytes of one cached token. token_block: both.
constexpr int kNoEntry = INT_MIN;
template <bool kSparse>
__device__ __forceinline__ int token_entry(const MlaDecodeCudaParams& p, int r, int tok, int end) {
  if constexpr (kSparse) {
    return tok < end ? static_cast<const int*>(p.key_rows)[static_cast<int64_t>(r) * key_list_cols(p) + tok] : kNoEntry;
  } else {
    return token_block_id(p, r, tok, end);
  }
}
template <bool kSparse>
__device__ __forceinline__ const unsigned char* entry_block(const MlaDecodeCudaParams& p, int entry, int tok,
                                                            int64_t token_bytes, int& off, int& pbs) {
  pbs = p.page_block_size;
  if constexpr (kSparse) {
    off = 0;
    if (entry == kNoEntry) return nullptr;
    const int row = entry < 0 ? ~entry : entry;
    if (entry < 0) pbs = p.extra_page_block_size;
    const int blk = row / pbs;
    off = row - blk * pbs;
    return static_cast<const unsigned char*>(entry < 0 ? p.extra_kv_cache : p.kv_cache) + blk * (pbs * token_bytes);
  } else {
    off = tok % pbs;
    return block_base(p, entry, pbs * token_bytes);
  }
}
template <bool kSparse>
__device__ __forceinline__ const unsigned char* token_block(const MlaDecodeCudaParams& p, int r, int tok, int end,
                                                            int64_t token_bytes, int& off, int& pbs) {
  return entry_block<kSparse>(p, token_entry<kSparse>(p, r, tok, end), tok, token_bytes, off, pbs);
}

// Bytes of one cache token per format (16-bit: d_qk values; v32: 656; model1: 576 data + 8 scales).
template <class Tr>
__device__ __forceinline__ constexpr int64_t token_bytes() {
  return Tr::kDirect ? Tr::kRowBytes : Tr::kV32 ? 656 : 584;
}

// TMA copies of 16-bit tiles (`wgmma_t`, the `wgmma` seesaw loop): the cache as a tensor of rows
// of d_qk values (row = block id * page + in-block offset), read as boxes of 64 values x
// kv_box_rows(page) tokens (gcd(page, 64): a box never crosses a page; pages are multiples of 16).
__host__ __device__ __forceinline__ int kv_box_rows(int page) { return page % 64 == 0 ? 64 : page % 32 == 0 ? 32 : 16; }
// Tensor row of the box starting at token `tok` of request r; past the range end, past the block
// table's width or in a block outside the cache: a row out of bounds (the box arrives as zeros).
// kv_box_row_of: the same from the token's block id (token_block_id), read beforehand.
__device__ __forceinline__ int kv_box_row_of(const MlaDecodeCudaParams& p, int blk, int tok) {
  return blk >= 0 && blk < p.num_blocks ? blk * p.page_block_size + tok % p.page_block_size : -kTile;
}
__device__ __forceinline__ int kv_box_row(const MlaDecodeCudaParams& p, int r, int tok, int end) {
  return kv_box_row_of(p, token_block_id(p, r, tok, end), tok);
}

// Row `token` of a tile from cache block `blk` (nullptr: zero fill) of page size `pbs`, in-block offset `off`, by the
// kPer threads sub = 0 .. kPer - 1 of the token: 16-bit rows into the swizzled tile, FP8 rows raw
// into a staging tile (rows of Tr::kRawRow). kStream: the 16-byte copies with the evict-first L2
// policy (a request's tiles read by one CTA only: the wgmma_t kernel).
template <class Tr, int kPer, bool kStream = false>
__device__ __forceinline__ void load_kv_token(const MlaDecodeCudaParams& p, uint32_t base, int token, int sub,
                                              const unsigned char* blk, int off, int pbs) {
  auto copy16 = [](uint32_t dst, const void* src, uint32_t n) {
    if constexpr (kStream) {
      common::cp_async_16(dst, src, n);
    } else {
      mla::cp_async_16(dst, src, n);
    }
  };
  const unsigned char* any = static_cast<const unsigned char*>(p.kv_cache);
  const uint32_t n = blk ? 16u : 0u;
  if constexpr (Tr::kDirect) {
    const unsigned char* src = blk ? blk + static_cast<int64_t>(off) * Tr::kRowBytes : any;
#pragma unroll
    for (int chunk = sub; chunk < Tr::kChunks; chunk += kPer)
      copy16(base + Tr::off(token, chunk), src + (n ? chunk * 16 : 0), n);
  } else if constexpr (Tr::kV32) {
    const unsigned char* src = blk ? blk + static_cast<int64_t>(off) * 656 : any;
    for (int chunk = sub; chunk < 41; chunk += kPer)
      copy16(base + token * Tr::kRawRow + chunk * 16, src + (n ? chunk * 16 : 0), n);
  } else {  // model1: per block [pbs x 576 data][pbs x 8 scales]
    const unsigned char* data = blk ? blk + static_cast<int64_t>(off) * 576 : nullptr;
#pragma unroll
    for (int chunk = sub; chunk < 36; chunk += kPer)
      copy16(base + token * Tr::kRawRow + chunk * 16, n ? data + chunk * 16 : any, n);
    if (sub == 0) {
      const unsigned char* sc = blk ? blk + static_cast<int64_t>(pbs) * 576 + off * 8 : any;
      cp_async_8(base + token * Tr::kRawRow + 576, sc, n ? 8u : 0u);
    }
  }
}

// 16-bit cache row of token `tok` of request r: its address in `src` and 16 (bytes per copy),
// or the cache base and 0 (zero fill) when the token is past `end` or its block is out of range.
template <class Tr>
__device__ __forceinline__ uint32_t kv_row_src(const MlaDecodeCudaParams& p, int r, int tok, int end,
                                               const unsigned char*& src) {
  int off, pbs;
  const unsigned char* blk = token_block<Tr::kSparse>(p, r, tok, end, Tr::kRowBytes, off, pbs);
  src = blk ? blk + static_cast<int64_t>(off) * Tr::kRowBytes : static_cast<const unsigned char*>(p.kv_cache);
  return blk ? 16u : 0u;
}

// 16-byte chunks chunk0 + sub, chunk0 + sub + kPer, .. < chunk1 of one token's 16-bit row.
template <class Tr, int kPer>
__device__ __forceinline__ void copy_kv_row(uint32_t base, int token, int sub, const unsigned char* src, uint32_t n,
                                            int chunk0, int chunk1) {
#pragma unroll
  for (int chunk = chunk0 + sub; chunk < chunk1; chunk += kPer)
    cp_async_16(base + Tr::off(token, chunk), src + (n ? chunk * 16 : 0), n);
}

// Tile of tokens tile0 .. tile0 + 63 of request r, by kLoaders threads (tid: 0 .. kLoaders - 1;
// 4 per token for the whole CTA).
template <class Tr, int kLoaders = kThreads>
__device__ __forceinline__ void load_kv_tile(const MlaDecodeCudaParams& p, unsigned char* dst, int r, int tile0,
                                             int end, unsigned tid = threadIdx.x) {
  constexpr int kPer = kLoaders / kTile;  // threads per token
  static_assert(kPer * kTile == kLoaders && (kPer == 2 || kPer == 4), "2 or 4 threads per token");
  const int token = static_cast<int>(tid >> (kPer == 4 ? 2 : 1)), sub = static_cast<int>(tid & (kPer - 1));
  int off, pbs;
  const unsigned char* blk = token_block<Tr::kSparse>(p, r, tile0 + token, end, token_bytes<Tr>(), off, pbs);
  load_kv_token<Tr, kPer>(p, smem_addr(dst), token, sub, blk, off, pbs);
}

template <typename MT>
__device__ __forceinline__ uint4 bf16x8_to(uint4 v) {
  if constexpr (std::is_same_v<MT, __nv_bfloat16>) {
    return v;
  } else {
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = bf16x2_to_float2(w[k]);
      w[k] = pack2<MT>(f.x, f.y);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// 8 e4m3 values times a scale -> 8 values of MT (16 bytes).
template <typename MT>
__device__ __forceinline__ uint4 e4m3x8_scaled(uint2 raw, float s) {
  uint32_t w[4];
  const uint32_t in[2] = {raw.x, raw.y};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = e4m3x2_to_float2(static_cast<uint16_t>(in[k >> 1] >> ((k & 1) * 16)));
    w[k] = pack2<MT>(f.x * s, f.y * s);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// 8 int8 values times a scale -> 8 values of MT (16 bytes).
template <typename MT>
__device__ __forceinline__ uint4 s8x8_scaled(uint2 raw, float s) {
  const float4 a = s8x4_to_float4(raw.x), b = s8x4_to_float4(raw.y);
  return make_uint4(pack2<MT>(a.x * s, a.y * s), pack2<MT>(a.z * s, a.w * s), pack2<MT>(b.x * s, b.y * s),
                    pack2<MT>(b.z * s, b.w * s));
}

// 8 quantized values of a cache of format Tr::kFmt (int8_v32: int8, else e4m3) times their
// tile's scale, in fp32, rounded to q's dtype: 16 bytes of a 16-bit KV tile.
template <class Tr>
__device__ __forceinline__ uint4 values8_scaled(uint2 raw, float s) {
  if constexpr (Tr::kFmt == kFmtI8V32) {
    return s8x8_scaled<typename Tr::MT>(raw, s);
  } else {
    return e4m3x8_scaled<typename Tr::MT>(raw, s);
  }
}

// Whether one of the 4 e8m0 bytes of w is 0 or 255, the two codes whose value is not the float
// with bits e << 23 (2^-127 is subnormal; 255 is NaN): a zero byte of w or of ~w.
__device__ __forceinline__ bool e8m0_special(uint32_t w) {
  return (((w - 0x01010101u) & ~w) | ((~w - 0x01010101u) & w)) & 0x80808080u;
}

// e8m0 exponent byte -> 2^(e - 127); 255 is NaN.
__device__ __forceinline__ float e8m0_scale(uint32_t e) {
  if (e == 255u) return __uint_as_float(0x7fc00000u);
  if (e == 0u) return __uint_as_float(0x00400000u);
  return __uint_as_float(e << 23);
}

}  // namespace dualops::cuda::mla

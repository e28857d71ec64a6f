// Compile-time shape of one MLA decode kernel variant: q / MMA dtype, cache format, head dim,
// and the shared-memory layout of its CTA (docs/mla_decode_cuda.md "Shared memory").
#pragma once
#include <dualops/params.h>
#include <dualops/tiling.h>

#include "mla_primitives.cuh"

namespace dualops::cuda::mla {

enum KvFormat : int {
  kFmtBf16 = MlaKvFormat::kBf16,
  kFmtV32 = MlaKvFormat::kFp8V32,
  kFmtModel1 = MlaKvFormat::kFp8Model1,
  kFmtI8V32 = MlaKvFormat::kInt8V32
};
// The split kernel of a call (MlaDecodeCudaParams::kernel, chosen by the plan glue): wgmma (every
// format) or the transposed-tile wgmma kernel (every format, at most 32 q rows); wgmma_seesaw: the
// wgmma kernel with the seesaw tile loop (16-bit caches).
enum KernelKind : int {
  kKernelWgmma = MlaCudaKernel::kWgmma,
  kKernelWgmmaT = MlaCudaKernel::kWgmmaT,
  kKernelWgmmaSeesaw = MlaCudaKernel::kWgmmaSeesaw
};

constexpr int kThreads = 256;          // 8 warps: two warpgroups of 4 warps (warp g: q rows 16g .. 16g + 15)
constexpr int kRows = 64;              // q rows of one CTA (the plan's 64-row m-block)
constexpr int kTile = 64;              // KV tokens per tile (K = whole latent row, V = first 512 dims)
constexpr int kDv = 512;               // value dims
constexpr int kHeaderInts = sizeof(MlaDecodeTiling) / 4;  // packed plan: header, parts, num_splits
constexpr int kPRowBytes = kTile * 2;  // P tile rows (16-bit)
// The wgmma kernel's hand-off mbarriers (Traits::kOffHand + 8i, common::MbarHandoffs): a tile's
// softmax (pipelined loop; P_A of the seesaw loop), P_B of the seesaw loop, the CTA barrier of a
// piece's start and of the epilogue's row sums, and the pipelined loop's landed tile (its flag)
// and FP8 scales read.
constexpr int kHandSoftmax = 0, kHandPB = 1, kHandCta = 2, kHandTile = 3, kHandScales = 4, kNumHand = 5;

// Sparse decode's key lists (p.key_rows, written by mla_sparse_rows_kernel): list kr = b * s_q + i
// of query token i of request b holds key_list_cols entries from kr * key_list_cols; the lists'
// lengths follow all lists, from key_list_lengths. The split grid's x runs over
// sparse_row_blocks (query token, block of 64 heads) pairs (mla_row0 in mla_piece.cuh).
__host__ __device__ __forceinline__ int key_list_cols(const MlaDecodeCudaParams& p) { return p.topk + p.extra_topk; }
__host__ __device__ __forceinline__ int64_t key_list_lengths(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t) {
  return static_cast<int64_t>(t.batch) * t.s_q * key_list_cols(p);
}
__host__ __device__ __forceinline__ int sparse_heads_blocks(const MlaDecodeTiling& t) {
  return (t.h_q + kRows - 1) / kRows;
}
__host__ __device__ __forceinline__ int sparse_row_blocks(const MlaDecodeTiling& t) {
  return t.s_q * sparse_heads_blocks(t);
}

// SPARSE: the variant of sparse decode (index lists compacted by mla_sparse_rows_kernel, read
// through p.key_rows): the wgmma kernel's pipelined / serial loops and, for FP8 caches, the
// transposed-tile kernel (its KIND is kKernelWgmma: the same tile layout).
template <typename MT_, int FMT, int D_, int KIND = kKernelWgmma, bool SPARSE = false>
struct Traits {
  using MT = MT_;                             // q dtype = MMA input dtype
  static constexpr bool kSparse = SPARSE;
  static constexpr int kFmt = FMT;
  static constexpr int D = D_;                // d_qk (576 or 512)
  static constexpr int kChunks = D / 8;       // 16-byte chunks of a 16-bit latent row
  static constexpr int kRowBytes = D * 2;     // a multiple of 128: rows swizzle by row % 8
  static constexpr bool kDirect = FMT == kFmtBf16;  // cache rows copied as they are (same dtype as q)
  // The 656-byte v32 token: 512 values (fp8_v32 e4m3, int8_v32 int8) | 4 fp32 scales | 64 bf16 RoPE.
  static constexpr bool kV32 = FMT == kFmtV32 || FMT == kFmtI8V32;
  // Q and KV tiles as D / 64 blocks of [64 rows x 64 values] (8 KB each, 128-byte swizzle,
  // 1024-byte aligned), the canonical wgmma operand layout.
  static constexpr int kBlockBytes = kRows * 128;
  // Raw staging row of a quantized token: v32 656 B; model1 576 data + 8 scale bytes, padded to 592.
  static constexpr int kRawRow = kV32 ? 656 : 592;
  static constexpr int kTileBytes = kTile * kRowBytes;
  static constexpr int kQBytes = kRows * kRowBytes;
  // Layout: Q tile | two KV tiles | P tile(s) | row reductions (max, sum) for 2 halves. An FP8
  // tile's raw bytes are staged inside the KV buffer they dequantize into (mla_wg_load.cuh).
  static constexpr int kOffKv = kQBytes;
  static constexpr int kOffP = kOffKv + 2 * kTileBytes;
  // P goes to the MMA rounded once to q's 16-bit type, as every production kernel does
  // (docs/parity.md budgets that rounding). Tile loops of the wgmma kernel: the seesaw loop
  // (wgmma_seesaw, 16-bit caches, mla_wg_seesaw.cuh: one P tile handed between the warpgroups);
  // else with bf16 q the pipelined loop, for every cache format (mla_wg_pipe.cuh), whose P tiles
  // of two consecutive tiles live at once: in the KV tiles' RoPE blocks (d_qk 576: dead once S is
  // computed) or in two P tiles; fp16 q the serial loop.
  static constexpr bool kWgSeesaw = KIND == kKernelWgmmaSeesaw;
  static constexpr bool kWgPipe = !kWgSeesaw && !std::is_same_v<MT_, __half>;
  static constexpr bool kPInRope = kWgPipe && D == 576;
  // Where a P tile sits in a KV tile's RoPE columns (block 8 of the wgmma layout).
  static constexpr int kRopeOff = (kDv / 64) * kBlockBytes;
  static constexpr int kNumPTiles = !kWgPipe ? 1 : kPInRope ? 0 : 2;
  static constexpr int kOffRed = kOffP + kNumPTiles * kRows * kPRowBytes;
  // two ints (pipelined loop) or four mbarriers and each warpgroup's TMA box rows of a pair's two
  // tiles (seesaw loop)
  static constexpr int kOffFlags = kOffRed + 4 * kRows * 4;
  // the hand-off mbarriers (kHandSoftmax ..)
  static constexpr int kOffHand = kOffFlags + (kWgSeesaw ? 32 + 64 : 16);
  static constexpr int kSmemBytes = kOffHand + 8 * kNumHand;
  static_assert(kRowBytes % 128 == 0, "swizzle needs 128-byte rows");

  // Byte offset of 16-byte chunk `chunk` of row `row` (q row or token) in a Q / KV tile.
  static __device__ __forceinline__ uint32_t off(int row, int chunk) {
    return static_cast<uint32_t>((chunk >> 3) * kBlockBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
  }
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA");
  static_assert(!kV32 || D == 576, "fp8_v32 and int8_v32 are d_qk 576");
  static_assert(!kWgSeesaw || kDirect, "the seesaw loop takes 16-bit caches");
  static_assert(!SPARSE || KIND == kKernelWgmma, "sparse decode: the wgmma kernel's loops (or wgmma_t)");
  static_assert(FMT != kFmtModel1 || D == 512, "fp8_model1 is d_qk 512");
};

// The planner checks a GPU's opt-in shared memory against the largest layout of any kernel
// (heuristics/cuda.py MLA_CUDA_WGMMA_SMEM_BYTES; mla_launch.cuh static_asserts it).

}  // namespace dualops::cuda::mla

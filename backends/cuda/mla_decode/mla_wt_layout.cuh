// Shared-memory layout of the transposed-tile wgmma MLA kernel (mla_wt_kernel.cuh) for NQ q rows
// (8, 16 or 32): the blocked 128-byte-swizzled Q tile (D / 64 blocks of NQ rows x 64 values), the
// KV blocks, the P^T tiles, the S^T partial sums of the two warpgroups and the per-warp column
// reductions. 16-bit caches: a ring of kSlots 8 KiB block slots (64 tokens x 64 dims, copied as
// they are), so that up to kSlots - kNb blocks of the next tiles are in flight while a tile is
// computed. FP8 caches: one 16-bit KV tile and a ring of kStages raw staging tiles (mla_load.cuh
// rows: token * kRawRow).
#pragma once
#include "mla_config.cuh"

namespace dualops::cuda::mla {

template <class Tr, int NQ>
struct WtLayout {
  static_assert(Tr::kWg, "blocked (wgmma) KV tile layout");
  static_assert(NQ == 8 || NQ == 16 || NQ == 32, "8, 16 or 32 q rows");
  using MT = typename Tr::MT;
  static constexpr int kNq = NQ;
  static constexpr int kAcc = NQ / 2;   // accumulators of one m64nNQ fragment per thread
  static constexpr int kCols = NQ / 4;  // distinct q rows (fragment columns) of a thread
  static constexpr bool kTwoPass = std::is_same_v<MT, __nv_bfloat16>;  // P as hi + lo (bf16 only)
  // hi and lo P^T tiles as one B operand of 2 NQ rows (one wgmma reads V once for both; the two
  // halves of the O^T fragment are added at the end), where the accumulators fit (NQ <= 16).
  static constexpr bool kCat = kTwoPass && NQ <= 16;
  static constexpr int kNPv = kCat ? 2 * NQ : NQ;   // N of the P V wgmma
  static constexpr int kAccO = kNPv / 2;            // O^T accumulators per fragment
  static constexpr int kQBlock = NQ * 128;                 // one 64-dim block of the Q tile
  static constexpr int kQBytes = (Tr::D / 64) * kQBlock;
  static constexpr int kPBytes = NQ * 128;                 // P^T tile: NQ q rows x 64 tokens, 16-bit
  static constexpr int kXsBytes = 2 * 128 * kAcc * 4;      // S^T partials [warpgroup][acc][thread]
  static constexpr int kRedBytes = 2 * 4 * NQ * 4;         // [warpgroup][warp][q row]
  static constexpr int kFixed = kQBytes + 2 * kPBytes + kXsBytes + kRedBytes;
  static constexpr int kBudget = 227 * 1024;
  static constexpr int kRawBytes = kTile * Tr::kRawRow;
  static constexpr int kNb = Tr::D / 64;                   // 64-dim blocks of a KV tile (8 KiB each)
  // 16-bit caches: a ring of kSlots block slots (the blocks of a tile in consecutive slots,
  // wrapping), at least two tiles, at most three. FP8 caches: one 16-bit tile (kSlots = kNb) and
  // a ring of kStages raw staging tiles.
  static constexpr int kFitSlots = (kBudget - kFixed) / Tr::kBlockBytes;
  static constexpr int kSlots = !Tr::kDirect ? kNb : kFitSlots > 3 * kNb ? 3 * kNb : kFitSlots;
  static constexpr int kFit = (kBudget - kFixed - Tr::kTileBytes) / kRawBytes;
  static constexpr int kStages = Tr::kDirect ? 0 : kFit > 3 ? 3 : kFit;
  static constexpr int kOffKv = kQBytes;
  static constexpr int kOffP = kOffKv + kSlots * Tr::kBlockBytes;
  static constexpr int kOffPLo = kOffP + kPBytes;
  static constexpr int kOffRaw = kOffPLo + kPBytes;
  static constexpr int kOffXs = kOffRaw + kStages * kRawBytes;
  static constexpr int kOffRed = kOffXs + kXsBytes;
  static constexpr int kSmemBytes = kOffRed + kRedBytes;
  static_assert(Tr::kDirect ? kSlots >= 2 * kNb : kStages >= 2, "at least two tiles in flight");
  static_assert(kQBytes % 1024 == 0 && Tr::kTileBytes % 1024 == 0 && kPBytes % 1024 == 0,
                "wgmma operands on 1024-byte boundaries");
  static_assert(kSmemBytes <= kBudget, "shared memory of one CTA");

  // Byte offset of 16-byte chunk `chunk` (dims 8 chunk ..) of q row `row` in the Q tile.
  static __device__ __forceinline__ uint32_t q_off(int row, int chunk) {
    return static_cast<uint32_t>((chunk >> 3) * kQBlock + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
  }
  // Byte offset of token `tok` (0 .. 63) of q row `row` in a P^T tile (K-major B operand).
  static __device__ __forceinline__ uint32_t p_off(int row, int tok) {
    return static_cast<uint32_t>(row * 128 + (((tok >> 3) ^ (row & 7)) << 4) + (tok & 7) * 2);
  }
};

}  // namespace dualops::cuda::mla

// Shared-memory layout of the transposed-tile wgmma MLA kernel (mla_wt_kernel.cuh) for NQ q rows
// (8, 16 or 32). The two warpgroups run independent tile chains (warpgroup c: the piece's tiles
// n with n % 2 == c), so each has its own KV ring, P^T tiles and reduction rows; the Q tile is
// shared:
//   Q (D / 64 blocks of NQ rows x 64 values, 128-byte swizzle) | ring 0 | ring 1 |
//   (P^T of warpgroup 0, of warpgroup 1, unless in the KV tiles' RoPE blocks: kPInRope) |
//   raw FP8 slots of warpgroup 0 | of 1 | reductions.
// 16-bit caches: a ring of kSlots 8 KiB block slots per warpgroup (64 tokens x 64 dims, copied as
// they are): the tile being computed plus kSlots - kNb blocks of the chain's next tile in flight.
// FP8 caches: one 16-bit tile per warpgroup (kSlots = kNb) and kRawBufs raw slots of kRawTok tokens
// (mla_load.cuh rows: token * kRawRow), dequantized part by part by the warpgroup that uses it.
// After the chains, a warpgroup's ring holds its state for the merge (kXchBytes).
#pragma once
#include "mla_config.cuh"

namespace dualops::cuda::mla {

template <class Tr, int NQ>
struct WtLayout {
  static_assert(NQ == 8 || NQ == 16 || NQ == 32, "8, 16 or 32 q rows");
  using MT = typename Tr::MT;
  static constexpr int kNq = NQ;
  static constexpr int kAcc = NQ / 2;   // accumulators of one m64nNQ fragment per thread
  static constexpr int kCols = NQ / 4;  // distinct q rows (fragment columns) of a thread
  static constexpr int kAccO = NQ / 2;   // O^T accumulators per fragment (8 fragments)
  // Independent S^T accumulator sets (k-steps dealt round robin, summed after the wait).
  static constexpr int kSSets = NQ == 8 ? 4 : NQ == 16 ? 2 : 1;
  static constexpr int kQBlock = NQ * 128;                 // one 64-dim block of the Q tile
  static constexpr int kQBytes = (Tr::D / 64) * kQBlock;
  static constexpr int kPBytes = NQ * 128;                 // P^T tile: NQ q rows x 64 tokens, 16-bit
  static constexpr int kRedBytes = 2 * 4 * NQ * 4;         // [warpgroup][warp][q row]
  // 16-bit caches: one mbarrier per ring slot (TMA completion), at most 2 kNb slots per warpgroup.
  static constexpr int kBarBytes = Tr::kDirect ? 2 * 2 * (Tr::D / 64) * 8 : 0;
  static constexpr int kBudget = 227 * 1024;
  static constexpr int kNb = Tr::D / 64;                   // 64-dim blocks of a KV tile (8 KiB each)
  // A warpgroup's P^T tile: beside the rings, or (d_qk 576) the RoPE block of
  // its current KV tile, which only S^T reads: S^T is done before the softmax writes P^T, and the
  // slot is refilled only once P V is done. In the RoPE block where the room it frees is used:
  // 16-bit caches (one more ring slot at NQ 16) and FP8 caches whose second raw slot fits only then.
  static constexpr bool kTwoRawBeside =
      2 * 2 * 16 * Tr::kRawRow <= kBudget - (kQBytes + 2 * kPBytes + kRedBytes) - 2 * kNb * Tr::kBlockBytes;
  static constexpr bool kPInRope = Tr::D == 576 && (Tr::kDirect || !kTwoRawBeside);
  static constexpr int kPArea = kPInRope ? 0 : 2 * kPBytes;
  static constexpr int kFixed = kQBytes + kPArea + kRedBytes + kBarBytes;
  static constexpr int kFitSlots = (kBudget - kFixed) / Tr::kBlockBytes / 2;
  static constexpr int kSlots = !Tr::kDirect ? kNb : kFitSlots > 2 * kNb ? 2 * kNb : kFitSlots;
  // FP8: raw parts of kRawTok tokens (kRawPer = 128 / kRawTok threads of a warpgroup per token) in
  // kRawBufs slots of a part each. fp8_v32: two slots of 16 tokens where they fit (the next part's
  // copy in flight while a part is converted), else one; fp8_model1: one slot of 32 tokens where
  // it fits, else 16 (two 16-token slots measured faster with fp8_v32, slower with fp8_model1,
  // whose 8 threads per token each decode the token's 7 block scales).
  static constexpr int kRoom = kBudget - kFixed - 2 * kNb * Tr::kBlockBytes;  // for both warpgroups' slots
  static constexpr bool kTwoSlots = Tr::kV32 && 2 * 2 * 16 * Tr::kRawRow <= kRoom;
  static constexpr int kRawTok = Tr::kDirect ? 0 : !kTwoSlots && 2 * 32 * Tr::kRawRow <= kRoom ? 32 : 16;
  static constexpr int kRawBufs = Tr::kDirect ? 0 : kTwoSlots ? 2 : 1;
  static constexpr int kRawPer = Tr::kDirect ? 0 : 128 / kRawTok;
  static constexpr int kRawSlot = kRawTok * Tr::kRawRow;   // bytes of one raw slot
  static constexpr int kRawBytes = kRawBufs * kRawSlot;
  static constexpr int kRingBytes = kSlots * Tr::kBlockBytes;
  static constexpr int kOffKv = kQBytes;
  static constexpr int kOffP = kOffKv + 2 * kRingBytes;
  static constexpr int kOffRaw = kOffP + kPArea;
  static constexpr int kOffRed = kOffRaw + 2 * kRawBytes;
  static constexpr int kOffBar = kOffRed + kRedBytes;  // [warpgroup][slot] mbarriers
  static constexpr int kSmemBytes = kOffBar + kBarBytes;
  // Merge: row maxima and sums, then the O^T fragments of the other warpgroup's value dims.
  static constexpr int kXchBytes = (2 * NQ + 4 * kAccO * 128) * 4;
  // 16-bit caches: ring position of a piece's first block, past the slots the merge uses (the
  // next piece's first blocks are copied during the merge).
  static constexpr int kRing0 = Tr::kDirect ? (kXchBytes + Tr::kBlockBytes - 1) / Tr::kBlockBytes : 0;
  static_assert(kSlots >= kNb && kXchBytes <= kRingBytes, "a tile per ring; the merge state fits");
  static_assert(kRing0 < kSlots, "room for a piece's first blocks beside the merge state");
  static_assert(kQBytes % 1024 == 0 && kPBytes % 1024 == 0, "wgmma operands on 1024-byte boundaries");
  static_assert(!kPInRope || kPBytes <= Tr::kBlockBytes, "the P^T tile in one block slot");
  static_assert(kSmemBytes <= kBudget, "shared memory of one CTA");
  static_assert(kOffBar % 8 == 0 && kSlots <= 32, "mbarriers 8-byte aligned; slot phases in one word");

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

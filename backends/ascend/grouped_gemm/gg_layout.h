// Plain data shared by the Ascend grouped-GEMM kernel and its host helpers: the GM workspace
// layout and the check of the plan header (the generated GroupedGemmTiling of dualops/tiling.h).
// No AscendC types here, so the host side includes it without the simulator.
#pragma once
#include <cstdint>

#include "../common/a2_layout.h"
#include "dualops/tiling.h"

#ifndef __aicore__   // host builds of this header (grouped_gemm_host.cpp): a plain function
#define __aicore__
#endif

namespace dualops {
namespace gg {

using ascend::RoundUp64;
// A2 L0C: blockwise keeps several K blocks' partials in it.
constexpr int64_t kL0cBytes = ascend::kL0cBytes;

constexpr int32_t kBlockK = 128;      // blockwise scale granularity (K and N)
constexpr int32_t kSlots = 2;         // epilogue workspace slots per AI core (cube -> vector)
constexpr int32_t kMaxParts = 8;            // blockwise K blocks handed to the vector cores at once

// The plan: GroupedGemmTiling (GroupedGemmTiling::kInts int32s), then items [num_items, 3].

// Rows of x (flattened) the kernel may touch: contiguous sum of groups, masked G * m_max.
__aicore__ inline int64_t XRows(const GroupedGemmTiling& t) {
  return t.layout == GgLayout::kMasked ? static_cast<int64_t>(t.num_groups) * t.m_max : t.m_total;
}

// K blocks per cube -> vector hand-off: blockwise keeps up to kMaxParts partial products in
// L0C and hands them over with one flag; every other recipe hands over one finished tile.
__aicore__ inline int32_t PartsPerHandOff(const GroupedGemmTiling& t) {
  if (t.scale_mode != GgScaleMode::kBlockwise) return 1;
  const int64_t fit = kL0cBytes / (RoundUp64(t.tile_m, 16) * t.tile_n * 4);
  int64_t parts = fit < kMaxParts ? fit : kMaxParts;
  if (parts > t.num_k_tiles) parts = t.num_k_tiles;
  return parts < 1 ? 1 : static_cast<int32_t>(parts);
}

// Workspace (bytes, 512-B aligned regions):
//   fp8 inputs:    x16 [XRows, K] and w16 [G, N, K] halves (the decoded e4m3 operands)
//   scaled modes:  per AI core kSlots slots of PartsPerHandOff fp32 / int32 tiles
//                  [round16(tile_m), tile_n] (cube -> vector)
struct Workspace {
  uint64_t x16, w16, slots, slot_bytes, total;
};

__aicore__ inline Workspace MakeWorkspace(const GroupedGemmTiling& t) {
  Workspace w{};
  uint64_t off = 0;
  if (t.in_dtype == DType::kFloat8E4m3fn) {
    w.x16 = off;
    off += RoundUp64(XRows(t) * t.k * 2, 512);
    w.w16 = off;
    off += RoundUp64(static_cast<int64_t>(t.num_groups) * t.n * t.k * 2, 512);
  }
  w.slots = off;
  w.slot_bytes = static_cast<uint64_t>(PartsPerHandOff(t)) * RoundUp64(t.tile_m, 16) * t.tile_n * 4;
  if (t.scale_mode != GgScaleMode::kNone) off += static_cast<uint64_t>(t.num_cores) * kSlots * w.slot_bytes;
  w.total = off;
  return w;
}

// Cube element bytes: fp8 is decoded to fp16 before the cube sees it.
__aicore__ inline int32_t CubeElemBytes(int32_t in_dtype) { return in_dtype == DType::kInt8 ? 1 : 2; }

// On-chip bytes the kernel allocates (L1 two stages of A and B, L0A / L0B double-buffered, one
// L0C accumulator); the planner's gemm_footprint() computes the same.
struct OnChip {
  int64_t l1, l0a, l0b, l0c;
};
__aicore__ inline OnChip OnChipBytes(const GroupedGemmTiling& t) {
  const int64_t e = CubeElemBytes(t.in_dtype), mp = RoundUp64(t.tile_m, 16);
  return {2 * (mp + t.tile_n) * t.tile_k * e, 2 * mp * t.tile_k * e, 2 * t.tile_n * t.tile_k * e,
          PartsPerHandOff(t) * mp * t.tile_n * 4};
}

// nullptr when the kernel can run this plan header, else why not.
__aicore__ inline const char* CheckTiling(const GroupedGemmTiling& t, int64_t l1, int64_t l0a, int64_t l0b, int64_t l0c) {
  if (t.version != GroupedGemmTiling::kVersion) return "plan version differs from the kernel's";
  if (t.layout != GgLayout::kContiguous && t.layout != GgLayout::kMasked) return "unknown layout";
  if (t.num_groups < 1 || t.n < 1 || t.k < 1 || t.num_cores < 1 || t.num_items < 0) return "empty problem sizes";
  if (t.tile_m < 1 || t.tile_n < 16 || t.tile_k < 16) return "tiles below the cube fractal";
  if (t.tile_n % 16 || t.tile_k % (32 / CubeElemBytes(t.in_dtype))) return "tile N / K not whole cube fractals";
  if (t.tile_n > 4096 || t.tile_m > 4096) return "tile too large";
  if (t.k > 65535) return "K above 65535 (Nd2Nz source row stride is 16-bit)";
  if (t.scale_mode == GgScaleMode::kBlockwise && (t.tile_k != kBlockK || t.tile_n != kBlockK)) {
    return "blockwise needs tile_k = tile_n = 128 (one scale block)";
  }
  if (t.scale_mode == GgScaleMode::kBlockwise && t.tile_m > 128) return "blockwise keeps at most 128 rows of fp32 accumulators in UB";
  if (t.scale_mode < GgScaleMode::kNone || t.scale_mode > GgScaleMode::kBlockwise) return "unknown scale mode";
  if ((t.scale_mode == GgScaleMode::kNone) != (t.in_dtype == DType::kFloat16 || t.in_dtype == DType::kBfloat16)) return "scale mode / dtype mismatch";
  const OnChip b = OnChipBytes(t);
  if (b.l1 > l1) return "tiles exceed L1";
  if (b.l0a > l0a) return "tiles exceed L0A";
  if (b.l0b > l0b) return "tiles exceed L0B";
  if (b.l0c > l0c) return "tile exceeds L0C";
  return nullptr;
}

}  // namespace gg
}  // namespace dualops

// Plain C++ shared by the Ascend C IFA kernel and its host side: the cube / vector chunk sizes
// derived from the on-chip capacities, the per-core GM workspace layout and the plan check. The
// plan header (the `GM_ADDR tiling` buffer, docs/internals.md "IFA plan") is the generated
// IncreFlashAttentionTiling of dualops/tiling.h: the shared, shape-only header, without the CUDA
// launch fields.
#pragma once
#include <cstdint>

#include "../common/a2_layout.h"
#include "dualops/tiling.h"

// The helpers below run on both sides: the host (workspace size, plan check) and the kernel (chunk
// sizes, workspace layout), so they carry __aicore__. Built for the host without CANN's headers
// (the pybind module), the qualifier means nothing.
#ifndef __aicore__
#define __aicore__
#endif

namespace dualops {
namespace ifa {

using ascend::CeilDiv;
using ascend::Floor16;
using ascend::kL0aBytes;
using ascend::kL0bBytes;
using ascend::kL0cBytes;
using ascend::MaxI;
using ascend::MinI;
using ascend::RoundUp;

// Hardware capacities the kernel sizes its buffers for (Atlas A2 AI core).
// Vector-side chunk sizes (elements): scores / pse rows, mm2-result / accumulator rows,
// antiquant rows. See docs/ascend_sim.md for the UB budget they add up to.
constexpr uint32_t kScoreChunk = 4096;
constexpr uint32_t kOutChunk = 4096;
constexpr uint32_t kDequantChunk = 2048;
constexpr int32_t kSlots = 2;   // kv tiles in flight between the cube and the vector cores


// Cube chunking: mm1 = Q[Rp, D] . K^T[D, N] in (kc1 of D) x (nc1 keys) pieces, mm2 =
// P[Rp, N] . V[N, D] in (kc2 keys) x (nc2 of D) pieces, each piece within L0A / L0B / L0C.
struct CubeChunks {
  int32_t rows_p;   // q tile rows padded to 16
  int32_t kc1, nc1, kc2, nc2;
};

__aicore__ inline CubeChunks MakeCubeChunks(const IncreFlashAttentionTiling& t) {
  CubeChunks c;
  c.rows_p = RoundUp(t.q_tile_rows, 16);
  const int32_t d = RoundUp(t.head_dim, 16);
  c.kc1 = MinI(d, Floor16(kL0aBytes / (2 * c.rows_p)));
  c.nc1 = MinI(t.kv_tile, MinI(Floor16(kL0bBytes / (2 * c.kc1)), Floor16(kL0cBytes / (4 * c.rows_p))));
  c.nc2 = MinI(d, Floor16(kL0cBytes / (4 * c.rows_p)));
  c.kc2 = MinI(t.kv_tile, MinI(Floor16(kL0aBytes / (2 * c.rows_p)), Floor16(kL0bBytes / (2 * c.nc2))));
  return c;
}

// Per-core GM workspace, byte offsets inside one core's slice (all 512-B aligned):
//   S  [kSlots][rows_p][kv_tile] fp32   mm1 scores        (cube -> vector)
//   P  [kSlots][rows_p][kv_tile] q type  softmax numerator, rounded once (vector -> cube)
//   O  [kSlots][rows_p][D] fp32         mm2 result        (cube -> vector)
//   ACC[rows_p][D] fp32                 running output, owned by the vector cores
//   K, V [kSlots][kv_tile][D] q type   dequantized / converted cache tiles, rounded once
//                                       (quantized or other-dtype caches only; vector -> cube)
struct Workspace {
  uint64_t s, p, o, acc, k, v, per_core;
};

__aicore__ inline uint64_t Align512(uint64_t v) { return (v + 511) / 512 * 512; }

__aicore__ inline Workspace MakeWorkspace(const IncreFlashAttentionTiling& t, bool convert_kv) {
  Workspace w;
  const uint64_t rows = static_cast<uint64_t>(RoundUp(t.q_tile_rows, 16));
  const uint64_t n = static_cast<uint64_t>(t.kv_tile);
  const uint64_t d = static_cast<uint64_t>(t.head_dim);
  uint64_t off = 0;
  w.s = off;
  off = Align512(off + kSlots * rows * n * 4);
  w.p = off;
  off = Align512(off + kSlots * rows * n * 2);
  w.o = off;
  off = Align512(off + kSlots * rows * d * 4);
  w.acc = off;
  off = Align512(off + rows * d * 4);
  w.k = off;
  off = Align512(off + (convert_kv ? kSlots * n * d * 2 : 0));
  w.v = off;
  off = Align512(off + (convert_kv ? kSlots * n * d * 2 : 0));
  w.per_core = off;
  return w;
}

__aicore__ inline bool NeedsKvConvert(int32_t q_dtype, int32_t kv_dtype) { return q_dtype != kv_dtype; }

__aicore__ inline uint64_t WorkspaceBytes(const IncreFlashAttentionTiling& t, int32_t q_dtype, int32_t kv_dtype) {
  return MakeWorkspace(t, NeedsKvConvert(q_dtype, kv_dtype)).per_core * static_cast<uint64_t>(t.num_cores);
}

// Checks a plan header (host side, before a launch). Returns nullptr when fine, else a message.
__aicore__ inline const char* CheckTiling(const IncreFlashAttentionTiling& t) {
  if (t.version != IncreFlashAttentionTiling::kVersion) return "plan version is not the one this kernel reads";
  if (t.batch < 1 || t.s_q < 1 || t.h_kv < 1 || t.group < 1 || t.h_q != t.h_kv * t.group) return "bad head / batch fields";
  if (t.head_dim < 16 || t.head_dim % 16) return "head_dim must be a positive multiple of 16";
  if (t.kv_tile < 16 || t.kv_tile % 16) return "kv_tile must be a positive multiple of 16";
  if (t.num_splits < 1 || t.split_len < t.kv_tile || t.split_len % t.kv_tile) return "split_len must be a multiple of kv_tile";
  if (static_cast<int64_t>(t.num_splits) * t.split_len < t.max_kv_len) return "the splits do not cover max_kv_len keys";
  if (t.q_rows != t.group * t.s_q || t.q_tile_rows < 1 || t.q_tile_rows > t.q_rows) return "bad q_rows / q_tile_rows";
  if (t.whole_groups < 0 || t.whole_groups > t.batch * t.h_kv) return "whole_groups must be in [0, batch * h_kv]";
  if (t.num_units != t.whole_groups + (t.batch * t.h_kv - t.whole_groups) * t.num_splits)
    return "num_units != whole_groups + (batch * h_kv - whole_groups) * num_splits";
  if (t.num_cores < 1 || t.num_cores > t.num_units) return "num_cores must be in [1, num_units]";
  if (t.block_size < 0 || (t.block_size && (t.block_size % 16))) return "block_size must be 0 or a multiple of 16";
  if (t.block_size && t.kv_tile % t.block_size && t.block_size % t.kv_tile) return "kv_tile and block_size must divide one another";
  return nullptr;
}

}  // namespace ifa
}  // namespace dualops

// Plain C++ shared by the Ascend C MLA decode kernel and its host side: the cube chunk sizes
// derived from the on-chip capacities, the per-core GM workspace layout and the host-side checks.
//
// tiling = [MlaDecodeAscendLaunch] [MlaPlan.pack(): MlaDecodeTiling, parts [num_sm_parts][8],
//          num_splits [batch + 1]]   (both structs generated into dualops/tiling.h from
//          ops/mla_decode.yaml `plan:`; the launch values: python/dualops/heuristics/ascend.py)
#pragma once
#include <cstdint>

#include "../common/a2_layout.h"
#include "dualops/tiling.h"

// Kernel code calls these helpers too: __aicore__ there, plain host functions where the AscendC
// headers are not included (the host side).
#ifndef __aicore__
#define __aicore__
#endif

namespace dualops {
namespace mla {

using ascend::CeilDiv;
using ascend::Floor16;
using ascend::kL0aBytes;
using ascend::kL0bBytes;
using ascend::kL0cBytes;
using ascend::kL1Bytes;
using ascend::kUbBytes;
using ascend::MaxI;
using ascend::MinI;
using ascend::RoundUp;

// Cache token layouts (dualops.quant).
constexpr int32_t kV32Bytes = 656;      // 512 e4m3 (int8_v32: int8) | 4 fp32 scales | 64 bf16 RoPE
constexpr int32_t kV32Nope = 512;
constexpr int32_t kV32RopeByte = 528;
constexpr int32_t kModel1Data = 576;    // per token in the block's data area: 448 e4m3 | 64 bf16 RoPE
constexpr int32_t kModel1Nope = 448;
constexpr int32_t kModel1Scales = 8;    // per token in the block's scale area: 7 e8m0 + pad
constexpr int32_t kModel1Bytes = 584;
constexpr int32_t kRope = 64;

// Hardware capacities the kernel sizes its buffers for (Atlas A2 AI core).
constexpr int32_t kSlots = 2;        // kv tiles in flight between the cube and the vector cores
constexpr int32_t kOutChunkRows = 8; // mm2-result rows per vector step
constexpr int32_t kConvRows = 4;     // cache rows per dequant step


// Cube chunking. mm1 = Q[Rp, d_qk] . K^T[d_qk, kv_tile]: the whole tile's keys at once, d_qk in
// kc1 pieces. mm2 = P[Rp, kv_tile] . V[kv_tile, d_v]: keys in kc2 pieces, d_v in nc2 pieces.
struct Chunks {
  int32_t rows_p;   // m_rows padded to 16
  int32_t kc1, kc2, nc2;
};

__aicore__ inline Chunks MakeChunks(const MlaDecodeAscendLaunch& h) {
  Chunks c;
  c.rows_p = RoundUp(h.m_rows, 16);
  c.kc1 = MinI(h.d_qk, MinI(Floor16(kL0bBytes / (2 * h.kv_tile)), Floor16(kL0aBytes / (2 * c.rows_p))));
  c.nc2 = MinI(h.d_v, Floor16(kL0cBytes / (4 * c.rows_p)));
  c.kc2 = MinI(h.kv_tile, MinI(Floor16(kL0aBytes / (2 * c.rows_p)), Floor16(kL0bBytes / (2 * c.nc2))));
  return c;
}

// L1 bytes of the cube side: q tile, kSlots latent tiles, the P tile (all in q's dtype).
__aicore__ inline uint64_t L1Bytes(const MlaDecodeAscendLaunch& h, const Chunks& c) {
  return 2ull * c.rows_p * h.d_qk + 2ull * kSlots * h.kv_tile * h.d_qk + 2ull * c.rows_p * h.kv_tile;
}

// Per-core GM workspace, byte offsets inside one AI core's slice (all 512-B aligned):
//   S [kSlots][rows_p][kv_tile] fp32         mm1 scores (cube -> vector)
//   P [kSlots][rows_p][kv_tile] q            softmax numerator, rounded once (vector -> cube)
//   O [kSlots][rows_p][d_v] fp32             mm2 result (cube -> vector)
//   K [kSlots][kv_tile][d_qk] q              dequantized latent tile, rounded once (vector -> cube)
struct Workspace {
  uint64_t s, p, o, k, per_core;
};

__aicore__ inline uint64_t Align512(uint64_t v) { return (v + 511) / 512 * 512; }

__aicore__ inline Workspace MakeWorkspace(const MlaDecodeAscendLaunch& h) {
  const Chunks c = MakeChunks(h);
  const uint64_t rows = static_cast<uint64_t>(c.rows_p), n = static_cast<uint64_t>(h.kv_tile);
  Workspace w;
  uint64_t off = 0;
  w.s = off;
  off = Align512(off + kSlots * rows * n * 4);
  w.p = off;
  off = Align512(off + kSlots * rows * n * 2);
  w.o = off;
  off = Align512(off + kSlots * rows * static_cast<uint64_t>(h.d_v) * 4);
  w.k = off;
  off = Align512(off + (h.convert ? kSlots * n * static_cast<uint64_t>(h.d_qk) * 2 : 0));
  w.per_core = off;
  return w;
}

__aicore__ inline uint64_t WorkspaceBytes(const MlaDecodeAscendLaunch& h) {
  return MakeWorkspace(h).per_core * static_cast<uint64_t>(h.num_cores > 0 ? h.num_cores : 0);
}

// Host check of a tiling buffer (launch header + plan). nullptr when fine, else why not.
__aicore__ inline const char* CheckTiling(const MlaDecodeAscendLaunch& h, const MlaDecodeTiling& t, int64_t tiling_ints) {
  if (h.version != MlaDecodeAscendLaunch::kVersion) return "launch header version is not the one this kernel reads";
  if (t.version != MlaDecodeTiling::kVersion) return "MLA plan version is not the one this kernel reads";
  if (h.plan_ints < MlaDecodeTiling::kInts || MlaDecodeAscendLaunch::kInts + static_cast<int64_t>(h.plan_ints) != tiling_ints)
    return "plan_ints does not match the tiling buffer";
  if (t.part_stride != 8) return "part_stride must be 8";
  if (MlaDecodeTiling::kInts + static_cast<int64_t>(t.num_sm_parts) * t.part_stride + t.batch + 1 != h.plan_ints)
    return "the plan's arrays do not match its header";
  if (t.batch < 1 || t.s_q < 1 || t.h_q < 1 || t.h_q > 128) return "batch, s_q >= 1 and h_q in [1, 128] required";
  if (t.h_kv != 1 || t.q_rows != t.s_q * t.h_q) return "the Ascend MLA kernel takes one latent KV head";
  if (h.d_qk != 576 && h.d_qk != 512) return "d_qk must be 576 or 512";
  if (h.d_v != 512 || h.d_v > h.d_qk) return "d_v must be 512";
  if (h.kv_tile < 64 || h.kv_tile % 64 || h.kv_tile > 256) return "kv_tile must be a multiple of 64 in [64, 256]";
  if (h.m_rows < 1 || h.m_rows > 64) return "m_rows must be in [1, 64]";
  if (t.num_m_blocks != CeilDiv(t.q_rows, h.m_rows)) return "num_m_blocks != ceil(q_rows / m_rows)";
  if (h.num_cores < 1 || h.num_cores > t.num_sm_parts * t.num_m_blocks) return "num_cores must be in [1, parts * m blocks]";
  if (h.page_block_size < 1 || h.page_block_size != t.page_block_size) return "page_block_size differs from the plan's";
  if (h.kv_format != t.kv_format || h.kv_format < 0 || h.kv_format >= MlaKvFormat::kCount) return "kv_format differs from the plan's";
  if (h.q_dtype != DType::kFloat16 && h.q_dtype != DType::kBfloat16) return "q must be fp16 or bf16";
  if (h.kv_format != MlaKvFormat::kBf16 && !h.convert) return "FP8 / int8 caches are dequantized on the vector cores (convert = 1)";
  if (t.sparse && (h.topk_cols != t.topk || h.extra_topk_cols != t.extra_topk)) return "index widths differ from the plan's topk";
  if (t.sparse && h.extra_topk_cols > 0 && h.extra_page_block_size < 1) return "extra_page_block_size must be >= 1";
  const Chunks c = MakeChunks(h);
  if (c.kc1 < 16 || c.kc2 < 16 || c.nc2 < 16) return "cube chunks do not fit L0A / L0B / L0C";
  if (L1Bytes(h, c) > kL1Bytes) return "the cube's tiles do not fit L1";
  return nullptr;
}

}  // namespace mla
}  // namespace dualops

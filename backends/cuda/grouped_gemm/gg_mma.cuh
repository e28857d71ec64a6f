// Warp-level pieces of the grouped GEMM's mma.sync kernel over the shared helpers of
// backends/cuda/common/ (cp.async, ldmatrix, the mma shapes). One mma step reads 32 bytes of K
// from 16 rows of A and 8 rows of B, so bf16/fp16 (m16n8k16) and e4m3/s8 (m16n8k32) share one
// fragment layout in bytes and one shared-memory tile layout (128-byte rows, 16-byte chunks
// XOR-swizzled by row).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../common/cp_async.cuh"
#include "../common/mma.cuh"
#include "../common/ptx.cuh"

namespace dualops::cuda::gg {

using common::cp_async_commit;
using common::cp_async_wait;

enum InType : int { kInBf16 = 0, kInFp16 = 1, kInE4m3 = 2, kInS8 = 3 };

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return common::smem_addr(p); }

// 16-byte copy; src_bytes 0 writes zeros and reads nothing (src must still be a valid address).
// Default L2 policy: weight tiles are read again by the group's other m tiles, x tiles by the
// other n tiles.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  common::cp_async_16_keep(dst, src, src_bytes);
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  common::ldmatrix_x4(addr, r[0], r[1], r[2], r[3]);
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t (&r)[2]) { common::ldmatrix_x2(addr, r[0], r[1]); }

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

template <int kIn> struct Acc { using type = float; };
template <> struct Acc<kInS8> { using type = int; };

// d += a * b for one m16n8 tile (32 bytes of K).
template <int kIn>
__device__ __forceinline__ void mma(typename Acc<kIn>::type (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (kIn == kInBf16) {
    common::mma_16816<__nv_bfloat16>(d, a, b[0], b[1]);
  } else if constexpr (kIn == kInFp16) {
    common::mma_16816<__half>(d, a, b[0], b[1]);
  } else if constexpr (kIn == kInE4m3) {
    common::mma_16832_e4m3(d, a, b[0], b[1]);
  } else {
    common::mma_16832_s8(d, a, b[0], b[1]);
  }
}

}  // namespace dualops::cuda::gg

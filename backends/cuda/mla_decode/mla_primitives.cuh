// Warp-level building blocks of the MLA decode kernels: the shared mma / packing / PDL pieces of
// backends/cuda/common/, plus what only MLA uses: zero-filling cp.async without an L2 policy,
// named barriers, swizzled shared-memory addressing, fp8 e4m3 and int8 conversion.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>
#include <type_traits>

#include "../common/mma.cuh"
#include "../common/pdl.cuh"
#include "../common/ptx.cuh"

namespace dualops::cuda::mla {

using common::pack2;
using common::pdl_launch_dependents;
using common::pdl_wait;
using common::smem_addr;

// 16-byte global -> shared copy; src_bytes 0 reads nothing and zero-fills the destination (slots
// past a request's length are never read, so NaN-poisoned unused slots cannot reach the math).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Named barrier for `count` threads (the two warps sharing a row group).
__device__ __forceinline__ void named_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Producer side of a named barrier: counts this warp's arrival and goes on (memory accesses
// before it are visible to the threads that pass the barrier's bar.sync).
__device__ __forceinline__ void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// Named barrier for `count` threads that also returns whether `pred` holds in any of them.
__device__ __forceinline__ bool named_barrier_or(int id, int count, bool pred) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(count)
      : "memory");
  return r != 0;
}

// Barrier 1 + c of warpgroup c (c = 0 or 1: 128 threads), for kernels whose two warpgroups run
// independent chains. A warp-uniform branch on c gives each call a literal id, which ptxas
// encodes as an immediate operand: against named_barrier(1 + c, 128) (the id in a register),
// wgmma_t with the fp8_v32 cache measured about 3 % faster.
// `passed` counts the barriers the warpgroup's threads have passed since the last level().
struct WgBarrier {
  int c;
  int passed;
  __device__ __forceinline__ explicit WgBarrier(int c_) : c(c_), passed(0) {}
  __device__ __forceinline__ void sync() {
    if (c == 0) {
      named_barrier(1, 128);
    } else {
      named_barrier(2, 128);
    }
    ++passed;
  }
  // The same barrier, returning whether `pred` holds in any of the warpgroup's threads.
  __device__ __forceinline__ bool sync_or(bool pred) {
    ++passed;
    return c == 0 ? named_barrier_or(1, 128, pred) : named_barrier_or(2, 128, pred);
  }
  // A CTA barrier (every thread of both warpgroups calls it) after which both warpgroups have
  // passed equally many barriers: the one behind passes its own barrier the missing times (the
  // counts differ by less than 64; the CTA barrier adds them up mod 128). compute-sanitizer's
  // racecheck orders two threads' shared-memory accesses across a CTA barrier only when both
  // have passed equally many barriers, named ones included (benchmarks/cuda/racecheck_barriers.cu
  // shows it); chains of unequal tile counts pass unequal numbers. No memory access depends on
  // the extra barriers.
  __device__ __forceinline__ void level() {
    const int mine = passed & 127;
    const int sum = __syncthreads_count((threadIdx.x & 127) < mine);
    const int behind = (sum - 2 * mine) & 127;  // the other warpgroup's count minus this one's
#pragma unroll 1
    for (int i = 0; i < (behind < 64 ? behind : 0); ++i) sync();
    passed = 0;
  }
};


template <typename MT>
__device__ __forceinline__ void store2(MT* p, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(p) = pack2<MT>(lo, hi);
}

// Two e4m3 values (low byte first) -> two floats (NaN codes stay NaN).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint16_t x) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x), __NV_E4M3);
  return __half22float2(*reinterpret_cast<__half2*>(&h));
}
// Four int8 values (a 32-bit word, low byte first) -> four floats, exactly: byte b + 128 (xor
// 0x80) becomes the low mantissa byte of the float 2^23 + b + 128 (a byte permute), minus
// 2^23 + 128; full-rate integer and float ops instead of four I2F conversions.
__device__ __forceinline__ float4 s8x4_to_float4(uint32_t w) {
  const uint32_t u = w ^ 0x80808080u;
  constexpr float kBias = 8388736.0f;  // 2^23 + 128
  return make_float4(__uint_as_float(__byte_perm(u, 0x4b000000u, 0x7650)) - kBias,
                     __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7651)) - kBias,
                     __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7652)) - kBias,
                     __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7653)) - kBias);
}
// Two bf16 values (a 32-bit word) -> two floats.
__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows are `row_bytes` long
// (a multiple of 128): chunks are XOR-swizzled by row % 8 so that ldmatrix's eight rows at one
// column hit eight different bank groups.
__device__ __forceinline__ uint32_t swz(int row, int chunk, int row_bytes) {
  return static_cast<uint32_t>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

}  // namespace dualops::cuda::mla

// Asynchronous global -> shared copies (cp.async) with an evict-first L2 policy, and L2 prefetches.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace dualops::cuda::common {

// 16-byte global -> shared copy that bypasses L1 (the cache is read once). src_bytes = 0 reads
// nothing and zero-fills the destination: rows past kv_len never touch memory, so whatever the
// unused cache slots hold (NaN) cannot reach the arithmetic.
// The K/V stream goes in with an evict-first L2 policy: it is read once, so it should not push
// out what is reused (q, block tables, the split partials).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes), "l"(evict_first_policy())
               : "memory");
}
// The same copy with the default L2 policy: for data other CTAs read again (GEMM operand tiles
// shared by the CTAs working on one group).
__device__ __forceinline__ void cp_async_16_keep(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// L2 prefetch of `bytes` (a multiple of 16) from a 16-B aligned global address: a hint with no
// data returned, so it may run before the grid-dependency wait -- L2 is the GPU's point of
// coherence, so a line the kernel ahead writes after this prefetch is still read fresh later.
__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}
// One 4-byte copy (cp.async.ca: 4-B aligned sources such as a float vector at any offset);
// src_bytes 0 zero-fills the destination without reading.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}


}  // namespace dualops::cuda::common

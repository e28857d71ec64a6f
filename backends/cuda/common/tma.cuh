// Hopper tensor-memory-accelerator (TMA) pieces: shared-memory mbarriers (init, plain arrivals,
// expected transaction bytes, phase wait, a hand-off between thread groups), the tensor map
// prefetch, the 2-D tiled bulk tensor copy global -> shared completing on an mbarrier, and (host)
// the encoding of a 2-D tensor map of 16-bit values with the 128-byte swizzle of the wgmma operand layout (common/wgmma.cuh), through
// the driver entry point so that the library does not link libcuda. sm_90a only (device parts).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace dualops::cuda::common {

// bar, dst: shared-window addresses (an mbarrier is 8 bytes, 8-byte aligned).
// Initializes `bar` for one arrival per phase (the thread that posts the transaction bytes).
__device__ __forceinline__ void mbar_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
// Initializes `bar` for `count` arrivals per phase (e.g. the consumer warps that free a slot).
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// One arrival on `bar`, without transaction bytes.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Makes initialized mbarriers visible to the async proxy (the TMA unit); a CTA barrier follows.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// This phase completes when `bytes` have landed (and this arrival is counted).
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "TMA_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra TMA_WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Hand-offs between thread groups through mbarriers `bars + 8i` (i < 32), each initialized for as
// many arrivals as its producer group has threads: every producer thread arrives once per
// hand-off after its writes (the arrival releases them), the consumers wait for the hand-off's
// phase (the wait acquires them). `parity` keeps the phase parity of each barrier as this thread
// has seen it, so every consumer must see every hand-off, and a producer must not arrive twice
// before each consumer has waited once (a parity wait cannot tell a phase from the one two
// later). cta_barrier(): every thread of the CTA arrives (the barrier's count), passes a
// __syncthreads() and then waits, finding the phase complete: a CTA barrier that also orders
// through the mbarrier (waiting on the mbarrier alone measured slower where the threads arrive
// far apart). compute-sanitizer's racecheck orders the accesses on either side of an mbarrier
// whatever other barriers the threads have passed, unlike those of a bar.arrive / bar.sync
// hand-off or a __syncthreads() between groups that passed unequal numbers of their own named
// barriers (benchmarks/cuda/racecheck_barriers.cu).
struct MbarHandoffs {
  uint32_t bars;
  uint32_t parity;
  __device__ __forceinline__ explicit MbarHandoffs(uint32_t bars_) : bars(bars_), parity(0) {}
  template <int I>
  __device__ __forceinline__ void arrive() {
    mbar_arrive(bars + 8 * I);
    parity ^= 1u << I;
  }
  template <int I>
  __device__ __forceinline__ void wait() {
    mbar_wait(bars + 8 * I, (parity >> I) & 1u);
    parity ^= 1u << I;
  }
  template <int I>
  __device__ __forceinline__ void cta_barrier() {
    mbar_arrive(bars + 8 * I);
    __syncthreads();
    wait<I>();
  }
};

// Fetches the tensor map's descriptor (e.g. a __grid_constant__ kernel parameter) into the TMA
// unit ahead of the first copy that uses it.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Box at coordinates (c0 inner, c1 outer) of the tensor map -> shared memory at `dst`; its bytes
// count towards `bar`'s transaction. Boxes past the tensor's bounds arrive as zeros.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The same copy with an L2 cache policy (e.g. cp_async.cuh's evict_first_policy() for a stream
// read once).
__device__ __forceinline__ void tma_load_2d_hint(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar,
                                                 uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], "
      "[%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "l"(policy)
      : "memory");
}

// Host: a 2-D map over `rows` rows of `inner` 16-bit values, `row_bytes` apart, read as boxes of
// 64 values (128 bytes, 128-byte swizzle) x `box_rows` rows; out-of-bounds boxes fill with zeros.
// False when the driver has no such entry point or rejects the description.
inline bool make_tmap_2d_16bit_sw128(CUtensorMap* map, const void* base, uint64_t inner, uint64_t rows,
                                     uint64_t row_bytes, uint32_t box_rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {inner, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {64, box_rows};
  const cuuint32_t elem[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(base), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace dualops::cuda::common

// Shared-memory mbarriers (sm_90) for producer / consumer hand-offs inside a CTA: init, the
// asynchronous arrival of a thread's completed cp.async copies, and the parity wait; plus the
// named-barrier forms used alongside them (arrive without waiting, OR-reduction).
#pragma once
#include <cstdint>

namespace dualops::cuda::common {

// One thread initializes; a CTA barrier must follow before any other thread uses it.
__device__ __forceinline__ void mbarrier_init(uint32_t addr, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
// Arrives on the barrier once every cp.async this thread issued so far has completed (the
// barrier's count includes this arrival: .noinc).
__device__ __forceinline__ void mbarrier_arrive_cp_async(uint32_t addr) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(addr) : "memory");
}
// Waits until the phase of parity `parity` has completed (acquire: the copies it tracked are visible).
__device__ __forceinline__ void mbarrier_wait(uint32_t addr, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(addr),
      "r"(parity)
      : "memory");
}

// Named barrier `id` over `count` threads: arrive without waiting (producer side) / arrive and wait.
__device__ __forceinline__ void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// Named barrier `id` over `count` threads that also ORs `v` over them.
__device__ __forceinline__ bool named_sync_or(int id, int count, bool v) {
  uint32_t r;
  asm volatile(
      "{\n"
      ".reg .pred p, q;\n"
      "setp.ne.u32 q, %1, 0;\n"
      "bar.red.or.pred p, %2, %3, q;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(v)), "r"(id), "r"(count)
      : "memory");
  return r != 0;
}

}  // namespace dualops::cuda::common

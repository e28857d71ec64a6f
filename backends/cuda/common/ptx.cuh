// Small PTX helpers shared by the CUDA kernels: values pinned in place, shared-memory addresses,
// acquire-release atomics, clocks, byte permutes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace dualops::cuda::common {

// Makes a value exist at this point of the program (an empty asm that takes it): the kernels
// compute addresses before their grid-dependency wait and keep the compiler from sinking them.
template <typename T>
__device__ __forceinline__ void pin(const T* p) { asm volatile("" ::"l"(p)); }
__device__ __forceinline__ void pin(uint32_t x) { asm volatile("" ::"r"(x)); }
__device__ __forceinline__ void pin(int64_t x) { asm volatile("" ::"l"(x)); }

// Atomic add at GPU scope with acquire-release semantics (the split merge's arrival counter:
// after a CTA barrier, one thread's release publishes the whole CTA's partials, and its
// acquire -- passed on by the next barrier -- lets the CTA read every other CTA's).
__device__ __forceinline__ int atom_add_acq_rel_gpu(int* p, int v) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// %globaltimer: the GPU's nanosecond clock, the same on every SM.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Number of SM ids of the GPU (%nsmid: at least the SMs present; ids may have gaps).
__device__ __forceinline__ uint32_t sm_id_count() {
  uint32_t n;
  asm("mov.u32 %0, %%nsmid;\n" : "=r"(n));
  return n;
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}


// max(a, b) that returns NaN when either is NaN (fmaxf returns the other operand): state
// merges use it so that a NaN partial cannot be dropped.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

}  // namespace dualops::cuda::common

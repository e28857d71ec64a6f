// Warp-level building blocks of the IFA kernels: cp.async, ldmatrix, mma.sync m16n8k16 and the
// 8-bit -> fp16 conversions that build mma B fragments straight from shared memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace dualops::cuda::ifa {

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

// 16-byte global -> shared copy that bypasses L1 (the cache is read once). src_bytes = 0 reads
// nothing and zero-fills the destination: rows past kv_len never touch memory, so whatever the
// unused cache slots hold (NaN) cannot reach the arithmetic.
// The K/V stream goes in with an evict-first L2 policy: it is read once, so it should not push
// out what is reused (q, block tables, the split partials). Measured +1 to +5 % on H200
// (BENCHMARKS.md v7); an L2::256B prefetch-size hint measured nothing and is not used.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
#if DUALOPS_IFA_ABLATE & 64
  if constexpr (true) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
    return;
  }
#endif
#if DUALOPS_IFA_ABLATE & 128
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
  return;
#endif
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes), "l"(evict_first_policy())
               : "memory");
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

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                                  uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// D += A * B, m16n8k16, fp32 accumulators. MT is the 16-bit operand type.
template <typename MT>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
#if DUALOPS_IFA_ABLATE & 2048  // measurement build: no tensor-core instruction (ifa_config.cuh)
  asm volatile("" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  return;
#endif
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if DUALOPS_IFA_ABLATE & 2048  // measurement build: no tensor-core instruction (ifa_config.cuh)
  asm volatile("" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  return;
#endif
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> one register of two 16-bit values (lo = first).
template <typename MT>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// p as a sum of two 16-bit values (hi + lo), so p.v on the tensor cores keeps ~16 mantissa
// bits of the softmax weights instead of 8 (bf16) or 11 (fp16).
template <typename MT>
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo);
template <>
__device__ __forceinline__ void split2<__nv_bfloat16>(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}
template <>
__device__ __forceinline__ void split2<__half>(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 hf = __half22float2(h);
  const __half2 l = __floats2half2_rn(a - hf.x, b - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// 8-bit cache values -> fp16 pairs. Both conversions are exact: int8 and e4m3 values are all
// representable in fp16, so the cache's scale/offset can be applied outside the mma.
struct Int8Cvt {
  // Words are pre-flipped (x ^ 0x80 = x + 128 as an unsigned byte) once per load.
  static __device__ __forceinline__ uint32_t prep(uint32_t w) { return w ^ 0x80808080u; }
  // bytes b0,b1 of x -> half2(b0, b1), and bytes b2,b3 -> half2(b2, b3): 0x64xx is 1024 + xx in
  // fp16, so 1024 + (x + 128) - 1152 = x.
  static __device__ __forceinline__ uint32_t lo(uint32_t x) { return fix(prmt(x, 0x64646464u, 0x5140)); }
  static __device__ __forceinline__ uint32_t hi(uint32_t x) { return fix(prmt(x, 0x64646464u, 0x5342)); }
  static __device__ __forceinline__ uint32_t fix(uint32_t v) {
    __half2 h = *reinterpret_cast<__half2*>(&v);
    h = __hsub2(h, __half2half2(__ushort_as_half(0x6480)));  // 1152
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

struct Fp8Cvt {
  static __device__ __forceinline__ uint32_t prep(uint32_t w) { return w; }
  static __device__ __forceinline__ uint32_t cvt(uint16_t x) {
    uint32_t d;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(d) : "h"(x));
    return d;
  }
  static __device__ __forceinline__ uint32_t lo(uint32_t x) { return cvt(static_cast<uint16_t>(x & 0xffffu)); }
  static __device__ __forceinline__ uint32_t hi(uint32_t x) { return cvt(static_cast<uint16_t>(x >> 16)); }
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace dualops::cuda::ifa

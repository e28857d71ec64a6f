// 16-bit float conversions shared by the kernels: to fp32 (from values or raw bits) and paired
// stores of two fp32 values as 16-bit ones.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace dualops::cuda::common {

template <typename T>
__device__ __forceinline__ float to_f32(T x);
template <>
__device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// A 16-bit q value from its raw bits.
template <typename T>
__device__ __forceinline__ float bits_to_f32(uint32_t x);
template <>
__device__ __forceinline__ float bits_to_f32<__half>(uint32_t x) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(x)));
}
template <>
__device__ __forceinline__ float bits_to_f32<__nv_bfloat16>(uint32_t x) { return __uint_as_float(x << 16); }

// Two output values at head-dim positions d0, d1 of one row (adjacent for 16-bit caches).
template <typename T>
__device__ __forceinline__ void store2(T* row, int d0, int d1, float v0, float v1) {
  if (d1 == d0 + 1 && (d0 & 1) == 0) {
    if constexpr (std::is_same_v<T, __half>) {
      *reinterpret_cast<__half2*>(row + d0) = __floats2half2_rn(v0, v1);
    } else {
      *reinterpret_cast<__nv_bfloat162*>(row + d0) = __floats2bfloat162_rn(v0, v1);
    }
  } else {
    if constexpr (std::is_same_v<T, __half>) {
      row[d0] = __float2half_rn(v0), row[d1] = __float2half_rn(v1);
    } else {
      row[d0] = __float2bfloat16_rn(v0), row[d1] = __float2bfloat16_rn(v1);
    }
  }
}

}  // namespace dualops::cuda::common

// Hopper warpgroup MMA (wgmma) pieces: shared-memory matrix descriptors (128-byte swizzle),
// the fences and group waits, and the SS forms (both operands in shared memory, fp32
// accumulators) of m64n64k16, m64n256k16 and m64nNk16 (N 8 / 16 / 32) for bf16 / fp16 inputs,
// and the RS form of m64n256k16 (A from registers). sm_90a only.
//
// Layouts (16-bit values, 128-byte swizzle: the 16-byte chunk c of row r of an 8-row, 1024-byte
// aligned group sits at chunk c ^ (r % 8)):
//  * K-major operand (A, or B of A * B^T): rows of 64 K values (128 bytes); groups of 8 rows
//    are `sbo` bytes apart (1024 for consecutive rows); `lbo` is unused (1). A k16 step advances
//    the start address by 32 bytes inside the rows.
//  * MN-major operand (B with N contiguous): rows of 64 N values (128 bytes) per K index; groups
//    of 8 K rows are `sbo` bytes apart, blocks of 64 N values `lbo` bytes apart.
// Accumulator fragment of m64nN (thread t of the warpgroup, warp w = t / 32, lane l): d[4j + e]
// is row 16w + l / 4 + 8 (e / 2), column 8j + 2 (l % 4) + e % 2 (mma.sync's C layout per n8 block).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

namespace dualops::cuda::common {

// Descriptor of a 128-byte-swizzled shared-memory operand starting at `addr` (shared-window
// byte address; the swizzle follows the address bits, so 8-row groups are 1024-byte aligned).
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t d = static_cast<uint64_t>((addr & 0x3ffffu) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3fffu) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3fffu) << 32;
  d |= 1ull << 62;  // layout type 1: 128-byte swizzle
  return d;
}

// Orders register accesses before the next wgmma (accumulators written by other instructions).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (st.shared, completed cp.async) visible
// to the async proxy (wgmma operand reads); a barrier then publishes them to the CTA.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across wgmma issue / wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define DUALOPS_WG_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define DUALOPS_WG_F16(i) DUALOPS_WG_F4(i), DUALOPS_WG_F4(i + 4), DUALOPS_WG_F4(i + 8), DUALOPS_WG_F4(i + 12)
#define DUALOPS_WG_F32(i) DUALOPS_WG_F16(i), DUALOPS_WG_F16(i + 16)
#define DUALOPS_WG_F64(i) DUALOPS_WG_F16(i), DUALOPS_WG_F16(i + 16), DUALOPS_WG_F16(i + 32), DUALOPS_WG_F16(i + 48)
#define DUALOPS_WG_F128 DUALOPS_WG_F64(0), DUALOPS_WG_F64(64)
#define DUALOPS_WG_REGS32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define DUALOPS_WG_REGS128 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// D (the warpgroup's 64 x N fp32 fragment) = A * B, plus D when `accumulate` != 0. MT: bf16 or
// fp16 inputs. TRANS_B: B is MN-major (N contiguous) instead of K-major. A is K-major.
#define DUALOPS_WGMMA_SS_ASM(SHAPE, TY, REGS, N0, N1, N2, N3, OPERANDS)                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" N2 ", 0;\n"                                          \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" REGS "}, %" N0 ", %" N1      \
               ", p, 1, 1, 0, %" N3 ";\n}\n"                                                            \
               : OPERANDS                                                                             \
               : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_B))

// m64nNk16 for small N (8, 16, 32: N / 2 accumulators per thread), SS, both operand majors as
// template flags (TRANS_A: A is MN-major, M contiguous; 16-bit inputs allow it).
#define DUALOPS_WG_REGS4 "%0, %1, %2, %3"
#define DUALOPS_WG_REGS8 DUALOPS_WG_REGS4 ", %4, %5, %6, %7"
#define DUALOPS_WG_REGS16 DUALOPS_WG_REGS8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define DUALOPS_WG_F8(i) DUALOPS_WG_F4(i), DUALOPS_WG_F4(i + 4)
#define DUALOPS_WGMMA_SST_ASM(SHAPE, TY, REGS, N0, N1, N2, N3, N4, ...)                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" N2 ", 0;\n"                                          \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" REGS "}, %" N0 ", %" N1      \
               ", p, 1, 1, %" N3 ", %" N4 ";\n}\n"                                                       \
               : __VA_ARGS__                                                                          \
               : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B))
#define DUALOPS_WGMMA_SST(SHAPE, REGS, N0, N1, N2, N3, N4, ...)                           \
  if constexpr (std::is_same_v<MT, __nv_bfloat16>) {                                    \
    DUALOPS_WGMMA_SST_ASM(SHAPE, "bf16", REGS, N0, N1, N2, N3, N4, __VA_ARGS__);           \
  } else {                                                                              \
    DUALOPS_WGMMA_SST_ASM(SHAPE, "f16", REGS, N0, N1, N2, N3, N4, __VA_ARGS__);             \
  }

template <typename MT, int N, int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64nNk16(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate) {
  static_assert(N == 8 || N == 16 || N == 32, "m64nNk16: N 8, 16 or 32");
  if constexpr (N == 8) {
    DUALOPS_WGMMA_SST("m64n8k16", DUALOPS_WG_REGS4, "4", "5", "6", "7", "8", DUALOPS_WG_F4(0))
  } else if constexpr (N == 16) {
    DUALOPS_WGMMA_SST("m64n16k16", DUALOPS_WG_REGS8, "8", "9", "10", "11", "12", DUALOPS_WG_F8(0))
  } else {
    DUALOPS_WGMMA_SST("m64n32k16", DUALOPS_WG_REGS16, "16", "17", "18", "19", "20", DUALOPS_WG_F16(0))
  }
}

template <typename MT, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  if constexpr (std::is_same_v<MT, __nv_bfloat16>) {
    DUALOPS_WGMMA_SS_ASM("m64n64k16", "bf16", DUALOPS_WG_REGS32, "32", "33", "34", "35", DUALOPS_WG_F32(0));
  } else {
    DUALOPS_WGMMA_SS_ASM("m64n64k16", "f16", DUALOPS_WG_REGS32, "32", "33", "34", "35", DUALOPS_WG_F32(0));
  }
}

template <typename MT, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t da, uint64_t db, int accumulate) {
  if constexpr (std::is_same_v<MT, __nv_bfloat16>) {
    DUALOPS_WGMMA_SS_ASM("m64n256k16", "bf16", DUALOPS_WG_REGS128, "128", "129", "130", "131",
                         DUALOPS_WG_F128);
  } else {
    DUALOPS_WGMMA_SS_ASM("m64n256k16", "f16", DUALOPS_WG_REGS128, "128", "129", "130", "131",
                         DUALOPS_WG_F128);
  }
}

// RS form: D (64 x 256 fp32) += A * B with A (64 x 16, K-major) from registers: a[0..3] of
// thread t (warp w, lane l) hold rows 16w + l / 4 (a[0], a[2]) and + 8 (a[1], a[3]), columns
// 2 (l % 4) + {0, 1} (a[0], a[1]) and + 8 (a[2], a[3]) as 16-bit pairs: the accumulator
// fragment of an m64n16 block, packed. TRANS_B: B is MN-major. The registers of `a` must keep
// their values until the instruction's group has been waited for.
#define DUALOPS_WGMMA_RS_ASM(TY)                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {" DUALOPS_WG_REGS128         \
               "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"                                \
               : DUALOPS_WG_F128                                                                      \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TRANS_B))

template <typename MT, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t db,
                                                    int accumulate) {
  if constexpr (std::is_same_v<MT, __nv_bfloat16>) {
    DUALOPS_WGMMA_RS_ASM("bf16");
  } else {
    DUALOPS_WGMMA_RS_ASM("f16");
  }
}

}  // namespace dualops::cuda::common

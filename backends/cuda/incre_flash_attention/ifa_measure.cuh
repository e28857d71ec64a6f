// Measurement hooks of the IFA kernels, in one place; every library build compiles them to nothing.
//
// DUALOPS_IFA_ABLATE = N (benchmarks/cuda/ifa_kernel_ablate.cu): each bit removes one part of the
// per-chunk work so its cost can be timed (results are wrong then; only the time is read).
// 1: q.k^T mma, 2: online softmax, 4: p.v mma, 8: bf16 p as one part instead of hi + lo, 16: q
// fragments in registers, 64: copies without the src-size operand (every row read), 128: copies
// without the L2 evict-first hint, 256: 8-bit caches with the scaled q as one fp16 part,
// 1024: return right after the grid-dependency wait (the launch floor), 2048: no tensor-core
// instruction (an empty asm takes the operands, so ptxas drops what builds them too).
//
// DUALOPS_IFA_TRACE = 1 (2: also an instruction-fetch probe): thread 0 of each CTA of two chosen
// calls records clock64 at the kernel's phase boundaries. The driver names the calls by their
// output pointer (g_ifa_trace_out); marks go to g_ifa_trace[call][cta][mark], with %globaltimer
// (ns) at entry and exit so that CTAs and calls can be lined up.
#pragma once
#include <cstdint>

#include "../common/cp_async.cuh"
#include "../common/mma.cuh"
#include "../common/ptx.cuh"

#ifndef DUALOPS_IFA_ABLATE
#define DUALOPS_IFA_ABLATE 0
#endif
#ifndef DUALOPS_IFA_TRACE
#define DUALOPS_IFA_TRACE 0
#endif

namespace dualops::cuda::ifa {

constexpr int kAblate = DUALOPS_IFA_ABLATE;

// The K/V copy (common::cp_async_16) with ablation bits 64 and 128.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  if constexpr ((kAblate & 64) != 0) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  } else if constexpr ((kAblate & 128) != 0) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
  } else {
    common::cp_async_16(dst, src, src_bytes);
  }
}

// The tensor-core mma (common::mma_16816) with ablation bit 2048.
template <typename MT>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr ((kAblate & 2048) != 0) {
    asm volatile("" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    common::mma_16816<MT>(d, a, b0, b1);
  }
}

using common::global_ns;

enum TraceMark : int {
  kTrEntry = 0,     // kernel entry (clock64)
  kTrWaited,        // griddepcontrol.wait returned
  kTrKvLen,         // kv_lens[b] arrived (the q loads are out too)
  kTrIssued,        // the first K/V copies are out
  kTrQRaw,          // the q tile's raw values arrived
  kTrQReady,        // q fragments in shared memory (barrier released)
  kTrFirstChunk,    // warp 0: its first chunk landed
  kTrLoopDone,      // warp 0: main loop done
  kTrAllDone,       // every warp's main loop done (first epilogue barrier released)
  kTrAluProbe,      // thread 0: a block of dependent integer ops in fresh code lines (trace level 2)
  kTrStatsMax,      // thread 0: its row's max over the warps (shared-memory reads)
  kTrStatsSum,      // thread 0: its row's weight sum (exp2 of each warp's max)
  kTrStats,         // the rows' merged m / l (third barrier)
  kTrEbuf,          // the warps' output fragments in shared memory (fourth barrier)
  kTrStored,        // out / partials stored
  kTrCounted,       // split merge: the arrival counter came back (last CTA only)
  kTrMerged,        // split merge done
  kTrGlobalEntry,   // %globaltimer at entry (ns)
  kTrGlobalExit,    // %globaltimer at exit (ns)
  kTrSmid,          // %smid of the CTA
  kTrMarks
};
constexpr int kTraceCtas = 4096;
// The combine kernel's CTAs of the same two calls: %smid, then %globaltimer (ns) at entry, when
// griddepcontrol.wait returned, when thread 0 had merged the groups' states and at exit.
enum CombineTraceMark : int { kCtSmid = 0, kCtEntry, kCtWaited, kCtMerged, kCtExit, kCtMarks };
constexpr int kTraceCombineCtas = 1024;

#if DUALOPS_IFA_TRACE
__device__ unsigned long long g_ifa_trace[2][kTraceCtas][kTrMarks];
__device__ const void* g_ifa_trace_out[2];
__device__ unsigned long long g_ifa_ctrace[2][kTraceCombineCtas][kCtMarks];

__device__ __forceinline__ unsigned long long sm_id() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

__device__ __forceinline__ unsigned long long trace_clock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}
// Forces the value to have arrived before the next mark: a predicated instruction with a side
// effect (a nanosleep no value takes) must wait for it, and the clock read stays after it. (A
// register move of the value, the first version, was dropped by ptxas, so a clock read could be
// taken before the value had arrived.)
__device__ __forceinline__ void trace_dep(uint32_t x) {
  asm volatile("{\n .reg .pred p;\n setp.eq.u32 p, %0, 0x7fbfffffU;\n @p nanosleep.u32 1;\n}\n" ::"r"(x) : "memory");
}
__device__ __forceinline__ void trace_dep(int x) { trace_dep(static_cast<uint32_t>(x)); }
__device__ __forceinline__ void trace_dep(float x) { trace_dep(__float_as_uint(x)); }

// Instruction-fetch probe (trace level 2): ~3 KB of straight-line integer code, no memory
// access, one copy in the image (noinline), so that a call before the stream can warm the lines
// a call after it runs (DUALOPS_IFA_TRACE_WARM).
__device__ __noinline__ uint32_t trace_probe(uint32_t x) {
#pragma unroll
  for (int i = 0; i < 64; ++i) x = (x ^ (x >> 13)) * 0x5bd1e995u + i;
  return x;
}

// This CTA's row of `tab` (the split kernel's g_ifa_trace or the combine kernel's g_ifa_ctrace),
// or nullptr when the call is not traced or this is not thread 0.
template <int CTAS, int MARKS>
__device__ __forceinline__ unsigned long long* trace_row(unsigned long long (&tab)[2][CTAS][MARKS], const void* out) {
  if (threadIdx.x != 0) return nullptr;
  const int cta = blockIdx.x + blockIdx.y * gridDim.x;
  if (cta >= CTAS) return nullptr;
  for (int k = 0; k < 2; ++k)
    if (out == g_ifa_trace_out[k]) return tab[k][cta];
  return nullptr;
}
#define DUALOPS_IFA_TRACE_BEGIN(out)                                   \
  const unsigned long long tr_c0_ = ::dualops::cuda::ifa::trace_clock(); \
  const unsigned long long tr_g0_ = ::dualops::cuda::ifa::global_ns(); \
  unsigned long long* const tr_row_ = ::dualops::cuda::ifa::trace_row(::dualops::cuda::ifa::g_ifa_trace, out); \
  if (tr_row_)                                                           \
  tr_row_[::dualops::cuda::ifa::kTrEntry] = tr_c0_, tr_row_[::dualops::cuda::ifa::kTrGlobalEntry] = tr_g0_, \
  tr_row_[::dualops::cuda::ifa::kTrSmid] = ::dualops::cuda::ifa::sm_id()
// The combine kernel's marks (kCt*, %globaltimer).
#define DUALOPS_IFA_CTRACE_BEGIN(out)                                              \
  unsigned long long* const ctr_row_ = ::dualops::cuda::ifa::trace_row(::dualops::cuda::ifa::g_ifa_ctrace, out); \
  if (ctr_row_)                                                                   \
  ctr_row_[::dualops::cuda::ifa::kCtSmid] = ::dualops::cuda::ifa::sm_id(),         \
  ctr_row_[::dualops::cuda::ifa::kCtEntry] = ::dualops::cuda::ifa::global_ns()
#define DUALOPS_IFA_CTRACE(m) \
  do { if (ctr_row_) ctr_row_[::dualops::cuda::ifa::m] = ::dualops::cuda::ifa::global_ns(); } while (0)
#define DUALOPS_IFA_MARK(m) \
  do { if (tr_row_) tr_row_[::dualops::cuda::ifa::m] = ::dualops::cuda::ifa::trace_clock(); } while (0)
// A mark right after a barrier. __syncthreads compiles to BAR.SYNC.DEFER_BLOCKING: the warp
// issues on past it and waits only at an instruction that needs the barrier (a shared-memory
// access), so a clock read right after it is taken before the barrier is released . This mark first reads a shared
// word (`word`) and waits for it.
#define DUALOPS_IFA_MARK_BAR(m, word)                                                    \
  do {                                                                                   \
    if (tr_row_) {                                                                       \
      int tr_x_ = *reinterpret_cast<volatile const int*>(word);                         \
      ::dualops::cuda::ifa::trace_dep(tr_x_);                                            \
      DUALOPS_IFA_MARK(m);                                                               \
    }                                                                                    \
  } while (0)
#define DUALOPS_IFA_MARK_EXIT() \
  do { if (tr_row_) tr_row_[::dualops::cuda::ifa::kTrGlobalExit] = ::dualops::cuda::ifa::global_ns(); } while (0)
#define DUALOPS_IFA_DEP(x) ::dualops::cuda::ifa::trace_dep(x)
// A stage function that marks inside takes the kernel's trace row as its last parameter.
#define DUALOPS_IFA_TRACE_PARAM , unsigned long long* const tr_row_
#define DUALOPS_IFA_TRACE_ARG , tr_row_
#else
#define DUALOPS_IFA_TRACE_BEGIN(out) \
  do {                               \
  } while (0)
#define DUALOPS_IFA_MARK(m) \
  do {                      \
  } while (0)
#define DUALOPS_IFA_MARK_EXIT() \
  do {                          \
  } while (0)
#define DUALOPS_IFA_MARK_BAR(m, word) \
  do {                                \
  } while (0)
#define DUALOPS_IFA_DEP(x) \
  do {                     \
  } while (0)
#define DUALOPS_IFA_CTRACE_BEGIN(out) \
  do {                                \
  } while (0)
#define DUALOPS_IFA_CTRACE(m) \
  do {                        \
  } while (0)
#define DUALOPS_IFA_TRACE_PARAM
#define DUALOPS_IFA_TRACE_ARG
#endif

}  // namespace dualops::cuda::ifa

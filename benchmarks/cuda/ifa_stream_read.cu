// K/V stream-read microbenchmark for the IFA split kernel's cache layout (BENCHMARKS.md, IFA
// CUDA section, "K/V load strategies"). Question: which load strategy reads a contiguous
// [B, S, H_kv, 128] bf16 K and V cache, one CTA per (batch, KV head, key range), as fast as
// cuDNN's SDPA kernel does (~4.6-4.7 TB/s on an H200 against our 4.2-4.3)?
//
// Every kernel does what the split kernel's loads do and nothing else: each CTA streams the K
// and V rows (256 B each, H_kv * 256 B apart) of its unit through shared memory (or registers
// for the plain-load variants) and XORs every 32-bit word it read into one word per call, so
// no load can be dropped; the XOR over the whole call must equal the XOR of the set's K and V
// words (checked once per variant and shape: it fails if any tile was skipped).
//
// Strategies: (a) per-warp cp.async over 16-key chunks (what the kernel does now), (b) per-CTA
// cp.async over 64/128-key tiles in a multi-stage ring (cuDNN's sm80 shape), (c) TMA tiles
// (cp.async.bulk.tensor.2d) on an mbarrier ring fed by one producer thread, (d) plain 16-B
// ld.global.nc loads, several in flight per thread, with optional L2 hints. Ceilings: a
// device-to-device cudaMemcpy and a grid-stride read of one contiguous buffer.
//
// Build and run: benchmarks/cuda/run_stream_read.sh (nvcc -O3 -std=c++17 -arch=sm_90a).
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.cuh"

constexpr int kD = 128;          // head dim
constexpr int kRowBytes = 256;   // one bf16 row of one head
constexpr int kPieces = 16;      // 16-B pieces per row

// One call's work: K and V of one set, split into units (b, h, split) of split_len keys.
struct Work {
  const char* k;  // [B, S, H, 128] bf16
  const char* v;
  int B, S, H, splits, split_len;
  unsigned* out;  // XOR of everything read, one word per call
  int64_t k_row0, v_row0;  // TMA only: first row of K / V of this set in the pool's 2D view
};

__device__ __forceinline__ void unit_of(const Work& w, int& b, int& h, int& k0, int& n) {
  int u = blockIdx.x;
  const int split = u % w.splits;
  u /= w.splits;
  h = u % w.H;
  b = u / w.H;
  k0 = split * w.split_len;
  n = min(w.split_len, w.S - k0);
}
__device__ __forceinline__ int64_t row_off(const Work& w, int b, int h, int key) {
  return ((static_cast<int64_t>(b) * w.S + key) * w.H + h) * kRowBytes;
}
__device__ __forceinline__ unsigned xor4(uint4 a) { return a.x ^ a.y ^ a.z ^ a.w; }
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(a));
  return r;
}
// XOR as a volatile asm: volatile asms keep their source order, so a batch of loads written
// before its XORs stays in flight together (with plain C++ XORs the compiler interleaves each
// XOR right after its load, which serializes the loads: seen in the SASS, 5 LDG in flight).
__device__ __forceinline__ void vxor(unsigned& acc, uint4 a) {
  asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n lop3.b32 %0, %0, %3, %4, 0x96;\n"
               : "+r"(acc)
               : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w));
}
// N shared-memory reads of 16 B at base + i * step, all issued before the first XOR.
template <int N>
__device__ __forceinline__ void lds_xor(unsigned& acc, uint32_t base, uint32_t step) {
  uint4 r[N];
#pragma unroll
  for (int i = 0; i < N; ++i) r[i] = lds128(base + i * step);
#pragma unroll
  for (int i = 0; i < N; ++i) vxor(acc, r[i]);
}
// CTA-wide XOR -> one atomic per CTA.
__device__ __forceinline__ void finish(const Work& w, unsigned acc) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicXor(w.out, acc);
}

// ---- L2 policies / hints ------------------------------------------------------------------
// HINT 0: none, 1: L2 evict_first (what the split kernel uses), 2: L2::256B prefetch.
__device__ __forceinline__ uint64_t evict_first() {
  uint64_t pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
template <int HINT>
__device__ __forceinline__ void cp16(uint32_t dst, const void* src) {
  if constexpr (HINT == 1) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "l"(evict_first())
                 : "memory");
  } else if constexpr (HINT == 2) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  }
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
template <int HINT>
__device__ __forceinline__ uint4 ldg128(const void* p) {
  uint4 r;
  if constexpr (HINT == 1) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "l"(evict_first()));
  } else if constexpr (HINT == 2) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  }
  return r;
}

// ---- (a) per-warp cp.async, 16-key chunks, STAGES deep (the split kernel's loader) ----------
// Warp w owns chunks w, w + NW, ...; lane -> row lane / 16 (+2 per copy), 16-B column lane % 16;
// each chunk is 8 copies of K and 8 of V per lane. Order per step as in the kernel: issue chunk
// j + STAGES - 1, commit, wait for chunk j, read it, __syncwarp.
// WORK > 0 adds WORK dependent-on-the-data FMAs per chunk and lane after the chunk is read
// (4 independent chains), standing in for the kernel's per-chunk math (v4 counted ~720
// instructions per chunk per warp): how much does consuming a chunk slow the stream?
// LS > 0: the lockstep pipeline (one chunk in flight per warp, the next issued once it lands;
// the CTA's warps step together). LS 1 as the split kernel's kWideLs: barrier, wait for the own
// chunk, issue the next; LS 2 as the per-CTA tiles: wait for the own chunk, barrier (every
// warp's chunk landed), issue the next.
template <int NW, int STAGES, int HINT, int WORK = 0, int LS = 0>
__global__ void __launch_bounds__(NW * 32) k_warp_cp(Work w) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kChunk = 16, kStage = kChunk * kRowBytes * 2;
  int b, h, k0, n;
  unit_of(w, b, h, k0, n);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_chunks = n / kChunk;  // split_len is a multiple of 128 here
  const int my = n_chunks > warp ? (n_chunks - 1 - warp) / NW + 1 : 0;
  const int lrow = lane / kPieces, lcol = lane % kPieces;
  const int64_t rstride = static_cast<int64_t>(w.H) * kRowBytes;
  const char* kl = w.k + row_off(w, b, h, k0 + warp * kChunk + lrow) + lcol * 16;
  const char* vl = w.v + row_off(w, b, h, k0 + warp * kChunk + lrow) + lcol * 16;
  const int64_t chunk_step = static_cast<int64_t>(NW) * kChunk * rstride;
  const uint32_t wbase = smem_addr(smem) + warp * STAGES * kStage;
  const uint32_t dst = wbase + lrow * kRowBytes + lcol * 16;
  auto issue = [&](int j) {
    const char* kp = kl + j * chunk_step;
    const char* vp = vl + j * chunk_step;
    const uint32_t so = (j % STAGES) * kStage;
#pragma unroll
    for (int i = 0; i < kChunk / 2; ++i) {
      cp16<HINT>(dst + so + i * 2 * kRowBytes, kp + i * 2 * rstride);
      cp16<HINT>(dst + so + kChunk * kRowBytes + i * 2 * kRowBytes, vp + i * 2 * rstride);
    }
  };
#pragma unroll
  for (int j = 0; j < STAGES - 1; ++j) {
    if (j < my && (j == 0 || LS == 0)) issue(j);
    cp_commit();
  }
  unsigned acc = 0;
  float sink = 0.f;
  const int lock_steps = n_chunks / NW;
  for (int j = 0; j < my; ++j) {
    if constexpr (LS > 0) {
      if (LS == 1 && j < lock_steps) asm volatile("bar.sync 1, %0;" ::"n"(NW * 32) : "memory");
      cp_wait<0>();
      if (LS == 2 && j < lock_steps) asm volatile("bar.sync 1, %0;" ::"n"(NW * 32) : "memory");
      __syncwarp();
      if (j + 1 < my) issue(j + 1);
      cp_commit();
    } else {
      if (j + STAGES - 1 < my) issue(j + STAGES - 1);
      cp_commit();
      cp_wait<STAGES - 1>();
      __syncwarp();
    }
    const uint32_t s = wbase + (j % STAGES) * kStage;
    lds_xor<kStage / (32 * 16)>(acc, s + lane * 16, 32 * 16);
    if constexpr (WORK > 0) {
      float f0 = __uint_as_float((acc & 0x007fffffu) | 0x3f800000u), f1 = f0 + 1.f, f2 = f0 + 2.f, f3 = f0 + 3.f;
#pragma unroll
      for (int i = 0; i < WORK / 4; ++i) {
        f0 = fmaf(f0, 0.999f, 0.5f), f1 = fmaf(f1, 0.998f, 0.25f);
        f2 = fmaf(f2, 0.997f, 0.125f), f3 = fmaf(f3, 0.996f, 0.0625f);
      }
      sink += f0 + f1 + f2 + f3;
    }
    __syncwarp();
  }
  cp_wait<0>();
  if (sink == 1234.5f) acc ^= 1u;  // keeps the FMAs alive; never true for these chains
  finish(w, acc);
}

// ---- (b) per-CTA cp.async tiles of TK keys (K and V), STAGES-deep ring ---------------------
// All NT threads copy one tile together (TK * 32 pieces of 16 B), CUTLASS multistage order:
// wait for tile t, barrier, refill the stage read at t - 1 with tile t + STAGES - 1, read t.
template <int NT, int TK, int STAGES, int HINT>
__global__ void __launch_bounds__(NT) k_cta_cp(Work w) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kTile = TK * kRowBytes * 2, kPer = TK * kPieces * 2 / NT;
  static_assert(kPer * NT == TK * kPieces * 2, "whole rounds");
  int b, h, k0, n;
  unit_of(w, b, h, k0, n);
  const int tid = threadIdx.x;
  const int n_tiles = n / TK;
  const int64_t rstride = static_cast<int64_t>(w.H) * kRowBytes;
  const char* kb = w.k + row_off(w, b, h, k0);
  const char* vb = w.v + row_off(w, b, h, k0);
  const uint32_t sbase = smem_addr(smem);
  auto issue = [&](int t) {
    const uint32_t so = sbase + (t % STAGES) * kTile;
    const int64_t to = static_cast<int64_t>(t) * TK * rstride;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int p = i * NT + tid;          // piece in the tile: K rows first, then V rows
      const int tensor = p / (TK * kPieces);
      const int q = p % (TK * kPieces);
      const int row = q / kPieces, col = q % kPieces;
      const char* src = (tensor ? vb : kb) + to + row * rstride + col * 16;
      cp16<HINT>(so + p * 16, src);
    }
  };
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < n_tiles) issue(t);
    cp_commit();
  }
  unsigned acc = 0;
  for (int t = 0; t < n_tiles; ++t) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    if (t + STAGES - 1 < n_tiles) issue(t + STAGES - 1);
    cp_commit();
    const uint32_t s = sbase + (t % STAGES) * kTile;
    constexpr int kReads = kTile / (NT * 16), kBatch = kReads < 16 ? kReads : 16;
#pragma unroll
    for (int i = 0; i < kReads; i += kBatch) lds_xor<kBatch>(acc, s + (i * NT + tid) * 16, NT * 16);
  }
  cp_wait<0>();
  finish(w, acc);
}

// ---- (c) TMA tiles on an mbarrier ring ----------------------------------------------------
// Warp 0 lane 0 produces: per tile one 2D bulk tensor copy of K and one of V (box 128 columns
// = one head x TK rows), completing on full[s]. NC consumer warps read the tile and arrive on
// empty[s]; the producer waits there before refilling stage s.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
template <int HINT>
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  if constexpr (HINT == 1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar), "l"(evict_first())
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
  }
}
template <int TK, int STAGES, int NC, int HINT>
__global__ void __launch_bounds__((NC + 1) * 32) k_tma(Work w, const __grid_constant__ CUtensorMap map) {
  extern __shared__ __align__(128) uint8_t smem[];  // aligned to 1024 below
  constexpr int kTile = TK * kRowBytes * 2;
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  int b, h, k0, n;
  unit_of(w, b, h, k0, n);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_tiles = n / TK;
  const uint32_t sbase = (smem_addr(smem) + 1023) & ~1023u;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbar_init(smem_addr(&full[s]), 1), mbar_init(smem_addr(&empty[s]), NC);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  unsigned acc = 0;
  if (warp == 0) {
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(&map) : "memory");
      const int64_t krow = w.k_row0 + static_cast<int64_t>(b) * w.S + k0;
      const int64_t vrow = w.v_row0 + static_cast<int64_t>(b) * w.S + k0;
      for (int t = 0; t < n_tiles; ++t) {
        const int s = t % STAGES;
        if (t >= STAGES) mbar_wait(smem_addr(&empty[s]), ((t / STAGES) - 1) & 1);
        const uint32_t fb = smem_addr(&full[s]);
        mbar_expect_tx(fb, kTile);
        const uint32_t dst = sbase + s * kTile;
        tma_2d<HINT>(dst, &map, h * kD, static_cast<int>(krow + t * TK), fb);
        tma_2d<HINT>(dst + kTile / 2, &map, h * kD, static_cast<int>(vrow + t * TK), fb);
      }
    }
  } else {
    const int ct = threadIdx.x - 32;
    for (int t = 0; t < n_tiles; ++t) {
      const int s = t % STAGES;
      mbar_wait(smem_addr(&full[s]), (t / STAGES) & 1);
      const uint32_t st = sbase + s * kTile;
      constexpr int kReads = kTile / (NC * 32 * 16), kBatch = kReads < 16 ? kReads : 16;
#pragma unroll
      for (int i = 0; i < kReads; i += kBatch) lds_xor<kBatch>(acc, st + (i * NC * 32 + ct) * 16, NC * 32 * 16);
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_addr(&empty[s]));
    }
  }
  finish(w, acc);
}

// ---- (d) plain 16-B loads into registers, U per tensor per thread in flight -----------------
template <int NT, int U, int HINT>
__global__ void __launch_bounds__(NT, 1) k_ldg(Work w) {
  int b, h, k0, n;
  unit_of(w, b, h, k0, n);
  const int tid = threadIdx.x;
  constexpr int kRowsPerStep = NT * U / kPieces;  // rows of K (and of V) per step
  const int64_t rstride = static_cast<int64_t>(w.H) * kRowBytes;
  const char* kb = w.k + row_off(w, b, h, k0) + (tid / kPieces) * rstride + (tid % kPieces) * 16;
  const char* vb = w.v + row_off(w, b, h, k0) + (tid / kPieces) * rstride + (tid % kPieces) * 16;
  constexpr int kRowsPerLoad = NT / kPieces;
  unsigned acc = 0;
  for (int r = 0; r < n; r += kRowsPerStep) {
    uint4 x[U], y[U];
    const int64_t o = static_cast<int64_t>(r) * rstride;
#pragma unroll
    for (int i = 0; i < U; ++i) x[i] = ldg128<HINT>(kb + o + i * kRowsPerLoad * rstride);
#pragma unroll
    for (int i = 0; i < U; ++i) y[i] = ldg128<HINT>(vb + o + i * kRowsPerLoad * rstride);
#pragma unroll
    for (int i = 0; i < U; ++i) vxor(acc, x[i]), vxor(acc, y[i]);
  }
  finish(w, acc);
}

// ---- ceilings and helpers ------------------------------------------------------------------
// Grid-stride contiguous read of n16 16-B words (fully coalesced, whole chip interleaved).
template <int U>
__global__ void __launch_bounds__(512, 1) k_read_flat(const uint4* p, int64_t n16, unsigned* out) {
  unsigned acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 x[U];
#pragma unroll
    for (int u = 0; u < U; ++u) x[u] = ldg128<0>(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) vxor(acc, x[u]);
  }
  for (; i < n16; i += stride) acc ^= xor4(ldg128<0>(p + i));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicXor(out, acc);
}
__global__ void k_fill(uint32_t* p, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32) * 40503u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    // two bf16 values with exponents in a normal range (never zero / NaN)
    p[i] = (x & 0x807f807fu) | 0x3c003c00u;
  }
}

// ---- host -----------------------------------------------------------------------------------
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeTiled g_encode = nullptr;

constexpr int kWarm = 3, kRuns = 25;
// One run = one call on every set (sets rotate so a run streams >= 3x L2); returns the median
// time of one call in microseconds.
static float time_calls(int n_sets, const std::function<void(int)>& call) {
  return median_us_per_call(0, n_sets, kWarm, kRuns, [&] {
    for (int s = 0; s < n_sets; ++s) call(s);
  });
}

struct Shape {
  const char* name;
  int B, S, H;
  int plan_splits;  // the split count our planner picks for this shape
};

struct Variant {
  std::string name;
  int threads;
  int smem;
  bool tma;
  int tile_keys;  // split_len must be a multiple of this
  void* fn;
};

template <typename K>
static void set_smem(K kern, int smem) {
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
}

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;  // --only A,B,...: run the variants whose name contains one of them
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") quick = true;
    if (std::string(argv[i]) == "--only" && i + 1 < argc) only = argv[++i];
  }
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const int sms = prop.multiProcessorCount;
  const int64_t l2 = prop.l2CacheSize;
  printf("device: %s, %d SMs, L2 %lld MB, smem/block opt-in %zu KB\n", prop.name, sms,
         static_cast<long long>(l2 >> 20), prop.sharedMemPerBlockOptin >> 10);

  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&g_encode), 12000,
                                      cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !g_encode) {
    fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    return 1;
  }

  std::vector<Shape> shapes = {
      {"h8/1 b1 s128k", 1, 131072, 1, 128},   {"h8/1 b16 s128k", 16, 131072, 1, 8},
      {"h32/8 b1 s32k", 1, 32768, 8, 16},     {"h32/8 b1 s128k", 1, 131072, 8, 16},
      {"h32/8 b16 s32k", 16, 32768, 8, 1},    {"h32/8 b16 s128k", 16, 131072, 8, 1},
      {"h128/128 b1 s32k", 1, 32768, 128, 1},
      // the BHSD layout (each head's keys contiguous) of h32/8 b16 s128k: B*H runs of S rows
      {"bhsd h32/8 b16 s128k", 128, 131072, 1, 1},
  };
  if (quick) shapes = {{"h32/8 b1 s128k", 1, 131072, 8, 16}};

  // Pool: the largest rotation of any shape (sets of [K | V], >= 3x L2 per run).
  const int64_t rot_bytes = 3 * l2;
  int64_t pool_bytes = 0;
  for (auto& s : shapes) {
    const int64_t set = 2LL * s.B * s.S * s.H * kRowBytes;
    const int64_t n_sets = std::max<int64_t>(1, (rot_bytes + set - 1) / set);
    pool_bytes = std::max(pool_bytes, n_sets * set);
  }
  char* pool;
  CK(cudaMalloc(&pool, pool_bytes));
  k_fill<<<sms * 8, 256>>>(reinterpret_cast<uint32_t*>(pool), pool_bytes / 4);
  CK(cudaGetLastError());
  unsigned* d_out;
  CK(cudaMalloc(&d_out, 64 * sizeof(unsigned)));
  CK(cudaDeviceSynchronize());
  printf("pool %.2f GB\n", pool_bytes / 1e9);

  // ---- ceilings ----
  {
    const int64_t half = std::min<int64_t>(pool_bytes / 2, 1LL << 30);
    const float us = time_calls(1, [&](int) { CK(cudaMemcpyAsync(pool + half, pool, half, cudaMemcpyDeviceToDevice)); });
    printf("CEIL  cudaMemcpy D2D %.0f MB: %.1f us, %.0f GB/s (read+write)\n", half / 1e6, us, 2.0 * half / us / 1e3);
    k_fill<<<sms * 8, 256>>>(reinterpret_cast<uint32_t*>(pool), pool_bytes / 4);  // restore the pattern
    CK(cudaDeviceSynchronize());
    for (int ctas : {sms, 2 * sms, 4 * sms}) {
      const int64_t bytes = std::min<int64_t>(pool_bytes, 2LL << 30);
      const float us2 = time_calls(1, [&](int) {
        k_read_flat<8><<<ctas, 512>>>(reinterpret_cast<const uint4*>(pool), bytes / 16, d_out);
      });
      printf("CEIL  flat read %.0f MB grid %d x 512 thr: %.1f us, %.0f GB/s\n", bytes / 1e6, ctas, us2, bytes / us2 / 1e3);
    }
  }

  // ---- variants ----
  std::vector<Variant> vars;
#define ADD(name, thr, smem, tma, tk, kern) \
  do {                                      \
    set_smem(kern, (smem));                 \
    vars.push_back({name, thr, smem, tma, tk, reinterpret_cast<void*>(kern)}); \
  } while (0)
  // (a) ours: wide = 8 warps x 3 stages (1 CTA/SM), narrow = 4 warps x 3 stages (2 CTAs/SM)
  ADD("a warp-cp 8w x3 ef (ours wide)", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1>));
  ADD("a warp-cp 8w x3 nohint", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 0>));
  ADD("a warp-cp 4w x3 ef (ours narrow)", 128, 4 * 3 * 8192, false, 128, (k_warp_cp<4, 3, 1>));
  ADD("a warp-cp 8w x2 ef", 256, 8 * 2 * 8192, false, 128, (k_warp_cp<8, 2, 1>));
  ADD("a warp-cp 8w x3 ef ls1 (kWideLs)", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 0, 1>));
  ADD("a warp-cp 8w x3 ef ls2 (tile order)", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 0, 2>));
  ADD("a warp-cp 8w x3 nohint ls1", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 0, 0, 1>));
  ADD("a+ 8w x3 ef +256 FMA/chunk", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 256>));
  ADD("a+ 8w x3 ef +512 FMA/chunk", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 512>));
  ADD("a+ 8w x3 ef +1024 FMA/chunk", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 1024>));
  ADD("a+ 4w x3 ef +512 FMA/chunk", 128, 4 * 3 * 8192, false, 128, (k_warp_cp<4, 3, 1, 512>));
  // (b) per-CTA tiles
  ADD("b cta-cp 128thr tk128 x2 nohint", 128, 2 * 65536, false, 128, (k_cta_cp<128, 128, 2, 0>));
  ADD("b cta-cp 128thr tk128 x3 nohint", 128, 3 * 65536, false, 128, (k_cta_cp<128, 128, 3, 0>));
  ADD("b cta-cp 256thr tk128 x3 nohint", 256, 3 * 65536, false, 128, (k_cta_cp<256, 128, 3, 0>));
  ADD("b cta-cp 256thr tk128 x3 ef", 256, 3 * 65536, false, 128, (k_cta_cp<256, 128, 3, 1>));
  ADD("b cta-cp 256thr tk128 x2 ef", 256, 2 * 65536, false, 128, (k_cta_cp<256, 128, 2, 1>));
  ADD("b cta-cp 128thr tk128 x2 ef", 128, 2 * 65536, false, 128, (k_cta_cp<128, 128, 2, 1>));
  ADD("b cta-cp 128thr tk64 x3 nohint", 128, 3 * 32768, false, 64, (k_cta_cp<128, 64, 3, 0>));
  ADD("b cta-cp 128thr tk64 x2 nohint", 128, 2 * 32768, false, 64, (k_cta_cp<128, 64, 2, 0>));
  // (c) TMA: 1 producer warp + 4 consumer warps
  ADD("c tma tk128 x3 nohint", 160, 3 * 65536 + 1024, true, 128, (k_tma<128, 3, 4, 0>));
  ADD("c tma tk128 x3 ef", 160, 3 * 65536 + 1024, true, 128, (k_tma<128, 3, 4, 1>));
  ADD("c tma tk64 x4 nohint", 160, 4 * 32768 + 1024, true, 64, (k_tma<64, 4, 4, 0>));
  ADD("c tma tk64 x6 nohint", 160, 6 * 32768 + 1024, true, 64, (k_tma<64, 6, 4, 0>));
  ADD("c tma tk64 x3 nohint", 160, 3 * 32768 + 1024, true, 64, (k_tma<64, 3, 4, 0>));
  ADD("c tma tk128 x2 nohint", 160, 2 * 65536 + 1024, true, 128, (k_tma<128, 2, 4, 0>));
  // (d) plain loads
  ADD("d ldg 256thr u4 nohint", 256, 0, false, 64, (k_ldg<256, 4, 0>));
  ADD("d ldg 256thr u8 nohint", 256, 0, false, 128, (k_ldg<256, 8, 0>));
  ADD("d ldg 256thr u8 ef", 256, 0, false, 128, (k_ldg<256, 8, 1>));
  ADD("d ldg 256thr u8 256B", 256, 0, false, 128, (k_ldg<256, 8, 2>));
  ADD("d ldg 512thr u8 nohint", 512, 0, false, 256, (k_ldg<512, 8, 0>));
#undef ADD

  printf("\n%-20s %-34s %6s %6s %9s %9s %5s %s\n", "shape", "variant", "splits", "ctas", "us", "GB/s", "ok",
         "ctas/SM(occ)");
  for (const auto& sh : shapes) {
    const int64_t tbytes = static_cast<int64_t>(sh.B) * sh.S * sh.H * kRowBytes;  // K (= V) bytes
    const int64_t set = 2 * tbytes;
    const int n_sets = static_cast<int>(std::max<int64_t>(1, (rot_bytes + set - 1) / set));
    // reference XOR of every set's K and V words
    std::vector<unsigned> ref(n_sets);
    for (int s = 0; s < n_sets; ++s) {
      CK(cudaMemset(d_out, 0, sizeof(unsigned)));
      k_read_flat<8><<<sms * 2, 512>>>(reinterpret_cast<const uint4*>(pool + s * set), set / 16, d_out);
      CK(cudaMemcpy(&ref[s], d_out, sizeof(unsigned), cudaMemcpyDeviceToHost));
    }
    // one tensor map per shape over the pool as [rows, H*128] bf16 (K of set s at row 2*s*R,
    // V at (2*s+1)*R with R = B*S rows)
    CUtensorMap maps[2];  // box rows 64 / 128
    const int64_t rows = pool_bytes / (static_cast<int64_t>(sh.H) * kRowBytes);
    for (int m = 0; m < 2; ++m) {
      cuuint64_t gdim[2] = {static_cast<cuuint64_t>(sh.H) * kD, static_cast<cuuint64_t>(rows)};
      cuuint64_t gstride[1] = {static_cast<cuuint64_t>(sh.H) * kRowBytes};
      cuuint32_t box[2] = {kD, m == 0 ? 64u : 128u};
      cuuint32_t estr[2] = {1, 1};
      CUresult r = g_encode(&maps[m], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, pool, gdim, gstride, box, estr,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
        return 1;
      }
    }
    const int64_t R = static_cast<int64_t>(sh.B) * sh.S;
    for (const auto& v : vars) {
      if (!only.empty()) {  // comma-separated substrings
        bool hit = false;
        for (size_t a = 0; a <= only.size();) {
          size_t e = only.find(',', a);
          if (e == std::string::npos) e = only.size();
          if (e > a && v.name.find(only.substr(a, e - a)) != std::string::npos) hit = true;
          a = e + 1;
        }
        if (!hit) continue;
      }
      for (int mult : {1, 2, 4}) {
        const int splits = sh.plan_splits * mult;
        const int split_len = sh.S / splits;
        if (split_len % v.tile_keys != 0 || split_len < v.tile_keys) continue;
        const int ctas = sh.B * sh.H * splits;
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.fn, v.threads, v.smem));
        auto launch = [&](int s) {
          Work w{pool + s * set, pool + s * set + tbytes, sh.B, sh.S, sh.H, splits, split_len, d_out + 1 + s,
                 2 * s * R, (2 * s + 1) * R};
          if (v.tma) {
            const CUtensorMap& mp = maps[v.tile_keys == 64 ? 0 : 1];
            void* args[] = {&w, const_cast<CUtensorMap*>(&mp)};
            CK(cudaLaunchKernel(v.fn, dim3(ctas), dim3(v.threads), args, v.smem, 0));
          } else {
            void* args[] = {&w};
            CK(cudaLaunchKernel(v.fn, dim3(ctas), dim3(v.threads), args, v.smem, 0));
          }
        };
        // correctness: one call per set from zero, XOR must match
        CK(cudaMemset(d_out, 0, 64 * sizeof(unsigned)));
        for (int s = 0; s < n_sets; ++s) launch(s);
        CK(cudaDeviceSynchronize());
        std::vector<unsigned> got(n_sets);
        CK(cudaMemcpy(got.data(), d_out + 1, n_sets * sizeof(unsigned), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int s = 0; s < n_sets; ++s) ok = ok && got[s] == ref[s];
        const float us = time_calls(n_sets, launch);
        printf("%-20s %-34s %6d %6d %9.1f %9.0f %5s %d\n", sh.name, v.name.c_str(), splits, ctas, us,
               set / us / 1e3, ok ? "ok" : "BAD", occ);
        fflush(stdout);
      }
    }
  }
  CK(cudaFree(pool));
  CK(cudaFree(d_out));
  return 0;
}

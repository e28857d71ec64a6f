// Compile-time shape of one IFA split-kernel variant: shared-memory layout of the K/V chunks
// (padded row pitches), CTA shapes, and the order in which head-dim positions meet the mma
// fragments.
//
// Loads: cp.async, 16 B per lane and copy, into rows padded so that no fragment read conflicts
// (a bulk-copy-per-row version was tried: the copies take uniform operands, so the compiler
// serialized them over the lanes and the kernel issued more instructions, not fewer).
//
// Work split inside a CTA: every warp owns whole 16-key chunks of the unit's key range
// (chunk c goes to warp c % kWarps) and runs its own cp.async pipeline over them, so the main
// loop needs no CTA barrier; each warp multiplies all M_TILE q rows by its keys (mma m16n8k16,
// the q rows are the M dimension) and keeps its own online-softmax state. The warps' partial
// results are merged once at the end.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "dualops/enums.h"

namespace dualops::cuda::ifa {

// Online softmax (ifa_split_kernel.cuh): a row's reference max moves only when a score passes it
// by more than kLazySlack (log2 units), so p <= 2^kLazySlack.
constexpr float kLazySlack = 8;

constexpr int kChunkKeys = 16;  // keys per warp chunk (one PV k-step)

// CTA shapes (kernel variants; the planner picks one per call: python/dualops/tiling/_ifa_launch.py).
// Wide: one CTA per SM holding all the SM's warps and pipeline bytes (grids of at most one CTA
// per SM, e.g. split-KV at batch 1). Narrow: half of that, so two CTAs share an SM and one's
// prologue / epilogue hides under the other's streaming (grids of many short units).
// Wide1: a wide CTA for units of at most one chunk per warp (kWarps x 16 keys): one chunk per
// main-loop step (kSub = 1), where the two-chunk step would compute a zero-filled chunk; a kernel
// of its own because a one-chunk step inside the two-chunk kernel re-schedules its main loop.
// WideLs: a wide CTA running the lockstep pipeline (one step's chunks in flight per warp, the
// CTA's warps stepping together; ifa_split_kernel.cuh); on 8-bit caches it also prefetches its
// first fill into L2. A kernel of its own so that the other kernels' main loops stay as they are.
// NarrowPf / WidePf: the narrow / wide CTA of an 8-bit cache that prefetches its first fill into
// L2 (the GPUs of little DRAM bandwidth per SM gain with it; the others lose, docs/tuning.md).
// The plan's codes (IfaCudaVariant, generated from ops/incre_flash_attention.yaml).
enum CtaShape : int {
  kNarrow = IfaCudaVariant::kNarrow,
  kWide = IfaCudaVariant::kWide,
  kWide1 = IfaCudaVariant::kWide1,
  kWideLs = IfaCudaVariant::kWideLockstep,
  kNarrowPf = IfaCudaVariant::kNarrowPrefetch,
  kWidePf = IfaCudaVariant::kWidePrefetch
};

template <typename QT, typename KVT, int D, int SHAPE>
struct Cfg {
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  using KV = KVT;
  static constexpr int kD = D;
  static constexpr bool kQuant = sizeof(KVT) == 1;  // int8 / fp8 e4m3 cache
  // mma operand type: bf16 only for a bf16 cache; fp16 otherwise (8-bit values convert to fp16
  // exactly, and fp16 keeps 3 more mantissa bits of the scaled q and of P).
  using MT = std::conditional_t<std::is_same_v<KVT, __nv_bfloat16>, __nv_bfloat16, __half>;
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(KVT));
  // Shared rows are unpadded (row r at r * kRowBytes, so every cp.async destination row is
  // 128-B aligned); the 16-B chunks of a row are XOR-permuted so the fragment builders read
  // without bank conflicts. (Rows padded by 16 B instead land a K/V chunk's copies misaligned,
  // which slows the DRAM stream.)
  //  16-bit K and V: ldmatrix reads one 16-B chunk of 8 consecutive rows -> chunk ^ (row & 7).
  //  8-bit K: a quarter-warp reads 4 chunks of 2 adjacent rows -> chunk ^ 4 on odd rows
  //    (64-B rows already sit in different bank halves).
  //  8-bit V: a quarter-warp (half-warp for D = 64) reads one chunk of rows 0, 2, 4, 6 ->
  //    chunk ^ 2 * ((row / 2) % 4) (D = 64: 64-B rows hold 4 chunks, 2-way conflicts remain).
  static __host__ __device__ __forceinline__ int k_swz(int row) {
    if constexpr (!kQuant) return row & 7;
    else return kRowBytes >= 128 ? (row & 1) << 2 : 0;
  }
  static __host__ __device__ __forceinline__ int v_swz(int row) {
    if constexpr (!kQuant) return row & 7;
    else return kRowBytes >= 128 ? ((row >> 1) & 3) << 1 : ((row >> 1) & 1) << 1;
  }
  // Byte offset of 16-B chunk c of row r in a stage's K / V rows.
  static __host__ __device__ __forceinline__ int k_at(int r, int c) { return r * kRowBytes + ((c ^ k_swz(r)) << 4); }
  static __host__ __device__ __forceinline__ int v_at(int r, int c) { return r * kRowBytes + ((c ^ v_swz(r)) << 4); }
  static constexpr int kTensorBytesK = kChunkKeys * kRowBytes;
  static constexpr int kStageBytes = 2 * kChunkKeys * kRowBytes;  // K rows then V rows
  static constexpr bool kNarrowCta = SHAPE == kNarrow || SHAPE == kNarrowPf;
  static constexpr int kWarps = !kNarrowCta ? ((!kQuant && D == 256) ? 4 : 8) : 4;
  static constexpr int kCtasPerSm = kNarrowCta ? 2 : 1;
  // K/V pipeline bytes per CTA: wide CTAs take most of an SM, narrow ones a bit under half.
  static constexpr int kSmemBudget = (kNarrowCta ? (kQuant ? 96 : 105) : (kQuant ? 200 : 210)) * 1024;
  static constexpr int kStagesFit = kSmemBudget / (kWarps * kStageBytes);
  static constexpr int kStages = kStagesFit < 2 ? 2 : (kStagesFit > 8 ? 8 : kStagesFit);
  // 16-key chunks per main-loop step: 2 where the pipeline keeps >= 4 chunks in flight while a
  // step computes (halves the per-key softmax, shuffle and loop work; 8-bit caches and D = 64),
  // else 1, and 1 in the one-chunk wide kernel (kWide1).
  static constexpr int kSub = SHAPE == kWide1 || kStages < 6 ? 1 : 2;
  static_assert(kStages > kSub, "a step's chunks and at least one more in flight");
  static constexpr bool kLockstep = SHAPE == kWideLs;
  static_assert(!kLockstep || kStages >= 2 * kSub, "lockstep pipeline: a step's chunks and the next step's");
  // Keys of the CTA's first pipeline fill ((kStages - kSub) chunks per warp) that are prefetched
  // into L2 before the grid-dependency wait (ifa_split_kernel.cuh). Every 16-bit kernel; of the
  // 8-bit ones only the variants the planner gives GPUs of little DRAM bandwidth per SM (the
  // lockstep kernel and the narrow and wide ones with the prefetch): compiled into the others it
  // slows the 8-bit calls of GPUs with more bandwidth per SM (docs/tuning.md).
  static constexpr int kPrefetchFills = !kQuant || kLockstep || SHAPE == kNarrowPf || SHAPE == kWidePf ? 1 : 0;
  static constexpr int kPrefetchKeys = kPrefetchFills * (kStages - kSub) * kWarps * kChunkKeys;
  // Paged caches prefetch only splits of at least two fills (512 keys at D 128): the block ids
  // are a load the prefetch waits for (prefetch_fill, ifa_split_kernel.cuh).
  static constexpr int kPagedPrefetchMinKeys = 2 * kPrefetchKeys;
  // int8 caches: the value scales / offsets go to shared memory with the first K/V copies, not
  // loaded per column in the epilogue. Not for fp8: there it helped small calls but slowed large
  // ones (the same main-loop instructions scheduled otherwise).
  static constexpr bool kVScalesInSmem = std::is_same_v<KVT, int8_t>;
  static constexpr int kKSteps = D / 16;  // q.k^T k-steps
  static constexpr int kNTiles = D / 8;   // p.v output n-tiles
  // 8-bit V: each lane reads kVW bytes of a row per load (see pv_d).
  static constexpr int kVW = (D / 8) < 16 ? (D / 8) : 16;
  // p.v takes p as hi + lo parts when the operand type is bf16 (8 mantissa bits are not enough
  // for the parity budget); fp16 p is exact to 11 bits and goes in one part.
  static constexpr int kPParts = std::is_same_v<MT, __nv_bfloat16> ? 2 : 1;

  // Head-dim position of k-index k (0..15) of q.k^T k-step ks. 16-bit caches: natural order
  // (ldmatrix). 8-bit: a lane reads 16 consecutive bytes of its key row, bytes 4s..4s+3 feed
  // k-step 4h+s as (k 2t, 2t+1, 2t+8, 2t+9); q's A fragments are laid out to match.
  static __host__ __device__ __forceinline__ int qk_d(int ks, int k) {
    if constexpr (!kQuant) {
      return ks * 16 + k;
    } else {
      const int h = ks / 4, s = ks % 4, t = (k % 8) / 2, hi = k / 8, lo = k % 2;
      return 64 * h + 16 * t + 4 * s + 2 * hi + lo;
    }
  }
  // Head-dim position of column c (0..7) of p.v output n-tile j. 8-bit: lane (g, t) reads kVW
  // bytes at byte u*8*kVW + g*kVW of its 4 key rows; byte jj of that run is n-tile u*kVW + jj.
  static __host__ __device__ __forceinline__ int pv_d(int j, int c) {
    if constexpr (!kQuant) return 8 * j + c;
    else return (j / kVW) * (8 * kVW) + c * kVW + (j % kVW);
  }
};

// Dynamic shared memory of the split kernel: K/V stages, q fragments (8-bit caches: a hi and
// a lo fp16 part; int8: the KV head's value scales and offsets), row statistics. The warps'
// output fragments are merged through the K/V stages once the main loop is done.
template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
struct SmemLayout {
  using C = Cfg<QT, KVT, D, SHAPE>;
  static constexpr int kQParts = C::kQuant ? 2 : 1;
  static constexpr int kKv = C::kWarps * C::kStages * C::kStageBytes;
  static constexpr int kQfrag = (M_TILE / 16) * C::kKSteps * kQParts * 32 * 16;
  static constexpr int kVScales = C::kVScalesInSmem ? 2 * D * 4 : 0;  // the head's value scales, offsets
  static constexpr int kRowInfo = M_TILE * (4 + 4 * 8);  // mask / pse / out / lse offsets i64, row_add f32
  static constexpr int kStats = (2 * C::kWarps + 2) * M_TILE * 4 + 16;  // warp m / l, final m / l; scratch
  static constexpr int kTotal = kKv + kQfrag + kVScales + kRowInfo + kStats;
  static_assert(C::kWarps * M_TILE * D * 4 <= kKv, "output merge reuses the K/V stages");
  static_assert(kTotal <= 227 * 1024, "fits one Hopper SM");
  static_assert(kKv % 16 == 0 && kQfrag % 16 == 0 && kVScales % 16 == 0, "16-B aligned regions");
};

}  // namespace dualops::cuda::ifa

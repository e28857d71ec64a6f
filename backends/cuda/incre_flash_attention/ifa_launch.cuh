// Launch of one (q dtype, cache dtype) family: picks the head-dim / q-tile variant, launches the
// split kernel on the plan's units and, with split-KV, the combine kernel. Instantiated once per
// dtype pair in ifa_<q>_<kv>.cu so the variants compile in parallel.
#pragma once
#include <cuda_runtime.h>
#include <dualops/params.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "ifa_combine_kernel.cuh"
#include "ifa_split_kernel.cuh"

namespace dualops::cuda::ifa {

// Largest q tile of a variant: the fp32 output accumulators (M_TILE x D per warp) must stay in
// registers, so M_TILE * D <= 4096.
template <int D>
constexpr int max_m_tile() { return 4096 / D; }

inline int pick_m_tile(int q_rows, int max_m) {
  const int m = q_rows <= 16 ? 16 : q_rows <= 32 ? 32 : 64;
  return m < max_m ? m : max_m;
}

inline int sm_count() {
  static const int n = [] {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return sms;
  }();
  return n;
}

// The integer in the environment variable `var` (a launcher override, for measurements and
// tests), else `fallback`.
inline int env_int(const char* var, int fallback) {
  const char* e = std::getenv(var);
  return e ? std::atoi(e) : fallback;
}

// DUALOPS_IFA_CTA_SHAPE = narrow | wide forces one CTA shape (for measurements), read once.
inline int shape_override() {
  static const int v = [] {
    const char* e = std::getenv("DUALOPS_IFA_CTA_SHAPE");
    if (!e) return -1;
    const std::string s(e);
    return s == "narrow" ? kNarrow : s == "wide" ? kWide : -1;
  }();
  return v;
}

// Peak DRAM bandwidth per SM (GB/s), from the memory clock and bus width, asked once (0: unknown).
inline double dram_gbps_per_sm() {
  static const double v = [] {
    int dev = 0, khz = 0, bits = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0.0;
    }
    return 2.0 * khz * 1e3 * bits / 8 / 1e9 / sm_count();  // double data rate
  }();
  return v;
}

// Keys of the plan's longest unit (a plan with whole groups: those units hold every key).
inline int64_t unit_keys(const IncreFlashAttentionTiling& t) {
  return t.whole_groups == 0 && t.split_len < t.max_kv_len ? t.split_len : t.max_kv_len;
}

// Grids of many short units, where narrow CTAs (4 warps, two per SM) beat wide ones: at least two
// CTAs per SM in all, q tiles of 16 rows, and each unit streaming at most
//  - on GPUs with >= 30 GB/s of DRAM bandwidth per SM (H200: 36; H100 SXM: 25): 1 MB of a 16-bit
//    cache with D <= 128 (D 256 wide CTAs have 4 warps already), 2 MB of an 8-bit one;
//  - below that: 256 KB of an 8-bit cache (16-bit caches: none).
// BENCHMARKS.md item 26, graph us, wide -> this rule. H200: b128 h32/8 s1k bf16 131.9 -> 129.3
// (with the stagger below), int8 111.6 -> 89.9, fp8 109.2 -> 88.9, D 64 bf16 80.9 -> 69.0; int8
// b128 h32/8 s8k 536.8 -> 517.0. Narrow there lost on bf16 s4k (+0.5 %), 16-bit D 256 s1k (+2 to
// +3 %) and int8 b48 h64/8 s16k (+5 %). H100 with the H200's limits: bf16 s1k-s2k -0.4 to +1.4 %,
// int8 / fp8 s1k -3 to -8 %, s2k +2 %, s8k -2 to +1 % (less bandwidth per SM: fewer streaming CTAs
// keep DRAM busy). Fewer CTAs than two per SM lose 7-30 % (half the warps stream a unit).
inline bool many_short_units(const IncreFlashAttentionTiling& t, int m_tile) {
  const bool quant = t.kv_dtype_bytes == 1;
  const bool fast_dram = dram_gbps_per_sm() >= 30.0;
  const int64_t ctas = static_cast<int64_t>(t.num_units) * ((t.q_rows + m_tile - 1) / m_tile);
  const int64_t unit_bytes = unit_keys(t) * t.head_dim * 2 * t.kv_dtype_bytes;
  const int64_t max_bytes = quant ? (fast_dram ? 2 << 20 : 256 << 10) : (fast_dram && t.head_dim <= 128 ? 1 << 20 : 0);
  return m_tile == 16 && ctas >= 2 * static_cast<int64_t>(sm_count()) && unit_bytes <= max_bytes;
}

// Wide CTAs (one per SM, 8 warps) for every grid but many short units (above). Narrow CTAs on a
// 16-bit cache, started together, were only level with wide ones (v11, v12): what pays there is
// that the two CTAs of an SM run out of step. DUALOPS_IFA_CTA_SHAPE forces one shape.
inline int pick_shape(const IncreFlashAttentionTiling& t, int m_tile) {
  const int o = shape_override();
  if (o >= 0) return o;
  return many_short_units(t, m_tile) ? kNarrow : kWide;
}

// Spread of the first wave's starts (ns; applied where the grid has more than one wave): 8 us
// for narrow CTAs on 16-bit caches (4 us: b16 h128/128 s1k 248.6 against 241.8 us), none
// otherwise (8-bit caches: 0-4 % faster without). DUALOPS_IFA_STAGGER_NS = N sets it for every
// call (0: none; for measurements), read once.
constexpr int kStaggerNs = 8000;
inline int stagger_ns(int shape, bool quant) {
  static const int v = env_int("DUALOPS_IFA_STAGGER_NS", -1);
  return v >= 0 ? v : (shape == kNarrow && !quant) ? kStaggerNs : 0;
}

// GPUs with < 30 GB/s of DRAM bandwidth per SM (the H100; the narrow-CTA rule's line), which the
// rules below single out; low_dram_bw_keys: a key length there, 0 (never) elsewhere.
inline bool low_dram_bw() { return dram_gbps_per_sm() < 30.0; }
inline int low_dram_bw_keys(int keys) { return low_dram_bw() ? keys : 0; }

// Splits of at least this many keys prefetch their second pipeline fill into L2 right after the
// grid-dependency wait (first wave only; ifa_split_kernel.cuh), on GPUs with < 30 GB/s of DRAM
// bandwidth per SM; 0: none. BENCHMARKS.md item 37, same-lease A/B, graph us: H100 b16 h32/8 s8k
// 177.8 -> 175.6, b16 h8/1 s32k 92.8 -> 92.2, paged64 -1 to -1.5 us, but the H200 +0.4 to +0.9 us
// on the same calls (121.2 -> 121.8); shorter splits lost 1.4 to 1.7 us in multi-call graphs
// (item 36: b1 h8/1 s128k, 1024-key splits), later waves of multi-wave grids +0.6 % (item 37).
// DUALOPS_IFA_SECOND_FILL_KEYS = N sets it for every call (0: none; for measurements), read once.
constexpr int kSecondFillKeys = 4096;
inline int second_fill_keys() {
  static const int v = env_int("DUALOPS_IFA_SECOND_FILL_KEYS", low_dram_bw_keys(kSecondFillKeys));
  return v;
}

// Units of at least this many keys run the lockstep-pipeline kernel (kWideLs; ifa_split_kernel.cuh:
// one step's chunks in flight per warp, the CTA's warps stepping together; on 8-bit caches also
// the first fill prefetched into L2) on GPUs with < 30 GB/s of DRAM bandwidth per SM; 0: none.
// 8-bit caches (BENCHMARKS.md item 40, same-lease A/B, H100 graph us, wide -> lockstep): int8 b16 h32/8 s32k
// 366.6 -> 348.8, b1 h32/8 s32k 31.5 -> 28.6, b16 h8/1 s32k 53.4 -> 51.0, paged64 b16 h32/8 s32k
// 372.9 -> 358.9, b16 h8/1 s8k (1024-key splits) 19.9 -> 19.5; fp8 alike; 512-key splits level.
// 16-bit caches: BENCHMARKS.md item 38, same-lease A/B, H100
// graph us: b16 h32/8 s32k 697.0 -> 693.5, b1 h128/128 s32k 705.5 -> 699.0, b1 h32/8 s128k
// 178.1 -> 176.6, b1 h32/8 s32k (2048-key splits) 47.7 -> 47.3; and the H200 loses (+0.3 to
// +1.3 % on most calls). Single-wave grids take it from 1024 keys (item 39, v29 kernel: b16 h32/8
// s1k 24.4 -> 24.0, paged64 b16 h8/1 s8k 26.7 -> 26.4 and b1 h8/1 s128k 27.2 -> 26.8, their
// contiguous calls level), multi-wave ones not (b128 h32/8 s1k 176.7 -> 182.1); 512-key splits
// lose (b1 h32/8 s8k 15.7 -> 16.1).
// 8-bit caches in single-wave grids take it from 4096 keys only: units of 1024-4095 keys run the
// wide kernel with the first-fill prefetch (kWidePf, wide_prefetch below) there, 0.1-0.6 us faster
// (item 41); 4096-key splits lose with it (item 40: b16 h8/1 s32k 51.0 -> 52.0).
// DUALOPS_IFA_LOCKSTEP_KEYS = N sets it for every call and grid (0: none; for measurements), read once.
constexpr int kLockstepKeys = 2048, kLockstepKeysOneWave = 1024, kLockstepKeysOneWave8Bit = 4096;
inline int lockstep_keys(bool one_wave, bool quant) {
  static const int forced = env_int("DUALOPS_IFA_LOCKSTEP_KEYS", -1);
  return forced >= 0 ? forced
                     : low_dram_bw_keys(!one_wave ? kLockstepKeys : quant ? kLockstepKeysOneWave8Bit : kLockstepKeysOneWave);
}

// Contiguous-cache units of at least this many keys run the lockstep kernel's burst order (the
// step's barrier after the wait: the CTA's next 128 keys go out together once all of the
// previous ones landed; ifa_split_kernel.cuh). BENCHMARKS.md item 39, same-lease A/B, H100 graph
// us: b16 h32/8 s32k 684.1 -> 676.7, b1 h128/128 s32k 690.1 -> 684.6, b16 h32/8 s128k 2747.2 ->
// 2710.2, b128 h8/1 s32k 687.7 -> 681.4; shorter units lose (b1 h32/8 s32k, 2048-key splits,
// 47.3 -> 48.0) and so do paged caches (paged64 b16 h32/8 s32k 700.0 -> 704.3). The H200 keeps
// lockstep_keys(..) at 0: it loses with either order.
// DUALOPS_IFA_LOCKSTEP_BURST_KEYS = N sets it (0: never), read once.
constexpr int kLockstepBurstKeys = 8192;
inline int lockstep_burst_keys() {
  static const int v = env_int("DUALOPS_IFA_LOCKSTEP_BURST_KEYS", kLockstepBurstKeys);
  return v;
}

// Narrow grids of an 8-bit cache run the narrow kernel that prefetches its first fill into L2
// (kNarrowPf) on GPUs with < 30 GB/s of DRAM bandwidth per SM. BENCHMARKS.md item 40, same-lease
// A/B, H100 graph us, narrow -> with the prefetch: int8 b128 h32/8 s1k 105.0 -> 101.6, b128 h64/8
// s1k 113.0 -> 108.4, b16 h128/128 s1k 193.1 -> 189.3, fp8 alike (-2.4 to -4.5 %); the H200's
// narrow 8-bit calls lose 1.3 % with it (item 23). DUALOPS_IFA_NARROW_PREFETCH = 0 | 1 sets it for
// every GPU (for tests and measurements), read once.
inline bool narrow_prefetch() {
  static const bool v = env_int("DUALOPS_IFA_NARROW_PREFETCH", low_dram_bw() ? 1 : 0) != 0;
  return v;
}

// Single-wave wide grids of an 8-bit cache run the wide kernel that prefetches its first fill into
// L2 (kWidePf) for units of some lengths:
// - GPUs with < 30 GB/s of DRAM bandwidth per SM (the H100): units of at least kWidePrefetchKeys
//   keys too short for the lockstep kernel (1024-4095). BENCHMARKS.md item 41, same-lease A/B,
//   H100 graph us, v30's kernels (lockstep from 1024 keys, else wide) -> these: int8 b1 h8/1
//   s128k (1024-key splits) 18.3 -> 17.7, b16 h8/1 s8k 18.2 -> 18.0, b1 h32/8 s32k (2048) 28.7 ->
//   28.5, b1 h64/8 s32k 29.3 -> 29.1, fp8 -0.2 to -0.3 us; 512-key splits lose (int8 b1 h32/8 s8k
//   13.0 -> 13.3-13.5), 256-key ones level.
// - Elsewhere (the H200): units of 2048 (fp8) or 4096 (int8) to 16384 keys. Item 42, H200 graph
//   us, wide -> kWidePf: fp8 b1 h32/8 s32k (2048) 23.5 -> 22.9, b16 h8/1 s32k (4096) 39.7 -> 38.4,
//   b1 h32/8 s128k (8192) 73.3 -> 72.0, b16 h8/1 s128k (16384) 132.4 -> 131.4; int8 24.0 -> 24.2
//   (2048: +0.1 to +0.3 in three leases), 40.3 -> 39.9, 72.8 -> 71.4, 134.5 -> 134.2; 1024-key units
//   lose (b16 h8/1 s8k fp8 15.4 -> 15.8, int8 15.9 -> 16.5) and so do 32768-key ones (b1 h128/128
//   s32k int8 248.7 -> 250.9, fp8 +0.6). (Compiled into every 8-bit kernel, the prefetch slowed
//   the H200's calls by 0.5-7 %: items 23 and 31.)
// DUALOPS_IFA_WIDE_PREFETCH = 0 | 1 turns it off everywhere / gives every call of a wide 8-bit
// kernel this one (for tests and measurements), read once.
constexpr int kWidePrefetchKeys = 1024;  // the H100
constexpr int kWidePrefetchKeysFp8Hbw = 2048, kWidePrefetchKeysInt8Hbw = 4096, kWidePrefetchMaxKeysHbw = 16384;
inline bool wide_prefetch(bool one_wave, int64_t keys, bool int8) {
  static const int forced = env_int("DUALOPS_IFA_WIDE_PREFETCH", -1);
  if (forced >= 0) return forced != 0;
  if (!one_wave || shape_override() >= 0) return false;
  if (low_dram_bw()) return keys >= kWidePrefetchKeys;
  return keys >= (int8 ? kWidePrefetchKeysInt8Hbw : kWidePrefetchKeysFp8Hbw) && keys <= kWidePrefetchMaxKeysHbw;
}

// DUALOPS_IFA_MERGE = kernel | counter | cluster forces one merge of split-KV partials where it
// applies (for measurements; cluster falls back to counter, counter to kernel), read once.
inline int merge_override() {
  static const int v = [] {
    const char* e = std::getenv("DUALOPS_IFA_MERGE");
    if (!e) return -1;
    const std::string s(e);
    return s == "kernel" ? kMergeKernel : s == "counter" ? kMergeCounter : s == "cluster" ? kMergeCluster : -1;
  }();
  return v;
}

// DUALOPS_IFA_PDL = 0 launches the split kernel the ordinary way (for measurements), read once.
inline bool split_pdl() {
  static const bool v = [] {
    const char* e = std::getenv("DUALOPS_IFA_PDL");
    return !(e != nullptr && std::string(e) == "0");
  }();
  return v;
}

// Partials one merging CTA may read (bytes): up to this, the last CTA of a group merges them
// (two or three rounds of loads in flight, no second kernel); beyond, the combine kernel spreads
// the merge over many CTAs (b1 h8/1 s128k: 128 splits x 8 rows x 512 B = 512 KB per group).
constexpr int64_t kMergeInKernelBytes = 128 * 1024;

// Clusters of `size` split-kernel CTAs that fit the GPU at once (cudaOccupancyMaxActiveClusters:
// one wide CTA per SM, and a cluster's CTAs on one GPC), asked once per variant and size.
template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
int max_active_clusters(int size) {
  static int cache[kMaxClusterSplits + 1] = {};  // 0: not asked yet; -1: none / error
  if (size < 1 || size > kMaxClusterSplits) return -1;
  if (cache[size] == 0) {
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeClusterDimension;
    a[0].val.clusterDim.x = static_cast<unsigned>(size);
    a[0].val.clusterDim.y = a[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(size));
    cfg.blockDim = dim3(Cfg<QT, KVT, D, SHAPE>::kWarps * 32);
    cfg.dynamicSmemBytes = SmemLayout<QT, KVT, D, M_TILE, SHAPE>::kTotal;
    cfg.attrs = a;
    cfg.numAttrs = 1;
    int n = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, ifa_split_kernel<QT, KVT, D, M_TILE, SHAPE>, &cfg);
    if (e != cudaSuccess) (void)cudaGetLastError();  // no clusters then; clear the error
    cache[size] = (e == cudaSuccess && n > 0) ? n : -1;
  }
  return cache[size];
}

// How a split-KV call merges its partials (MergeMode, ifa_split_kernel.cuh): up to 8 splits in
// thread-block clusters when all of the grid's clusters fit at once (else clusters wait for a
// second round: b16 h8/1 s1k, 16 clusters of 8, took 13.8 us against 9.0 with the counter
// merge -- BENCHMARKS.md v12), else up to kMergeInKernelBytes of partials by the last CTA to
// arrive, else the combine kernel.
template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
int merge_mode(const IncreFlashAttentionParams& p, const IncreFlashAttentionTiling& t) {
  if (t.num_splits == 1) return kMergeKernel;
  const int o = merge_override();
  if (o == kMergeKernel) return kMergeKernel;
  // (clusters are num_splits consecutive units: not with whole groups ahead of the split ones)
  if (o != kMergeCounter && ClusterMergeLayout<QT, KVT, D, M_TILE, SHAPE>::kFits &&
      t.num_splits <= kMaxClusterSplits && t.whole_groups == 0) {
    const int64_t clusters = static_cast<int64_t>(t.batch) * t.h_kv * ((t.q_rows + M_TILE - 1) / M_TILE);
    if (clusters <= max_active_clusters<QT, KVT, D, M_TILE, SHAPE>(t.num_splits)) return kMergeCluster;
  }
  const int64_t tiles = (t.q_rows + M_TILE - 1) / M_TILE;
  const int64_t rows = t.q_rows < M_TILE ? t.q_rows : M_TILE;
  if (p.merge_counters != nullptr && static_cast<int64_t>(t.batch) * t.h_kv * tiles <= kMaxMergeGroups &&
      static_cast<int64_t>(t.num_splits) * rows * D * 4 <= kMergeInKernelBytes)
    return kMergeCounter;
  return kMergeKernel;
}

template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
cudaError_t launch_variant(const IncreFlashAttentionParams& p, const IncreFlashAttentionTiling& t,
                           cudaStream_t stream) {
  using C = Cfg<QT, KVT, D, SHAPE>;
  constexpr int smem = SmemLayout<QT, KVT, D, M_TILE, SHAPE>::kTotal;
  auto kernel = ifa_split_kernel<QT, KVT, D, M_TILE, SHAPE>;
  // Raising the opt-in limit is a host-side attribute call, done once and before any capture.
  // Both kernels ask for the largest shared-memory carve-out, so an SM need not drain and
  // reconfigure its L1 / shared split between a split kernel and the combine kernel after it.
  static const cudaError_t attr = [&] {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(ifa_combine_kernel<QT, D>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    return e;
  }();
  if (attr != cudaSuccess) return attr;
  const int mode = merge_mode<QT, KVT, D, M_TILE, SHAPE>(p, t);
  // Both kernels go out as programmatic dependent launches: their CTAs are scheduled while the
  // kernel before them finishes (launch latency hidden) and wait in griddepcontrol.wait before
  // touching global memory. Works under stream capture too.
  cudaLaunchAttribute la[2];
  la[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  la[0].val.programmaticStreamSerializationAllowed = 1;
  // cluster merge: the num_splits consecutive units of a group form one cluster along x
  la[1].id = cudaLaunchAttributeClusterDimension;
  la[1].val.clusterDim.x = static_cast<unsigned>(t.num_splits);
  la[1].val.clusterDim.y = 1;
  la[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(t.num_units), static_cast<unsigned>((t.q_rows + M_TILE - 1) / M_TILE));
  cfg.blockDim = dim3(C::kWarps * 32);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute* attrs = la;
  unsigned n_attrs = 0;
  if (mode == kMergeCluster) {
    attrs = split_pdl() ? la : la + 1;
    n_attrs = split_pdl() ? 2 : 1;
  } else {
    n_attrs = split_pdl() ? 1 : 0;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n_attrs;
  // the first wave: this shape's CTAs on every SM
  const int wave = sm_count() * C::kCtasPerSm;
  const bool waves = static_cast<int64_t>(cfg.gridDim.x) * cfg.gridDim.y > wave;
  const int stagger = waves ? stagger_ns(SHAPE, C::kQuant) : 0;
  const int burst = SHAPE == kWideLs && p.block_table == nullptr && lockstep_burst_keys() > 0 &&
                    unit_keys(t) >= lockstep_burst_keys();
  cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, p, t, mode, wave, stagger, second_fill_keys(), burst);
  if (err != cudaSuccess || t.num_splits == 1 || mode != kMergeKernel) return err;
  cfg.attrs = la;
  cfg.numAttrs = 1;
  cfg.gridDim = dim3(static_cast<unsigned>((static_cast<int64_t>(t.batch) * t.h_kv - t.whole_groups) * t.q_rows),
                     static_cast<unsigned>(D / kCombineCols));
  cfg.blockDim = dim3(kCombineThreads);
  cfg.dynamicSmemBytes = 0;
  return cudaLaunchKernelEx(&cfg, ifa_combine_kernel<QT, D>, p, t);
}

// Variants whose wide kernel steps two chunks at a time have a one-chunk wide kernel (kWide1):
// it takes the calls where no warp holds more than one chunk (units of at most kWarps x 16 keys,
// e.g. 128-key splits or requests of up to 128 keys), which the two-chunk step would compute
// twice over. DUALOPS_IFA_CTA_SHAPE = wide keeps the two-chunk kernel (measurements).
template <typename QT, typename KVT, int D, int M_TILE>
constexpr bool has_wide1() {
  return M_TILE <= 32 && Cfg<QT, KVT, D, kWide>::kSub > 1;
}

// Variants of an 8-bit cache, and those whose wide kernel steps one chunk at a time on a 16-bit
// cache, have a lockstep one (kWideLs), which takes the units of at least lockstep_keys(one_wave)
// keys (the H100's long units). (16-bit D 64, two chunks a step, has none: not measured.)
template <typename QT, typename KVT, int D, int M_TILE>
constexpr bool has_wide_ls() {
  return Cfg<QT, KVT, D, kWide>::kQuant || Cfg<QT, KVT, D, kWide>::kSub == 1;
}

// Whether kernel variant SHAPE of (QT, KVT, D, M_TILE) is built: the narrow and wide ones always;
// variants of an 8-bit cache also have a narrow and a wide kernel with the first-fill prefetch
// (kNarrowPf: the narrow grids where narrow_prefetch() holds, the H100; kWidePf: the single-wave
// wide grids of units below lockstep_keys(..) where wide_prefetch() holds).
template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
constexpr bool has_variant() {
  if constexpr (SHAPE == kWide1) return has_wide1<QT, KVT, D, M_TILE>();
  else if constexpr (SHAPE == kWideLs) return has_wide_ls<QT, KVT, D, M_TILE>();
  else if constexpr (SHAPE == kNarrowPf || SHAPE == kWidePf) return Cfg<QT, KVT, D, kWide>::kQuant;
  else return true;
}

// f(std::integral_constant<int, SHAPE>{}) for variant `shape` (the wide kernel where that variant
// is not built): the one place that maps a run-time variant to its kernel.
template <typename QT, typename KVT, int D, int M_TILE, typename F>
auto with_variant(int shape, F&& f) {
  switch (shape) {
    case kNarrow:
      return f(std::integral_constant<int, kNarrow>{});
    case kNarrowPf:
      if constexpr (has_variant<QT, KVT, D, M_TILE, kNarrowPf>()) return f(std::integral_constant<int, kNarrowPf>{});
      break;
    case kWide1:
      if constexpr (has_variant<QT, KVT, D, M_TILE, kWide1>()) return f(std::integral_constant<int, kWide1>{});
      break;
    case kWideLs:
      if constexpr (has_variant<QT, KVT, D, M_TILE, kWideLs>()) return f(std::integral_constant<int, kWideLs>{});
      break;
    case kWidePf:
      if constexpr (has_variant<QT, KVT, D, M_TILE, kWidePf>()) return f(std::integral_constant<int, kWidePf>{});
      break;
  }
  return f(std::integral_constant<int, kWide>{});
}

template <typename QT, typename KVT, int D, int M_TILE>
int pick_variant(const IncreFlashAttentionTiling& t) {
  const int shape = pick_shape(t, M_TILE);
  if constexpr (has_variant<QT, KVT, D, M_TILE, kNarrowPf>()) {
    if (shape == kNarrow && narrow_prefetch()) return kNarrowPf;
  }
  if constexpr (has_wide1<QT, KVT, D, M_TILE>()) {
    if (shape == kWide && shape_override() < 0 && unit_keys(t) <= Cfg<QT, KVT, D, kWide>::kWarps * kChunkKeys)
      return kWide1;
  }
  const bool one_wave = static_cast<int64_t>(t.num_units) * ((t.q_rows + M_TILE - 1) / M_TILE) <= sm_count();
  if constexpr (has_wide_ls<QT, KVT, D, M_TILE>()) {
    const int min_keys = lockstep_keys(one_wave, Cfg<QT, KVT, D, kWide>::kQuant);
    if (shape == kWide && shape_override() < 0 && min_keys > 0 && unit_keys(t) >= min_keys) return kWideLs;
  }
  if constexpr (has_variant<QT, KVT, D, M_TILE, kWidePf>()) {
    if (shape == kWide && wide_prefetch(one_wave, unit_keys(t), std::is_same_v<KVT, int8_t>)) return kWidePf;
  }
  return shape;
}

template <typename QT, typename KVT, int D, int M_TILE>
cudaError_t launch_m(const IncreFlashAttentionParams& p, const IncreFlashAttentionTiling& t, cudaStream_t stream) {
  return with_variant<QT, KVT, D, M_TILE>(pick_variant<QT, KVT, D, M_TILE>(t), [&](auto shape) {
    return launch_variant<QT, KVT, D, M_TILE, decltype(shape)::value>(p, t, stream);
  });
}

template <typename QT, typename KVT, int D>
cudaError_t launch_head_dim(const IncreFlashAttentionParams& p, const IncreFlashAttentionTiling& t,
                            cudaStream_t stream) {
  constexpr int kMax = max_m_tile<D>();
  switch (pick_m_tile(t.q_rows, kMax)) {
    case 16:
      return launch_m<QT, KVT, D, 16>(p, t, stream);
    case 32:
      if constexpr (kMax >= 32) return launch_m<QT, KVT, D, 32>(p, t, stream);
      break;
    case 64:
      if constexpr (kMax >= 64) return launch_m<QT, KVT, D, 64>(p, t, stream);
      break;
  }
  return cudaErrorInvalidValue;
}

template <typename QT, typename KVT, int D, int M_TILE>
int smem_m(const IncreFlashAttentionTiling& t) {
  return with_variant<QT, KVT, D, M_TILE>(pick_variant<QT, KVT, D, M_TILE>(t), [](auto shape) {
    return SmemLayout<QT, KVT, D, M_TILE, decltype(shape)::value>::kTotal;
  });
}

template <typename QT, typename KVT, int D>
int smem_head_dim(const IncreFlashAttentionTiling& t) {
  constexpr int kMax = max_m_tile<D>();
  switch (pick_m_tile(t.q_rows, kMax)) {
    case 16:
      return smem_m<QT, KVT, D, 16>(t);
    case 32:
      if constexpr (kMax >= 32) return smem_m<QT, KVT, D, 32>(t);
      break;
    case 64:
      if constexpr (kMax >= 64) return smem_m<QT, KVT, D, 64>(t);
      break;
  }
  return 0;
}

template <typename QT, typename KVT>
cudaError_t launch_family(const IncreFlashAttentionParams& p, const IncreFlashAttentionTiling& t,
                          cudaStream_t stream) {
  switch (t.head_dim) {
    case 64:
      return launch_head_dim<QT, KVT, 64>(p, t, stream);
    case 128:
      return launch_head_dim<QT, KVT, 128>(p, t, stream);
    case 256:
      return launch_head_dim<QT, KVT, 256>(p, t, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename QT, typename KVT>
int smem_family(const IncreFlashAttentionTiling& t) {
  switch (t.head_dim) {
    case 64:
      return smem_head_dim<QT, KVT, 64>(t);
    case 128:
      return smem_head_dim<QT, KVT, 128>(t);
    case 256:
      return smem_head_dim<QT, KVT, 256>(t);
  }
  return 0;
}

}  // namespace dualops::cuda::ifa

// One declaration per family, defined in ifa_<q>_<kv>.cu.
#define DUALOPS_IFA_FAMILY(NAME)                                                                     \
  namespace dualops::cuda::ifa {                                                                     \
  cudaError_t launch_##NAME(const IncreFlashAttentionParams&, const IncreFlashAttentionTiling&, \
                            cudaStream_t);                                                           \
  int smem_##NAME(const IncreFlashAttentionTiling&);                                                 \
  }
DUALOPS_IFA_FAMILY(bf16_bf16)
DUALOPS_IFA_FAMILY(f16_f16)
DUALOPS_IFA_FAMILY(bf16_int8)
DUALOPS_IFA_FAMILY(f16_int8)
DUALOPS_IFA_FAMILY(bf16_fp8)
DUALOPS_IFA_FAMILY(f16_fp8)
#undef DUALOPS_IFA_FAMILY

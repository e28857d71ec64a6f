// Launch of one (q dtype, cache dtype) family: picks the head-dim / q-tile variant, launches the
// split kernel on the plan's units and, with split-KV, the combine kernel. Instantiated once per
// dtype pair in ifa_<q>_<kv>.cu so the variants compile in parallel.
#pragma once
#include <cuda_runtime.h>
#include <dualops/params.h>

#include <cstdlib>
#include <string>

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

// Wide CTAs (one per SM) for every grid. Narrow ones (two per SM, one's start-up and merge
// hidden under the other's streaming) won multi-wave grids with the padded v8 layout; with the
// swizzled one wide CTAs are level or ahead everywhere measured (BENCHMARKS.md v11: b128 h32/8
// s1k 131.8 vs 137.2 us, b128 h8/1 s32k 538.1 vs 545.5, b1 h8/1 s8k 8.3 vs 9.8). Narrow stays
// selectable with DUALOPS_IFA_CTA_SHAPE=narrow.
inline int pick_shape(const IncreFlashAttentionTiling& t, int m_tile) {
  const int o = shape_override();
  (void)t, (void)m_tile;
  return o >= 0 ? o : kWide;
}

// DUALOPS_IFA_MERGE = kernel forces the separate combine kernel for every split-KV call (for
// measurements), read once.
inline bool merge_kernel_forced() {
  static const bool v = [] {
    const char* e = std::getenv("DUALOPS_IFA_MERGE");
    return e != nullptr && std::string(e) == "kernel";
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

template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
bool merge_in_kernel(const IncreFlashAttentionParams& p, const IncreFlashAttentionTiling& t) {
  if (t.num_splits == 1 || p.merge_counters == nullptr || merge_kernel_forced()) return false;
  const int64_t tiles = (t.q_rows + M_TILE - 1) / M_TILE;
  const int64_t rows = t.q_rows < M_TILE ? t.q_rows : M_TILE;
  return static_cast<int64_t>(t.batch) * t.h_kv * tiles <= kMaxMergeGroups &&
         static_cast<int64_t>(t.num_splits) * M_TILE * 4 <= SmemLayout<QT, KVT, D, M_TILE, SHAPE>::kKv &&
         static_cast<int64_t>(t.num_splits) * rows * D * 4 <= kMergeInKernelBytes;
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
  const int fused = merge_in_kernel<QT, KVT, D, M_TILE, SHAPE>(p, t) ? 1 : 0;
  // Both kernels go out as programmatic dependent launches: their CTAs are scheduled while the
  // kernel before them finishes (launch latency hidden) and wait in griddepcontrol.wait before
  // touching global memory. Works under stream capture too.
  cudaLaunchAttribute la[1];
  la[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  la[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(t.num_units), static_cast<unsigned>((t.q_rows + M_TILE - 1) / M_TILE));
  cfg.blockDim = dim3(C::kWarps * 32);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = la;
  cfg.numAttrs = split_pdl() ? 1 : 0;
  cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, p, t, fused);
  if (err != cudaSuccess || t.num_splits == 1 || fused) return err;
  cfg.numAttrs = 1;
  cfg.gridDim = dim3(static_cast<unsigned>(static_cast<int64_t>(t.batch) * t.h_kv * t.q_rows),
                     static_cast<unsigned>(D / kCombineCols));
  cfg.blockDim = dim3(kCombineThreads);
  cfg.dynamicSmemBytes = combine_smem_bytes(t.num_splits);
  return cudaLaunchKernelEx(&cfg, ifa_combine_kernel<QT, D>, p, t);
}

template <typename QT, typename KVT, int D, int M_TILE>
cudaError_t launch_m(const IncreFlashAttentionParams& p, const IncreFlashAttentionTiling& t, cudaStream_t stream) {
  return pick_shape(t, M_TILE) == kWide ? launch_variant<QT, KVT, D, M_TILE, kWide>(p, t, stream)
                                        : launch_variant<QT, KVT, D, M_TILE, kNarrow>(p, t, stream);
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
  return pick_shape(t, M_TILE) == kWide ? SmemLayout<QT, KVT, D, M_TILE, kWide>::kTotal
                                        : SmemLayout<QT, KVT, D, M_TILE, kNarrow>::kTotal;
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

// Launch of one (q dtype, cache dtype) family: launches the split-kernel variant and q tile the
// plan names (python/dualops/tiling/_ifa_launch.py makes every launch choice) on the plan's units
// and, with split-KV, the combine kernel. Instantiated once per
// dtype pair in ifa_<q>_<kv>.cu so the variants compile in parallel.
#pragma once
#include <cuda_runtime.h>
#include <dualops/params.h>

#include <type_traits>

#include "../common/check.cuh"
#include "ifa_combine_kernel.cuh"
#include "ifa_split_kernel.cuh"

namespace dualops::cuda::ifa {

// Largest q tile of a variant: the fp32 output accumulators (M_TILE x D per warp) must stay in
// registers, so M_TILE * D <= 4096.
template <int D>
constexpr int max_m_tile() { return 4096 / D; }

// Clusters of `size` split-kernel CTAs that fit the GPU at once (cudaOccupancyMaxActiveClusters:
// one wide CTA per SM, and a cluster's CTAs on one GPC), asked once per variant and size. A fact
// of the GPU, not a choice: a plan's cluster merge falls back to its merge_fallback when the grid's
// clusters would not all fit at once (they would wait for a second round).
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
    const bool ok = common::query_ok(cudaOccupancyMaxActiveClusters(&n, ifa_split_kernel<QT, KVT, D, M_TILE, SHAPE>, &cfg));
    cache[size] = (ok && n > 0) ? n : -1;  // (no clusters on an error)
  }
  return cache[size];
}

// The plan's merge of split-KV partials (MergeMode, ifa_split_kernel.cuh) as this launch can run
// it: the cluster merge needs every cluster resident at once and each CTA's slice of the tile's
// rows x (D / 4) merge slots within its threads (else the plan's fallback), the counter merge
// the arrival counters (absent in a graph captured before the glue allocated them: then the
// combine kernel).
template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
int merge_mode(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t) {
  int mode = t.merge;
  if (mode == kMergeCluster) {
    const int64_t clusters = static_cast<int64_t>(t.batch) * t.h_kv * ((t.q_rows + M_TILE - 1) / M_TILE);
    const int slice = ((M_TILE < t.q_rows ? M_TILE : t.q_rows) * (D / 4) + t.num_splits - 1) / t.num_splits;
    if (clusters > max_active_clusters<QT, KVT, D, M_TILE, SHAPE>(t.num_splits) ||
        slice > Kern<QT, KVT, D, M_TILE, SHAPE>::NT)
      mode = t.merge_fallback;
  }
  if (mode == kMergeCounter && p.merge_counters == nullptr) mode = kMergeKernel;
  return mode;
}

template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
cudaError_t launch_variant(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
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
    attrs = t.pdl ? la : la + 1;
    n_attrs = t.pdl ? 2 : 1;
  } else {
    n_attrs = t.pdl ? 1 : 0;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n_attrs;
  // first wave, stagger, second-fill prefetch and burst order: the plan's
  DUALOPS_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, p, t, mode, static_cast<int>(t.wave_ctas),
                                      static_cast<int>(t.stagger_ns), static_cast<int>(t.second_fill_keys),
                                      static_cast<int>(t.lockstep_burst)));
  if (t.num_splits == 1 || mode != kMergeKernel) return cudaSuccess;
  cfg.attrs = la;
  cfg.numAttrs = 1;
  cfg.gridDim = dim3(static_cast<unsigned>((static_cast<int64_t>(t.batch) * t.h_kv - t.whole_groups) * t.q_rows),
                     static_cast<unsigned>(D / kCombineCols));
  cfg.blockDim = dim3(kCombineThreads);
  cfg.dynamicSmemBytes = 0;
  return cudaLaunchKernelEx(&cfg, ifa_combine_kernel<QT, D>, p, t);
}

// Variants the build has (python/dualops/tiling/_ifa_launch.py has_variant mirrors this; the
// planner names only built ones, and the host entry rejects a plan that names another):
//  - kWide1 (one chunk per step) where the wide kernel steps two chunks at a time;
//  - kWideLs (lockstep pipeline) on 8-bit caches and where the wide kernel steps one chunk;
//  - kNarrowPf and kWidePf (first-fill L2 prefetch) on 8-bit caches;
//  - kNarrow and kWide always.
template <typename QT, typename KVT, int D, int M_TILE>
constexpr bool has_wide1() {
  return M_TILE <= 32 && Cfg<QT, KVT, D, kWide>::kSub > 1;
}
template <typename QT, typename KVT, int D, int M_TILE>
constexpr bool has_wide_ls() {
  return Cfg<QT, KVT, D, kWide>::kQuant || Cfg<QT, KVT, D, kWide>::kSub == 1;
}
template <typename QT, typename KVT, int D, int M_TILE, int SHAPE>
constexpr bool has_variant() {
  if constexpr (SHAPE == kWide1) return has_wide1<QT, KVT, D, M_TILE>();
  else if constexpr (SHAPE == kWideLs) return has_wide_ls<QT, KVT, D, M_TILE>();
  else if constexpr (SHAPE == kNarrowPf || SHAPE == kWidePf) return Cfg<QT, KVT, D, kWide>::kQuant;
  else return true;
}

// f(std::integral_constant<int, SHAPE>{}) for variant `shape` (the wide kernel where that variant
// is not built; variant_built() rejects such plans first): the one place that maps a run-time
// variant to its kernel.
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
bool variant_built_m(int shape) {
  switch (shape) {
    case kNarrow:
    case kWide:
      return true;
    case kNarrowPf:
      return has_variant<QT, KVT, D, M_TILE, kNarrowPf>();
    case kWide1:
      return has_variant<QT, KVT, D, M_TILE, kWide1>();
    case kWideLs:
      return has_variant<QT, KVT, D, M_TILE, kWideLs>();
    case kWidePf:
      return has_variant<QT, KVT, D, M_TILE, kWidePf>();
  }
  return false;
}

template <typename QT, typename KVT, int D, int M_TILE>
cudaError_t launch_m(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t, cudaStream_t stream) {
  return with_variant<QT, KVT, D, M_TILE>(t.variant, [&](auto shape) {
    return launch_variant<QT, KVT, D, M_TILE, decltype(shape)::value>(p, t, stream);
  });
}

template <typename QT, typename KVT, int D>
cudaError_t launch_head_dim(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
                            cudaStream_t stream) {
  constexpr int kMax = max_m_tile<D>();
  switch (t.cta_m_tile) {
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
int smem_m(const IncreFlashAttentionCudaTiling& t) {
  if (!variant_built_m<QT, KVT, D, M_TILE>(t.variant)) return 0;
  return with_variant<QT, KVT, D, M_TILE>(t.variant, [](auto shape) {
    return SmemLayout<QT, KVT, D, M_TILE, decltype(shape)::value>::kTotal;
  });
}

template <typename QT, typename KVT, int D>
int smem_head_dim(const IncreFlashAttentionCudaTiling& t) {
  constexpr int kMax = max_m_tile<D>();
  switch (t.cta_m_tile) {
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
cudaError_t launch_family(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
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
int smem_family(const IncreFlashAttentionCudaTiling& t) {
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
  cudaError_t launch_##NAME(const IncreFlashAttentionCudaParams&, const IncreFlashAttentionCudaTiling&, \
                            cudaStream_t);                                                           \
  int smem_##NAME(const IncreFlashAttentionCudaTiling&);                                                 \
  }
DUALOPS_IFA_FAMILY(bf16_bf16)
DUALOPS_IFA_FAMILY(f16_f16)
DUALOPS_IFA_FAMILY(bf16_int8)
DUALOPS_IFA_FAMILY(f16_int8)
DUALOPS_IFA_FAMILY(bf16_fp8)
DUALOPS_IFA_FAMILY(f16_fp8)
#undef DUALOPS_IFA_FAMILY

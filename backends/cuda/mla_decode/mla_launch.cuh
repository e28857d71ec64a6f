// Launch of one MLA decode variant: the split kernel (params.kernel: mma.sync or wgmma), then
// (when any request may be split) the combine kernel chained with programmatic dependent
// launch. Instantiated once per (q dtype, cache format, d_qk) in the small mla_<q>_<cache>.cu
// files so they compile in parallel.
#pragma once
#include <cuda_runtime.h>

#include "mla_combine_kernel.cuh"
#include "mla_decode_kernel.cuh"
#include "mla_wg_kernel.cuh"

namespace dualops::cuda::mla {

// need_combine: some request of the plan has more than one split (always for device plans,
// whose split count the host does not know).
template <typename MT, int FMT, int D>
cudaError_t launch_variant(const MlaDecodeParams& p, const MlaDecodeTiling& t, bool need_combine,
                           cudaStream_t stream) {
  const dim3 grid(t.num_m_blocks, t.h_kv, t.num_sm_parts);
  if (p.kernel == kKernelWgmma) {
    using Tw = Traits<MT, FMT, D, kKernelWgmma>;
    static const cudaError_t attr = cudaFuncSetAttribute(
        mla_wg_split_kernel<Tw>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tw::kSmemBytes);
    if (attr != cudaSuccess) return attr;
    mla_wg_split_kernel<Tw><<<grid, kThreads, Tw::kSmemBytes, stream>>>(p, t);
  } else {
    using Tr = Traits<MT, FMT, D>;
    // Raising the opt-in shared-memory limit is a host-side attribute call, done once (before any capture).
    static const cudaError_t attr = cudaFuncSetAttribute(
        mla_split_kernel<Tr>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    if (attr != cudaSuccess) return attr;
    mla_split_kernel<Tr><<<grid, kThreads, Tr::kSmemBytes, stream>>>(p, t);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || !need_combine) return err;
  cudaLaunchAttribute la[1];
  la[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  la[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((t.q_rows + kCombineWarps - 1) / kCombineWarps, t.batch, 1);
  cfg.blockDim = dim3(kCombineWarps * 32, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = la;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, mla_combine_kernel<MT>, p, t);
}

#define DUALOPS_MLA_INSTANTIATE(MT, FMT, D)                                                                  \
  template cudaError_t launch_variant<MT, FMT, D>(const MlaDecodeParams&, const MlaDecodeTiling&, bool, \
                                                  cudaStream_t);

}  // namespace dualops::cuda::mla

// Declaration of the per-variant launchers (defined by the mla_<q>_<cache>.cu instantiation files).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <dualops/params.h>
#include <dualops/tiling.h>

namespace dualops::cuda::mla {
// MlaDecodeCudaParams::kernel codes (mla_config.cuh KernelKind) and the most q rows (s_q * h_q) of
// the transposed-tile wgmma kernel (MlaCudaKernel::kWgmmaT).
constexpr int kNumKernels = MlaCudaKernel::kCount;
constexpr int kWtMaxRows = 32;
template <typename MT, int FMT, int D>
cudaError_t launch_variant(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, bool need_combine,
                           cudaStream_t stream);
}  // namespace dualops::cuda::mla

// The CUDA building blocks the IFA kernels use: the shared ones of backends/cuda/common (cp.async,
// ldmatrix / mma, PTX helpers, PDL, paged addresses, 16-bit conversions, the log-sum-exp partial
// merge) made visible in this namespace, and the measurement hooks (ifa_measure.cuh: the K/V copy
// and the mma with their ablation bits).
#pragma once
#include "../common/convert.cuh"
#include "../common/cp_async.cuh"
#include "../common/lse_merge.cuh"
#include "../common/mma.cuh"
#include "../common/paged.cuh"
#include "../common/pdl.cuh"
#include "../common/ptx.cuh"
#include "ifa_measure.cuh"

namespace dualops::cuda::ifa {
using namespace ::dualops::cuda::common;  // (ifa::cp_async_16 and ifa::mma_16816 hide common's)
}  // namespace dualops::cuda::ifa

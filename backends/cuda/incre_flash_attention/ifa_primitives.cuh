// The CUDA building blocks the IFA kernels use: the shared ones of backends/cuda/common (cp.async,
// ldmatrix / mma, PTX helpers, PDL, paged addresses, 16-bit conversions, the log-sum-exp partial
// merge) made visible in this namespace.
#pragma once
#include "../common/convert.cuh"
#include "../common/cp_async.cuh"
#include "../common/lse_merge.cuh"
#include "../common/mma.cuh"
#include "../common/paged.cuh"
#include "../common/pdl.cuh"
#include "../common/ptx.cuh"

namespace dualops::cuda::ifa {
using namespace ::dualops::cuda::common;
}  // namespace dualops::cuda::ifa

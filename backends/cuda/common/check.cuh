// Host-side CUDA error checks for launchers: return the first error, clearing a sticky launch
// error state they caused themselves (occupancy queries and the like).
#pragma once
#include <cuda_runtime.h>

// Evaluates a cudaError_t expression and returns it from the enclosing function when it failed.
#define DUALOPS_CUDA_TRY(expr)                   \
  do {                                           \
    const cudaError_t dualops_err_ = (expr);     \
    if (dualops_err_ != cudaSuccess) return dualops_err_; \
  } while (0)

namespace dualops::cuda::common {

// The error of an optional query (e.g. cudaOccupancyMaxActiveClusters): cleared from the
// runtime's last-error state so that a later launch check does not see it; true when it worked.
inline bool query_ok(cudaError_t e) {
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e == cudaSuccess;
}

}  // namespace dualops::cuda::common

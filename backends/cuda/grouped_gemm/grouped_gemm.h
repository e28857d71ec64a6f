// Host entry of the CUDA grouped GEMM (no torch types): params struct, tile M, stream.
#pragma once

#include <cuda_runtime.h>

#include "dualops/params.h"

namespace dualops::cuda {

// nullptr when the call can run, else what is wrong (checked before launch).
const char* grouped_gemm_check(const GroupedGemmParams& p, int tile_m);
// Launch on `stream`; nullptr or an error message.
const char* grouped_gemm(const GroupedGemmParams& p, int tile_m, cudaStream_t stream);

}  // namespace dualops::cuda

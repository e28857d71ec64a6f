// Host entry of the CUDA grouped GEMM (no torch types): params struct, tile M, stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "dualops/params.h"

namespace dualops::cuda {

// nullptr when the call can run, else what is wrong: the checks that keep the kernel in bounds
// (the argument checks are the Python API's, docs/internals.md).
const char* grouped_gemm_check(const GroupedGemmParams& p, int tile_m);
// The launch alone on `stream`, for callers that ran grouped_gemm_check; nullptr or an error message.
const char* grouped_gemm_launch(const GroupedGemmParams& p, int tile_m, cudaStream_t stream);
// grouped_gemm_check, then grouped_gemm_launch.
const char* grouped_gemm(const GroupedGemmParams& p, int tile_m, cudaStream_t stream);

// The CUTLASS sm90 path (compute-bound groups; docs/grouped_gemm_cuda.md): built only with the
// CUTLASS headers. Recipes bf16 -> bf16, fp16 -> fp16, fp8 per_tensor / rowwise / blockwise ->
// bf16; N * output size must be a multiple of 16 bytes. config: 0 large tiles, 1 small tiles
// (bf16, fp8 per_tensor / rowwise), 2 fp8 per_tensor / rowwise with tensor-core-only
// accumulation, 3 large tiles in 1 x 2 clusters (bf16, fp8 per_tensor / rowwise) (gg_sm90.h).
bool grouped_gemm_sm90_built();
// nullptr when the call can run on it, else why not.
const char* grouped_gemm_sm90_check(const GroupedGemmParams& p, int config);
// Device workspace bytes of the call (per-group arrays, converted scales, CUTLASS's own).
const char* grouped_gemm_sm90_workspace(const GroupedGemmParams& p, int config, size_t* bytes);
// Launch with `ws_bytes` of device workspace at `ws` (256-byte aligned), for callers that ran
// grouped_gemm_sm90_check.
const char* grouped_gemm_sm90_launch(const GroupedGemmParams& p, int config, void* ws, size_t ws_bytes,
                                     cudaStream_t stream);
// grouped_gemm_sm90_check, then grouped_gemm_sm90_launch.
const char* grouped_gemm_sm90(const GroupedGemmParams& p, int config, void* ws, size_t ws_bytes,
                              cudaStream_t stream);

}  // namespace dualops::cuda

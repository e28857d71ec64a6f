// The CUTLASS sm90 path's kernels (gg_sm90.cuh) as the host entry sees them, without the CUTLASS
// headers: one per (recipe, configuration), each with one output dtype (the planner sends other
// output dtypes to the mma.sync kernel). Configurations: 0 large tiles, 1 small tiles (groups
// of <= 64 rows), 2 fp8 with tensor-core-only accumulation (opt-in), 3 the large tiles in 1 x 2
// clusters (the planner's table of rows per group: tiling/grouped_gemm.py).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "dualops/params.h"

namespace dualops::cuda::gg {

enum Sm90Recipe : int {
  kSm90Bf16 = 0, kSm90Bf16Small, kSm90Fp16, kSm90Fp8, kSm90Fp8Small, kSm90Fp8Fast, kSm90Fp8Blockwise,
  kSm90Bf16Mid, kSm90Fp8Mid
};
// The binding's config codes (GgSm90Config, generated from ops/grouped_gemm.yaml).
enum Sm90Config : int {
  kSm90Large = GgSm90Config::kSm90,
  kSm90Small = GgSm90Config::kSm90Small,
  kSm90Fast = GgSm90Config::kSm90Fast,
  kSm90Mid = GgSm90Config::kSm90Mid
};
// Config bits above the kernel's id: the tile scheduler's raster order (0: along M, 1: along N).
constexpr int kSm90ConfigMask = 0xff;
constexpr int kSm90AlongN = GgSm90Config::kAlongN;
static_assert(kSm90AlongN > kSm90ConfigMask, "the raster bit lies above the config ids");

// ws == nullptr: stores the workspace bytes the call needs in *ws_bytes. Otherwise runs the
// call with *ws_bytes bytes of device workspace at ws. nullptr or an error message.
template <int R>
const char* sm90_recipe(const GroupedGemmParams& p, void* ws, size_t* ws_bytes, int sms, int along_n,
                        cudaStream_t stream);

}  // namespace dualops::cuda::gg

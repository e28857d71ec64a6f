// The CUTLASS sm90 path's recipes (gg_sm90.cuh) as the host entry sees them, without the CUTLASS
// headers. Each recipe has one output dtype (the planner sends other output dtypes to the
// mma.sync kernel).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "dualops/params.h"

namespace dualops::cuda::gg {

enum Sm90Recipe : int { kSm90Bf16 = 0, kSm90Fp16, kSm90Fp8 };

// ws == nullptr: stores the workspace bytes the call needs in *ws_bytes. Otherwise runs the
// call with *ws_bytes bytes of device workspace at ws. nullptr or an error message.
template <int R>
const char* sm90_recipe(const GroupedGemmParams& p, void* ws, size_t* ws_bytes, int sms, cudaStream_t stream);

}  // namespace dualops::cuda::gg

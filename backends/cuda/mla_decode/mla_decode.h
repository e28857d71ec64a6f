// Host entry of the CUDA MLA decode: pointer-level, no torch types. The params struct carries
// device addresses (the packed plan's device copy in `plan`), q strides, the cache format and
// head dim; the tiling struct is the packed MLA plan's header (total_splits < 0: a plan made on
// the device, whose split count the host does not know). Returns nullptr on success, else a
// message naming what is wrong.
#pragma once
#include <cuda_runtime.h>

#include <dualops/params.h>
#include <dualops/tiling.h>

namespace dualops::cuda {

// The checks that keep the kernels in bounds (plan header, kernel choice, pointers, alignment):
// nullptr when fine. The argument checks are the Python API's (docs/internals.md).
const char* mla_decode_check(const MlaDecodeCudaParams& params, const MlaDecodeTiling& tiling);
// The launch alone, for callers that ran mla_decode_check on these arguments.
const char* mla_decode_launch(const MlaDecodeCudaParams& params, const MlaDecodeTiling& tiling, cudaStream_t stream);
// mla_decode_check, then mla_decode_launch.
const char* mla_decode(const MlaDecodeCudaParams& params, const MlaDecodeTiling& tiling, cudaStream_t stream);

// Fills `plan` (int32, device, header + parts + num_splits of the header's sizes) with the MLA
// schedule for the device lengths `cache_seqlens` [header.batch]; `header` gives the shape fields.
const char* mla_plan_on_device(const int* cache_seqlens, int* plan, const MlaDecodeTiling& header,
                               cudaStream_t stream);

}  // namespace dualops::cuda

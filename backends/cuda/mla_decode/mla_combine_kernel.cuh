// The combine kernel: merges the split partials of every request with more than one split (one
// q row per warp, mla_merge_row). Launched as a programmatic dependent of the split kernels that
// do not merge in-kernel.
#pragma once
#include "mla_merge.cuh"

namespace dualops::cuda::mla {

constexpr int kCombineWarps = 4;  // one q row per warp, 16 value columns per lane

template <typename MT>
__global__ void __launch_bounds__(kCombineWarps * 32)
    mla_combine_kernel(const __grid_constant__ MlaDecodeCudaParams p, const __grid_constant__ MlaDecodeTiling t) {
  pdl_wait();  // the split kernel's partials are complete and visible
  const int b = blockIdx.y, lane = threadIdx.x & 31;
  const int row = blockIdx.x * kCombineWarps + (threadIdx.x >> 5);
  const int* ns = static_cast<const int*>(p.plan) + kHeaderInts + t.num_sm_parts * t.part_stride;
  const int first = ns[b], n = ns[b + 1] - first;
  if (n <= 1 || row >= t.q_rows) return;
  mla_merge_row<MT>(p, t, b, row, first, n, lane);
}

}  // namespace dualops::cuda::mla

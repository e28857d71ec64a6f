// Paged KV caches: block index and in-block slot of a logical key position (block sizes are
// powers of two in practice: shifts, else divisions), and a checked block-table read.
#pragma once
#include <cstdint>

namespace dualops::cuda::common {

struct PageMath {
  int size = 0, shift = -1;
  __device__ __forceinline__ explicit PageMath(int bs) : size(bs) {
    if (bs > 0 && (bs & (bs - 1)) == 0) shift = __ffs(bs) - 1;
  }
  __device__ __forceinline__ int block(int kc) const { return shift >= 0 ? kc >> shift : kc / size; }
  __device__ __forceinline__ int slot(int kc) const { return shift >= 0 ? kc & (size - 1) : kc % size; }
};

// Block id j of a request's block-table row, or -1 when it is not a block of the pool (ids the
// caller must not follow: a kernel then zero-fills instead of reading).
__device__ __forceinline__ int block_id(const int* row, int j, int64_t num_blocks) {
  const int blk = row[j];
  return blk >= 0 && blk < num_blocks ? blk : -1;
}

}  // namespace dualops::cuda::common

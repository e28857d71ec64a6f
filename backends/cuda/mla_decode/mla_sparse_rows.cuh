// Sparse MLA decode: the key lists of the split kernels, compacted before they run. One CTA per
// (request b, query token i) list kr = b * s_q + i walks indices[b, i, :topk_length[b]] and then
// extra_indices[b, i, :extra_topk_length[b]] in order, keeps the entries that name a token of
// their pool (0 <= id < num_blocks * page_block_size of kv_cache, resp. of extra_kv_cache) and
// writes them to list kr of key_rows (extra-pool rows as ~id), then the list's length (layout:
// key_list_cols in mla_config.cuh). With p.sort_keys (plan data) the main pool's kept keys are
// sorted by token id, so that the split kernels' gathers of neighbouring keys share DRAM pages;
// otherwise, and for the extra pool's keys, they keep the reference's order. The split kernels
// then attend a list like a dense request of that length: invalid entries (-1, ids past the pool,
// entries past topk_length) are never read.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_radix_sort.cuh>

#include "mla_config.cuh"

namespace dualops::cuda::mla {

constexpr int kSparseThreads = 256;
constexpr int kSparsePer = 8;  // consecutive entries per thread and round
constexpr int kSortPer = 16;   // keys per thread of the sort
constexpr int kSortMaxKeys = kSparseThreads * kSortPer;  // (MLA_CUDA_SORT_MAX_KEYS in the Python planner)
using KeySort = cub::BlockRadixSort<unsigned, kSparseThreads, kSortPer>;

// Valid entries of one index row segment (n entries, ids below cap; flip: stored as ~id) appended
// to out at `total`; returns the new total. Every thread of the CTA calls it.
__device__ __forceinline__ int compact_segment(const int* idx, int n, int64_t cap, bool flip, int* out, int total,
                                               int* warp_sums) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int base = 0; base < n; base += kSparseThreads * kSparsePer) {
    int v[kSparsePer];
    int cnt = 0;
#pragma unroll
    for (int k = 0; k < kSparsePer; ++k) {
      const int pos = base + tid * kSparsePer + k;
      v[k] = pos < n ? __ldg(idx + pos) : -1;
      cnt += v[k] >= 0 && v[k] < cap;
    }
    int incl = cnt;  // inclusive scan of the counts over the warp, then over the warps
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += up;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int before = 0, all = 0;
#pragma unroll
    for (int w = 0; w < kSparseThreads / 32; ++w) {
      before += w < warp ? warp_sums[w] : 0;
      all += warp_sums[w];
    }
    int at = total + before + incl - cnt;
#pragma unroll
    for (int k = 0; k < kSparsePer; ++k)
      if (v[k] >= 0 && v[k] < cap) out[at++] = flip ? ~v[k] : v[k];
    total += all;
    __syncthreads();  // warp_sums is rewritten by the next round
  }
  return total;
}

// The first n (<= kSortMaxKeys) entries of out, token ids below cap, sorted ascending in place.
// Every thread of the CTA calls it.
__device__ __forceinline__ void sort_segment(int* out, int n, int64_t cap, typename KeySort::TempStorage& ts) {
  unsigned v[kSortPer];
#pragma unroll
  for (int k = 0; k < kSortPer; ++k) {
    const int i = threadIdx.x * kSortPer + k;
    v[k] = i < n ? static_cast<unsigned>(out[i]) : 0xffffffffu;  // (past n: last; the sort is stable)
  }
  const int64_t top = (cap < (int64_t{1} << 31) ? cap : int64_t{1} << 31) - 1;  // the largest id
  const int bits = top > 0 ? 32 - __clz(static_cast<int>(top)) : 1;
  KeySort(ts).Sort(v, 0, bits);  // (blocked arrangement: thread t holds ranks t * kSortPer ..)
#pragma unroll
  for (int k = 0; k < kSortPer; ++k) {
    const int i = threadIdx.x * kSortPer + k;
    if (i < n) out[i] = static_cast<int>(v[k]);
  }
}

__device__ __forceinline__ int clamped_length(const void* lens, int b, int cols) {
  if (lens == nullptr) return cols;
  const int v = static_cast<const int*>(lens)[b];
  return v < 0 ? 0 : v > cols ? cols : v;
}

// lists = batch * s_q (key_list_lengths = lists * key_list_cols).
__global__ void __launch_bounds__(kSparseThreads) mla_sparse_rows_kernel(const __grid_constant__ MlaDecodeCudaParams p,
                                                                         int s_q, int lists) {
  __shared__ int warp_sums[kSparseThreads / 32];
  __shared__ typename KeySort::TempStorage sort_storage;
  const int kr = blockIdx.x, b = kr / s_q;
  const int cols = key_list_cols(p);
  int* rows = static_cast<int*>(p.key_rows);
  int* out = rows + static_cast<int64_t>(kr) * cols;
  const int64_t cap = p.num_blocks * p.page_block_size;
  int total = compact_segment(static_cast<const int*>(p.indices) + static_cast<int64_t>(kr) * p.topk,
                              clamped_length(p.topk_length, b, p.topk), cap, false, out, 0, warp_sums);
  // (compact_segment ends with a CTA barrier: its writes to out are visible; total is uniform)
  if (p.sort_keys && total <= kSortMaxKeys) sort_segment(out, total, cap, sort_storage);
  if (p.extra_topk > 0)
    total = compact_segment(static_cast<const int*>(p.extra_indices) + static_cast<int64_t>(kr) * p.extra_topk,
                            clamped_length(p.extra_topk_length, b, p.extra_topk),
                            p.extra_num_blocks * p.extra_page_block_size, true, out, total, warp_sums);
  if (threadIdx.x == 0) rows[static_cast<int64_t>(lists) * cols + kr] = total;
}

inline cudaError_t launch_sparse_rows(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, cudaStream_t stream) {
  const int lists = t.batch * t.s_q;
  mla_sparse_rows_kernel<<<lists, kSparseThreads, 0, stream>>>(p, t.s_q, lists);
  return cudaGetLastError();
}

}  // namespace dualops::cuda::mla

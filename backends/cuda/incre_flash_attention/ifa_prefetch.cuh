// Stage of the split kernel: L2 prefetches of a unit's first and second pipeline fills.
#pragma once
#include <dualops/params.h>

#include "ifa_config.cuh"
#include "ifa_primitives.cuh"
#include "ifa_tiling.h"

namespace dualops::cuda::ifa {

// L2 prefetch of the first pipeline fill of a plan unit (batch b, KV head kvh, keys k_begin ..
// + Cfg::kPrefetchKeys of its split, both tensors: warp warp0 K, warp0 + 1 V) before the grid-dependency wait,
// while the kernel ahead finishes, so that the unit's first copies after the wait hit L2
// (16-bit caches, Cfg::kPrefetchKeys). A prefetch returns no data, so it is safe before the
// wait: L2 is the point of coherence, and rows the kernel ahead still writes are read fresh by
// the copies. Only CTAs of the first wave call it: a later CTA starts after the kernel ahead has
// ended, and its prefetch would only duplicate its first copies.
// Keys past kv_lens (not known yet) may be prefetched: still inside the cache (k_cap <=
// max_kv_len). The rows are contiguous spans where a head's rows are dense (stride_1 == D) or
// the heads are packed in a row (stride_2 == D, stride_1 == h_kv * D: the unit takes its head's
// share of the all-head span, the units of the other heads the rest); paged caches one span per
// block (a lane per block, its id read here: a stale id only misdirects a hint; splits of at
// least 2 fills only). Other layouts are not prefetched. Nor are splits that hold no more than the fill: prefetching a whole split
// moves the call's whole read into the tail of the kernel ahead, which it then slows.
// The same function prefetches the second fill (k_from = k_begin + kPrefetchKeys, warps 2 and 3)
// right after the wait, in the first wave's splits of at least second_fill_keys keys (a kernel
// argument: the plan's second_fill_keys): there HBM would otherwise idle while
// the first copies come from L2.
template <typename C>
__device__ __forceinline__ void prefetch_fill(const IncreFlashAttentionCudaParams& p,
                                              const IncreFlashAttentionCudaTiling& t, int b, int kvh,
                                              int k_from, int k_cap, int span, int warp0) {
  constexpr int D = C::kD;
  const int warp = (threadIdx.x >> 5) - warp0, lane = threadIdx.x & 31;
  const int nk = min(C::kPrefetchKeys, k_cap - k_from);
  if (warp < 0 || warp >= 2 || nk <= 0 || span <= C::kPrefetchKeys) return;
  // Paged: the block ids are a load the prefetch waits for, which delays warps 0 and 1 by a
  // round trip when the kernel ahead has already ended; it pays from splits of two fills up
  // (Cfg::kPagedPrefetchMinKeys).
  if (t.block_size > 0 && span < C::kPagedPrefetchMinKeys) return;
  const char* base = static_cast<const char*>(warp == 0 ? p.k : p.v);
  const int64_t s0 = warp == 0 ? p.k_stride_0 : p.v_stride_0;
  const int64_t s1 = warp == 0 ? p.k_stride_1 : p.v_stride_1;
  const int64_t s2 = warp == 0 ? p.k_stride_2 : p.v_stride_2;
  const int64_t elt = sizeof(typename C::KV);
  const bool dense = s1 == D, packed = s2 == D && s1 == static_cast<int64_t>(t.h_kv) * D;
  // segment `lane`: keys [ka, kb) of one block (contiguous: one segment, the batch's rows)
  int ka = k_from, kb = k_from + nk;
  int64_t seg_base = static_cast<int64_t>(b) * s0;  // elements to the block's / batch's row 0
  bool ok = dense || packed;
  if (t.block_size > 0) {
    const PageMath pm(t.block_size);
    const int pg = pm.block(k_from) + lane;
    ka = max(ka, pg * t.block_size);
    kb = min(kb, (pg + 1) * t.block_size);
    ok = ok && ka < kb;
    const int* bt_row = static_cast<const int*>(p.block_table) + static_cast<int64_t>(b) * p.block_table_stride;
    const int blk = ok ? bt_row[pg] : -1;
    ok = ok && blk >= 0 && blk < p.num_blocks;
    seg_base = static_cast<int64_t>(ok ? blk : 0) * s0;
    ka -= pg * t.block_size, kb -= pg * t.block_size;  // slots within the block
  } else {
    ok = ok && lane == 0;
  }
  if (!ok) return;
  const int n = kb - ka;
  const int64_t off = dense ? (seg_base + kvh * s2 + static_cast<int64_t>(ka) * s1) * elt
                            : (seg_base + static_cast<int64_t>(ka) * s1) * elt + static_cast<int64_t>(kvh) * n * C::kRowBytes;
  prefetch_l2(base + off, static_cast<uint32_t>(n) * C::kRowBytes);
}

}  // namespace dualops::cuda::ifa

// Work items of the persistent grouped-GEMM kernel, found on the device (no host read of
// group_offsets / masked_m, so a call can be captured in a CUDA graph).
//   contiguous: every block scans the clamped group_offsets once into a prefix of m tiles per
//     group (shared memory); items are (m slot, n tile), n tile fastest; slots past the last
//     group's tiles are "tail" tiles that write zeros to rows [offsets[G], M).
//   masked: G * ceil(M_max / BM) slots per n tile; a slot at or past masked_m[g] writes zeros.
// Offsets and masked_m are clamped ([0, M], non-decreasing; [0, M_max]) so bad device values
// never make a load or store leave x / y.
#pragma once

#include <cstdint>

namespace dualops::cuda::gg {

struct Tile {
  int group;      // -1: zero-only tile
  int n_tile;
  int64_t row0;   // first row of x / y (flattened rows) the tile covers
  int valid;      // rows to compute (0: write zeros only)
  int write;      // rows of y to write
};

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Clamped [start, end) rows of group g (contiguous layout).
__device__ __forceinline__ void group_span(const int* offs, int g, int64_t m, int64_t& start, int64_t& end) {
  start = clamp64(__ldg(offs + g), 0, m);
  end = clamp64(__ldg(offs + g + 1), start, m);
}

// s_pref[g] = m tiles of the groups before g; s_pref[G] = all groups' tiles. Returns the number
// of m slots (group tiles plus tail tiles). 128 threads.
template <int BM>
__device__ int contiguous_prefix(const int* offs, int G, int64_t m, int* s_pref, int* s_scan) {
  const int tid = threadIdx.x, per = (G + 127) / 128;
  const int g0 = min(G, tid * per), g1 = min(G, g0 + per);
  int local = 0;
  for (int g = g0; g < g1; ++g) {
    int64_t s, e;
    group_span(offs, g, m, s, e);
    local += static_cast<int>((e - s + BM - 1) / BM);
  }
  s_scan[tid] = local;
  __syncthreads();
  if (tid < 32) {  // exclusive scan of 128 sums by one warp, 4 per lane
    int v[4], sum = 0;
    for (int j = 0; j < 4; ++j) { v[j] = s_scan[tid * 4 + j]; sum += v[j]; }
    int incl = sum;
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, incl, o);
      if (tid >= o) incl += u;
    }
    int run = incl - sum;
    for (int j = 0; j < 4; ++j) { s_scan[tid * 4 + j] = run; run += v[j]; }
  }
  __syncthreads();
  int run = s_scan[tid];
  for (int g = g0; g < g1; ++g) {
    s_pref[g] = run;
    int64_t s, e;
    group_span(offs, g, m, s, e);
    run += static_cast<int>((e - s + BM - 1) / BM);
  }
  if (g1 == G && g0 < G) s_pref[G] = run;
  if (G == 0 && tid == 0) s_pref[0] = 0;
  __syncthreads();
  const int64_t tail0 = clamp64(__ldg(offs + G), 0, m);
  return s_pref[G] + static_cast<int>((m - tail0 + BM - 1) / BM);
}

template <int BM>
__device__ __forceinline__ Tile contiguous_tile(int64_t item, int n_tiles, const int* offs, int G, int64_t m,
                                                const int* s_pref) {
  Tile t;
  const int slot = static_cast<int>(item / n_tiles);
  t.n_tile = static_cast<int>(item % n_tiles);
  if (slot >= s_pref[G]) {  // tail: rows past offsets[G] stay zero
    t.group = -1;
    t.row0 = clamp64(__ldg(offs + G), 0, m) + static_cast<int64_t>(slot - s_pref[G]) * BM;
    t.valid = 0;
    t.write = static_cast<int>(min64(BM, m - t.row0));
    return t;
  }
  int lo = 0, hi = G - 1;  // last g with s_pref[g] <= slot
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (s_pref[mid] <= slot) lo = mid; else hi = mid - 1;
  }
  int64_t s, e;
  group_span(offs, lo, m, s, e);
  t.group = lo;
  t.row0 = s + static_cast<int64_t>(slot - s_pref[lo]) * BM;
  t.valid = static_cast<int>(min64(BM, e - t.row0));
  t.write = t.valid;
  return t;
}

template <int BM>
__device__ __forceinline__ Tile masked_tile(int64_t item, int n_tiles, const int* masked_m, int m_max) {
  Tile t;
  const int m_tiles = (m_max + BM - 1) / BM;
  const int64_t slot = item / n_tiles;
  t.n_tile = static_cast<int>(item % n_tiles);
  t.group = static_cast<int>(slot / m_tiles);
  const int r0 = static_cast<int>(slot % m_tiles) * BM;
  const int rows = static_cast<int>(clamp64(__ldg(masked_m + t.group), 0, m_max));
  t.row0 = static_cast<int64_t>(t.group) * m_max + r0;
  t.valid = max(0, min(BM, rows - r0));
  t.write = min(BM, m_max - r0);
  return t;
}

}  // namespace dualops::cuda::gg

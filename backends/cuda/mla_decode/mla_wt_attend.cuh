// Tile stages of the transposed-tile wgmma MLA kernel: the 64-row (M) side of every wgmma is KV
// tokens or value dims, the q rows are N (NQ = 8 / 16 / 32), so a tile with few q rows costs few
// MMAs. Each warpgroup runs its own chain of tiles (mla_wt_kernel.cuh); per 64-token tile:
//  * S^T = K Q^T (wgmma m64nNQk16; A = the KV tile K-major, B = the Q tile K-major) over all
//    dims, the k-steps dealt round robin to kSSets independent accumulators (no chain of
//    dependent MMAs), summed after the wait;
//  * softmax over the tokens (M: the warpgroup's 4 warps, shuffles + a per-warpgroup exchange):
//    P^T to shared memory, rounded once to q's 16-bit type;
//  * O^T += V^T P^T (wgmma m64nNQk16; A = the KV tile read MN-major as V^T, B = P^T K-major):
//    all 512 value dims (8 fragments).
// Fragment of an m64nNQ accumulator (thread: warp w of its warpgroup, lane l): d[4j + e] is
// M row 16w + l / 4 + 8 (e / 2), q row 8j + 2 (l % 4) + e % 2: the thread's q rows are
// column index 2j + e % 2 of kCols.
#pragma once
#include "mla_wgmma_names.cuh"
#include "mla_attend.cuh"
#include "mla_wt_layout.cuh"

namespace dualops::cuda::mla {

template <class L>
struct WtState {
  float o[8][L::kAccO];  // O^T fragments: value dims 64 b ..; q rows as above
  float m[L::kCols];    // running max (log2 domain) of the thread's q rows
  float l[L::kCols];    // this thread's share of their running sums (its tokens)
};

__device__ __forceinline__ int wt_col(int idx, int lane) { return 8 * (idx >> 1) + 2 * (lane & 3) + (idx & 1); }

template <class L>
__device__ __forceinline__ void wt_init(WtState<L>& st) {
#pragma unroll
  for (int b = 0; b < 8; ++b)
#pragma unroll
    for (int i = 0; i < L::kAccO; ++i) st.o[b][i] = 0.f;
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) {
    st.m[k] = -INFINITY;
    st.l[k] = 0.f;
  }
}

// The blocks of the warpgroup's current KV tile: block j (dims 64j .., 64 tokens, 8 KiB) in slot
// s0 + j of its ring of L::kSlots slots (wrapping; FP8 caches: one tile, s0 = 0).
template <class L>
struct WtKv {
  uint32_t base;        // shared address of slot 0
  unsigned char* ptr;   // its generic address
  int s0;
  __device__ __forceinline__ int slot(int j) const {
    const int s = s0 + j;
    return s >= L::kSlots ? s - L::kSlots : s;
  }
  __device__ __forceinline__ uint32_t addr(int j) const { return base + slot(j) * (kTile * 128); }
  __device__ __forceinline__ unsigned char* blk(int j) const { return ptr + slot(j) * (kTile * 128); }
};

__device__ __forceinline__ uint64_t wt_kmajor(uint32_t addr) { return wgmma_desc_sw128(addr, 16, 1024); }

// S^T (64 tokens x NQ q rows) of the warpgroup's tile over all dims: k-step ks into accumulator
// set ks % kSSets, so consecutive wgmmas do not depend on each other. 16-bit caches: wait_block(i)
// runs before the k-steps of block i (the wgmmas of the blocks before it run while its copy lands;
// the fence after the wait keeps ptxas from serializing the wgmmas); FP8 caches: the tile is
// complete before the call.
template <class Tr, class L, class W>
__device__ __forceinline__ void wt_scores(float (&s)[L::kAcc], uint32_t q_base, const WtKv<L>& kv, W&& wait_block) {
  using MT = typename Tr::MT;
  constexpr int kSteps = Tr::D / 16, kSets = L::kSSets;
  float acc[kSets][L::kAcc];
#pragma unroll
  for (int j = 0; j < kSets; ++j) {
#pragma unroll
    for (int i = 0; i < L::kAcc; ++i) acc[j][i] = 0.f;
    wgmma_fence_regs(acc[j]);
  }
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    const uint32_t blk = ks >> 2, step = (ks & 3) * 32;
    if constexpr (Tr::kDirect) {
      if ((ks & 3) == 0) {
        wait_block(static_cast<int>(blk));
        wgmma_fence();
      }
    }
    common::wgmma_m64nNk16<MT, L::kNq, 0, 0>(acc[ks % kSets], wt_kmajor(kv.addr(blk) + step),
                                             wt_kmajor(q_base + blk * L::kQBlock + step), 1);
  }
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < kSets; ++j) wgmma_fence_regs(acc[j]);
#pragma unroll
  for (int i = 0; i < L::kAcc; ++i) {
    float v = acc[0][i];
#pragma unroll
    for (int j = 1; j < kSets; ++j) v += acc[j][i];
    s[i] = v;
  }
}

// Softmax of one tile over its tokens for the thread's q rows (lim[k]: keys below it are visible
// to column k), P^T to shared memory, running sums, O^T rescaled. red: this warpgroup's [4][NQ].
template <class Tr, class L>
__device__ __forceinline__ void wt_softmax(WtState<L>& st, float (&s)[L::kAcc], unsigned char* sp, float* red,
                                           int tile0, const int (&lim)[L::kCols], float scale_log2, WgBarrier& wb) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
  const int tok0 = 16 * w + (lane >> 2);
  float mx[L::kCols];
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) mx[k] = -INFINITY;
#pragma unroll
  for (int i = 0; i < L::kAcc; ++i) {
    const int k = 2 * (i >> 2) + (i & 1);
    const int tok = tile0 + tok0 + 8 * ((i >> 1) & 1);
    const float v = tok < lim[k] ? s[i] * scale_log2 : -INFINITY;
    s[i] = v;
    mx[k] = fmaxf(mx[k], v);  // fmaxf skips NaN: a NaN score still reaches P below
  }
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) {
    mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 4));
    mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 8));
    mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 16));
    if (lane < 4) red[w * L::kNq + wt_col(k, lane)] = mx[k];
  }
  wb.sync();
  float m_use[L::kCols], alpha[L::kCols];
#pragma unroll
  for (int k = 0; k < L::kCols; ++k) {
    const int col = wt_col(k, lane);
    const float mt = fmaxf(fmaxf(red[col], red[L::kNq + col]), fmaxf(red[2 * L::kNq + col], red[3 * L::kNq + col]));
    // An infinite max subtracts 0 (torch.logsumexp's rule), as in softmax_tile.
    const float m_old = st.m[k];
    const float m_new = fmaxf(m_old, mt);
    m_use[k] = isinf(m_new) ? 0.f : m_new;
    alpha[k] = m_old == -INFINITY ? (m_new == -INFINITY ? 1.f : 0.f) : exp2f((isinf(m_old) ? 0.f : m_old) - m_use[k]);
    st.m[k] = m_new;
    st.l[k] *= alpha[k];
  }
#pragma unroll
  for (int i = 0; i < L::kAcc; i += 4) {  // (i, i + 2): one q row pair, tokens tok0 and tok0 + 8
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int k = 2 * (i >> 2) + e;
      const float p0 = exp2f(s[i + e] - m_use[k]), p1 = exp2f(s[i + 2 + e] - m_use[k]);
      st.l[k] += p0 + p1;
      const int row = wt_col(k, lane);
      const uint32_t pp = pack2<MT>(p0, p1);
      *reinterpret_cast<uint16_t*>(sp + L::p_off(row, tok0)) = static_cast<uint16_t>(pp & 0xffffu);
      *reinterpret_cast<uint16_t*>(sp + L::p_off(row, tok0 + 8)) = static_cast<uint16_t>(pp >> 16);
    }
  }
#pragma unroll
  for (int b = 0; b < 8; ++b)
#pragma unroll
    for (int i = 0; i < L::kAccO; ++i) st.o[b][i] *= alpha[2 * (i >> 2) + (i & 1)];
}

// O^T += V^T P^T: A = value block b of the KV tile read MN-major (64 dims contiguous per token,
// 8-token groups 1 KB apart), B = the P^T tile. Issued as two groups (value blocks 0 .. 3, then 4 .. 7);
// `first_done` runs once the first group is done (its blocks are free), then the second is waited for.
template <class Tr, class L, class F>
__device__ __forceinline__ void wt_pv(WtState<L>& st, const WtKv<L>& kv, uint32_t p_base, F&& first_done) {
  using MT = typename Tr::MT;
#pragma unroll
  for (int b = 0; b < 8; ++b) wgmma_fence_regs(st.o[b]);
  wgmma_fence();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk)
#pragma unroll
      for (int b = 4 * half; b < 4 * half + 4; ++b)
        common::wgmma_m64nNk16<MT, L::kNq, 1, 0>(
            st.o[b], wgmma_desc_sw128(kv.addr(b) + kk * 16 * 128, Tr::kBlockBytes, 1024), wt_kmajor(p_base + kk * 32), 1);
    wgmma_commit();
  }
  wgmma_wait<1>();
#pragma unroll
  for (int b = 0; b < 4; ++b) wgmma_fence_regs(st.o[b]);
  first_done();
  wgmma_wait<0>();
#pragma unroll
  for (int b = 4; b < 8; ++b) wgmma_fence_regs(st.o[b]);
}

// Called by a warpgroup once its tile is visible: does a key of the tile hidden from some q row
// (tokens >= hidden0, < end) hold a NaN / inf value (hidden_values_nonfinite, block by block)?
template <class Tr, class L>
__device__ __forceinline__ bool wt_hidden_nonfinite(const WtKv<L>& kv, int tile0, int hidden0, int end,
                                                    WgBarrier& wb) {
  const int t0 = max(hidden0 - tile0, 0), t1 = min(end - tile0, kTile);
  if (t0 >= t1) return false;  // uniform over the warpgroup
  bool bad = false;
  const int tid = threadIdx.x & 127;
#pragma unroll 1
  for (int j = 0; j < kDv / 64; ++j)  // (values_nonfinite addresses block j at j * kBlockBytes)
    bad |= values_nonfinite<Tr, 8, 128>(kv.blk(j) - j * Tr::kBlockBytes, t0, t1, 8 * j, tid);
  return wb.sync_or(bad);
}

// The NaN / inf value entries of the tile set to 0 (zero_nonfinite_values, block by block), by
// the warpgroup.
template <class Tr, class L>
__device__ __forceinline__ void wt_zero_nonfinite(const WtKv<L>& kv) {
  const int tid = threadIdx.x & 127;
#pragma unroll 1
  for (int j = 0; j < kDv / 64; ++j) zero_nonfinite_values<Tr, 8, 128>(kv.blk(j) - j * Tr::kBlockBytes, 8 * j, tid);
}

// The exact part of a tile whose causally hidden keys hold NaN / inf values (after the P^T
// tiles are visible): O^T += p * v in fp32 for each such entry of the thread's dims and each
// q row that attends the key; the caller then zeroes those entries before wt_pv.
template <class Tr, class L>
__device__ __forceinline__ void wt_add_nonfinite(WtState<L>& st, const WtKv<L>& kv, const unsigned char* sp, int tile0,
                                                 const int (&lim)[L::kCols]) {
  using MT = typename Tr::MT;
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
#pragma unroll
  for (int b = 0; b < 8; ++b)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int dim = 16 * w + (lane >> 2) + 8 * h;  // in block b
      const unsigned char* vb = kv.blk(b);
#pragma unroll 1
      for (int k = 0; k < kTile; ++k) {
        const float v = to_float1<MT>(
            *reinterpret_cast<const uint16_t*>(vb + k * 128 + ((((dim >> 3) ^ (k & 7))) << 4) + (dim & 7) * 2));
        if (isfinite(v)) continue;
#pragma unroll
        for (int i = 2 * h; i < L::kAcc; i += (i & 1) ? 3 : 1) {  // entries of M half h: i % 4 in {2h, 2h + 1}
          const int kc = 2 * (i >> 2) + (i & 1), row = wt_col(kc, lane);
          if (tile0 + k >= lim[kc]) continue;
          st.o[b][i] += to_float1<MT>(*reinterpret_cast<const uint16_t*>(sp + L::p_off(row, k))) * v;
        }
      }
    }
}

}  // namespace dualops::cuda::mla

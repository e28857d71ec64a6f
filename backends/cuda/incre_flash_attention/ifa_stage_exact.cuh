// The split kernel's exact stage for rows whose output came out non-finite.
// The main loop's p . v runs on the tensor cores (p as bf16 hi + lo parts, or fp16, against
// whole 16-key fragments of v): an inf or NaN value meets the zero weights of the keys a row
// does not attend (masked, causally hidden, past kv_len, in an invalid block) and the zero lo
// parts of the others, so 0 * inf turns the row's channel NaN where the reference leaves the key
// out or gives +-inf. That can only happen where the unit's output is non-finite: write_rows
// reports it, and after a CTA-wide vote (rare) this stage recomputes every row of the tile over
// the unit's keys in fp32 -- the score as the main loop forms it (q . k, scale, pse, masks,
// limits), p = exp2(s - m) against the row's final m and sum l, and p * v for the keys the row
// attends only -- and writes it where write_rows wrote (out, the fp32 partial or the CTA's rows
// in shared memory), so the split merges stay as they are. The main loop is untouched.
#pragma once
#include <dualops/params.h>

#include <cstdint>

#include "ifa_stage_epilogue.cuh"

namespace dualops::cuda::ifa {

// One cache element as fp32 (int8 and fp8 e4m3 before their scale / offset).
template <class T>
__device__ __forceinline__ float cache_f32(T x) {
  if constexpr (sizeof(T) == 1) {
    return static_cast<float>(x);
  } else {
    return to_f32(x);
  }
}

// A warp per row, lane pairs of columns (2 lane + 64 c); K / V rows read from global memory.
template <class K>
__device__ __forceinline__ void exact_rows(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
                                           uint8_t* smem, int merge_mode) {
  using QT = typename K::QT;
  using KVT = typename K::KVT;
  constexpr int D = K::D, NP = D / 64, NW = K::NW, M_TILE = K::M_TILE;
  const int lane = K::lane();
  const uint8_t* mask = static_cast<const uint8_t*>(p.atten_mask);
  const float* pse = static_cast<const float*>(p.pse_shift);
  // (the unit, kv_len, k_end and the score multiplier as the kernel has them, recomputed from the
  // parameters: nothing more is kept live across the main loop)
  const Unit u = unit_of<M_TILE>(t);
  const SmemRegions sm = smem_regions<K>(smem);
  const int* bt_row = static_cast<const int*>(p.block_table) + static_cast<int64_t>(u.b) * p.block_table_stride;
  const PageMath pm(t.block_size);
  const int kv_len = min(max(static_cast<const int*>(p.kv_lens)[u.b], 0), t.max_kv_len);
  const int k_end = min(u.k_begin + u.span, kv_len);
  const float score_mul = p.softmax_scale * kLog2e;  // (q unscaled here: 8-bit key scales below)
  constexpr bool kQuant = sizeof(KVT) == 1;
  // 8-bit caches: per-channel scales (and int8 offsets) of this KV head; the key offsets' score
  // term is the row's row_add, as in the main loop
  const float* ksc = kQuant ? static_cast<const float*>(p.k_scale) + u.kvh * D : nullptr;
  const float* vsc = kQuant ? static_cast<const float*>(p.v_scale) + u.kvh * D : nullptr;
  const float* voff = kQuant && p.v_offset != nullptr ? static_cast<const float*>(p.v_offset) + u.kvh * D : nullptr;
  const int rows = min(M_TILE, u.q_rows - K::row0());
  for (int rr = K::warp(); rr < rows; rr += NW) {
    const float m = sm.fin_m[rr], l = sm.fin_l[rr];
    if (l <= 0.f) continue;  // no key: write_rows wrote zeros
    const int r = K::row0() + rr, gh = r / u.s_q, i = r - gh * u.s_q;
    const QT* qrow = static_cast<const QT*>(p.q) + u.b * p.q_stride_b + i * p.q_stride_s +
                     (u.kvh * u.group + gh) * p.q_stride_h;
    const int lim = p.causal ? min(k_end, kv_len - u.s_q + i + 1) : k_end;
    float qv[NP][2], acc[NP][2];
#pragma unroll
    for (int c = 0; c < NP; ++c) {
      const int d = 2 * lane + 64 * c;
      qv[c][0] = to_f32(qrow[d]), qv[c][1] = to_f32(qrow[d + 1]);
      acc[c][0] = 0.f, acc[c][1] = 0.f;
    }
    for (int key = u.k_begin; key < lim; ++key) {
      if (mask != nullptr && mask[sm.mask_row[rr] + key * p.mask_stride_k] != 0) continue;
      int64_t kb = static_cast<int64_t>(u.b) * p.k_stride_0 + static_cast<int64_t>(key) * p.k_stride_1;
      int64_t vb = static_cast<int64_t>(u.b) * p.v_stride_0 + static_cast<int64_t>(key) * p.v_stride_1;
      if (t.block_size > 0) {
        const int blk = bt_row[pm.block(key)];
        if (blk < 0 || blk >= p.num_blocks) continue;  // an invalid block's keys are hidden
        const int slot = pm.slot(key);
        kb = blk * p.k_stride_0 + static_cast<int64_t>(slot) * p.k_stride_1;
        vb = blk * p.v_stride_0 + static_cast<int64_t>(slot) * p.v_stride_1;
      }
      const KVT* krow = static_cast<const KVT*>(p.k) + kb + u.kvh * p.k_stride_2;
      const KVT* vrow = static_cast<const KVT*>(p.v) + vb + u.kvh * p.v_stride_2;
      float dot = 0.f;
#pragma unroll
      for (int c = 0; c < NP; ++c) {
        const int d = 2 * lane + 64 * c;
        float k0 = cache_f32(krow[d]), k1 = cache_f32(krow[d + 1]);
        if constexpr (kQuant) k0 *= __ldg(ksc + d), k1 *= __ldg(ksc + d + 1);
        dot += qv[c][0] * k0 + qv[c][1] * k1;
      }
      dot = warp_sum(dot);
      float s = dot * score_mul + sm.row_add[rr];
      if (pse != nullptr) s += __ldg(pse + sm.pse_row[rr] + key * p.pse_stride_k) * kLog2e;
      const float pj = exp2f(s - m);
#pragma unroll
      for (int c = 0; c < NP; ++c) {
        const int d = 2 * lane + 64 * c;
        float v0 = cache_f32(vrow[d]), v1 = cache_f32(vrow[d + 1]);
        if constexpr (kQuant) {
          if (voff != nullptr) v0 += __ldg(voff + d), v1 += __ldg(voff + d + 1);
          v0 *= __ldg(vsc + d), v1 *= __ldg(vsc + d + 1);
        }
        acc[c][0] += pj * v0;
        acc[c][1] += pj * v1;
      }
    }
    const float inv = 1.f / l;  // (NaN l: NaN out)
#pragma unroll
    for (int c = 0; c < NP; ++c) {
      const int d = 2 * lane + 64 * c;
      const float v0 = acc[c][0] * inv, v1 = acc[c][1] * inv;
      if (K::kStageOut || (K::kClusterMerge && u.ns > 1 && merge_mode == kMergeCluster)) {
        sm.clu_out[rr * K::kOutPitch + d] = v0;
        sm.clu_out[rr * K::kOutPitch + d + 1] = v1;
      } else if (u.ns == 1) {
        store2<QT>(static_cast<QT*>(p.out) + sm.out_row[rr], d, d + 1, v0, v1);
      } else {
        float* dst = static_cast<float*>(p.o_accum) + sm.out_row[rr];
        dst[d] = v0;
        dst[d + 1] = v1;
      }
    }
  }
}

}  // namespace dualops::cuda::ifa

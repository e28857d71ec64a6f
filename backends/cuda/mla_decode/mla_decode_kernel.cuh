// The MLA decode split kernel: grid (num_m_blocks, h_kv, num_sm_parts) of the plan (sparse
// decode: s_q * ceil(h_q / 64) row blocks, mla_row0 in mla_piece.cuh). CTA (m, 0, part) walks the part's requests
// (begin_req .. end_req of its plan record), attends each request's token range for its q rows
// tile by tile, and writes out / lse or its split slot's partials (docs/mla_decode_cuda.md).
#pragma once
#include "mla_epilogue.cuh"
#include "mla_load.cuh"
#include "mla_piece.cuh"

namespace dualops::cuda::mla {

template <class Tr>
__global__ void __launch_bounds__(kThreads, 1)
    mla_split_kernel(const __grid_constant__ MlaDecodeCudaParams p, const __grid_constant__ MlaDecodeTiling t) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* sq = smem;
  unsigned char* sp = smem + Tr::kOffP;
  unsigned char* stage = smem + Tr::kOffStage;
  float* red_max = reinterpret_cast<float*>(smem + Tr::kOffRed);
  float* red_sum = red_max + 2 * kRows;
  auto kvbuf = [&](int i) { return smem + Tr::kOffKv + i * Tr::kTileBytes; };

  // The combine kernel (a programmatic dependent) may be scheduled now; it waits for this grid.
  pdl_launch_dependents();
  const MlaPart part = mla_part<Tr::kSparse>(p, t);
  const int row0 = mla_row0<Tr::kSparse>(t);
  const int lane = threadIdx.x & 31, g = row_group();
  const int rows_valid = min(kRows, mla_row_end<Tr::kSparse>(t) - row0);
  const float scale_log2 = p.softmax_scale * kLog2e;

  for (int r = max(part.begin_req, 0); r <= part.end_req; ++r) {
    const int kr = mla_keys<Tr::kSparse>(t, r);  // the rows' key list
    const MlaPiece pc = mla_piece(t, part, r, kr, row0 + g * 16 + (lane >> 2), p.causal != 0);
    const int start = pc.start, end = pc.end, ntiles = pc.ntiles, hidden0 = pc.hidden0;
    RowState st;
    init_state(st);
    __syncthreads();  // the previous request's readers of Q / KV / P are done
    if (ntiles > 0) {
      load_q<Tr>(p, sq, r, row0, mla_row_end<Tr::kSparse>(t), t.h_q);
      if constexpr (Tr::kDirect) {
        load_kv_tile<Tr>(p, kvbuf(0), kr, start, end);
        cp_async_commit();
        for (int n = 0; n < ntiles; ++n) {
          if (n + 1 < ntiles) {
            load_kv_tile<Tr>(p, kvbuf((n + 1) & 1), kr, start + (n + 1) * kTile, end);
            cp_async_commit();
            cp_async_wait<1>();
          } else {
            cp_async_wait<0>();
          }
          __syncthreads();
          const bool exact = hidden_values_nonfinite<Tr>(kvbuf(n & 1), start + n * kTile, hidden0, end);
          attend_tile<Tr>(st, sq, kvbuf(n & 1), sp, red_max, start + n * kTile, pc.lim, scale_log2, rows_valid,
                          exact);
          __syncthreads();
        }
      } else {
        load_kv_tile<Tr>(p, stage, kr, start, end);
        cp_async_commit();
        for (int n = 0; n < ntiles; ++n) {
          cp_async_wait<0>();
          __syncthreads();
          dequant_tile<Tr>(stage, kvbuf(0));
          __syncthreads();
          const bool exact = hidden_values_nonfinite<Tr>(kvbuf(0), start + n * kTile, hidden0, end);
          if (n + 1 < ntiles) {
            load_kv_tile<Tr>(p, stage, kr, start + (n + 1) * kTile, end);
            cp_async_commit();
          }
          attend_tile<Tr>(st, sq, kvbuf(0), sp, red_max, start + n * kTile, pc.lim, scale_log2, rows_valid, exact);
          __syncthreads();
        }
      }
    }
    write_piece<Tr>(p, t, st, red_sum, r, row0, mla_row_end<Tr::kSparse>(t), pc.n_splits, pc.slot, g, warp_half());
  }
}

}  // namespace dualops::cuda::mla

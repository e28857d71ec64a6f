// A split kernel CTA's part of the MLA plan (its record: requests begin_req .. end_req, the token
// range of the first and last) and, per request, the piece it attends: token range, tile count,
// split slot, the first causally hidden key and each of the thread's two rows' key limit.
#pragma once
#include "mla_config.cuh"

namespace dualops::cuda::mla {

struct MlaPart {
  const int* ns;        // split slots: request r owns ns[r] .. ns[r + 1] - 1
  const int* seqlens;
  int begin_req, end_req, begin_tok, end_tok, begin_split;
};

__device__ __forceinline__ MlaPart mla_part(const MlaDecodeParams& p, const MlaDecodeTiling& t) {
  const int* plan = static_cast<const int*>(p.plan);
  const int* rec = plan + kHeaderInts + blockIdx.z * t.part_stride;
  MlaPart w;
  w.ns = plan + kHeaderInts + t.num_sm_parts * t.part_stride;
  w.seqlens = static_cast<const int*>(p.cache_seqlens);
  w.begin_req = rec[0];
  w.end_req = min(rec[1], t.batch - 1);
  w.begin_tok = rec[2];
  w.end_tok = rec[3];
  w.begin_split = rec[4];
  return w;
}

struct MlaPiece {
  int start, end, ntiles, n_splits, slot;
  int hidden0;  // causal calls with s_q > 1 hide keys hidden0 .. len - 1 from some q rows
  int lim[2];   // keys below lim[j] are visible to the thread's row j
};

// row: the thread's first q row of the tile (its second is row + 8).
__device__ __forceinline__ MlaPiece mla_piece(const MlaDecodeTiling& t, const MlaPart& w, int r, int row,
                                              bool causal) {
  MlaPiece pc;
  const int len = max(w.seqlens[r], 0);
  pc.end = r == w.end_req ? min(w.end_tok, len) : len;
  pc.start = r == w.begin_req ? w.begin_tok : 0;
  pc.ntiles = pc.end > pc.start ? (pc.end - pc.start + kTile - 1) / kTile : 0;
  pc.n_splits = w.ns[r + 1] - w.ns[r];
  pc.slot = w.ns[r] + (r == w.begin_req ? w.begin_split : 0);
  pc.hidden0 = causal ? len - t.s_q + 1 : pc.end;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int gr = row + 8 * j;
    const int i = gr < t.q_rows ? gr / t.h_q : 0;
    pc.lim[j] = causal ? min(pc.end, len - t.s_q + i + 1) : pc.end;
  }
  return pc;
}

}  // namespace dualops::cuda::mla

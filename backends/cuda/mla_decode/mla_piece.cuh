// A split kernel CTA's q rows and part of the MLA plan (its record: requests begin_req .. end_req,
// the token range of the first and last) and, per request, the piece it attends: token range,
// tile count, split slot, the first causally hidden key and each of the thread's two rows' key
// limit.
//
// Sparse decode (Traits::kSparse, p.key_rows): each (request b, query token i) has its own key list
// kr = b * s_q + i, compacted by mla_sparse_rows_kernel before the split kernel runs (layout:
// key_list_cols in mla_config.cuh): an entry is a token row of kv_cache (>= 0) or ~row of
// extra_kv_cache (< 0). The plan's pieces cut the lists'
// positions (topk, or round_up(topk, 64) + extra_topk with an extra pool); a list holds its valid
// keys first, so a piece attends [start, min(end, length)) of it.
#pragma once
#include "mla_config.cuh"

namespace dualops::cuda::mla {

// The CTA's q rows: row0 .. min(row0 + 64, row_end) - 1 of each request (row = query token * h_q
// + head). Dense decode: the plan's m-block blockIdx.x. Sparse decode: the grid's x runs over
// (query token, block of 64 heads), so that a CTA's rows share one key list (that of request r's
// token: mla_keys). kSparse: Traits::kSparse.
__device__ __forceinline__ int mla_row_tok(const MlaDecodeTiling& t) {
  return static_cast<int>(blockIdx.x) / sparse_heads_blocks(t);
}
template <bool kSparse>
__device__ __forceinline__ int mla_row0(const MlaDecodeTiling& t) {
  if constexpr (!kSparse) {
    return static_cast<int>(blockIdx.x) * kRows;
  } else {
    const int tok = mla_row_tok(t);
    return tok * t.h_q + (static_cast<int>(blockIdx.x) - tok * sparse_heads_blocks(t)) * kRows;
  }
}
template <bool kSparse>
__device__ __forceinline__ int mla_row_end(const MlaDecodeTiling& t) {
  return kSparse ? (mla_row_tok(t) + 1) * t.h_q : t.q_rows;
}
template <bool kSparse>
__device__ __forceinline__ int mla_keys(const MlaDecodeTiling& t, int r) {
  return kSparse ? r * t.s_q + mla_row_tok(t) : r;
}

struct MlaPart {
  const int* ns;        // split slots: request r owns ns[r] .. ns[r + 1] - 1
  const int* seqlens;   // key list lengths (dense: cache_seqlens; sparse: the compacted lists')
  int begin_req, end_req, begin_tok, end_tok, begin_split;
};

// kSparse: the lengths are the compacted key lists'.
template <bool kSparse = false>
__device__ __forceinline__ MlaPart mla_part(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t) {
  const int* plan = static_cast<const int*>(p.plan);
  const int* rec = plan + kHeaderInts + blockIdx.z * t.part_stride;
  MlaPart w;
  w.ns = plan + kHeaderInts + t.num_sm_parts * t.part_stride;
  w.seqlens = !kSparse ? static_cast<const int*>(p.cache_seqlens)
                        : static_cast<const int*>(p.key_rows) + key_list_lengths(p, t);
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

// r: the request, kr: its key list (mla_keys); row: the thread's first q row of the tile
// (its second is row + 8).
__device__ __forceinline__ MlaPiece mla_piece(const MlaDecodeTiling& t, const MlaPart& w, int r, int kr, int row,
                                              bool causal) {
  MlaPiece pc;
  const int len = max(w.seqlens[kr], 0);
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

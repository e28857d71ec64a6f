// Pieces of the Ascend C MLA decode kernel shared by the cube and the vector side: the kernel
// arguments read from GM (params struct, launch header, plan header), the walk over the plan's
// work (ForEachPass: both sides enumerate the same passes in the same order) and where the key
// at a position of a pass lives (KeyMap: paged dense cache, or sparse indices into the main /
// extra pool, invalid entries reported and never read).
#pragma once
#include "kernel_operator.h"

#include "dualops/params.h"
#include "ascend/mla_decode/mla_layout.h"

namespace dualops {
namespace mla {

// Cross-core flags (mode 2: cube <-> the two vector cores of one AI core).
constexpr uint16_t kFlagTileReady = 1;     // AIC -> AIV: S of tile t (and O of tile t - 1) written
constexpr uint16_t kFlagProbsReady = 3;    // AIV -> AIC: P of a tile is written
constexpr uint16_t kFlagKvReady = 4;       // AIV -> AIC: the first dequantized latent tile is written

// A GM address carried in the params struct -> a __gm__ pointer (through the integer, never a
// cast across address spaces).
// The params struct's pointer fields hold GM addresses (8 bytes, little-endian).
template <typename T>
__aicore__ inline __gm__ T* Gm(const void* const& field) {
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&field);
  uint64_t addr = 0;
  for (int32_t i = 0; i < 8; ++i) addr |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  return reinterpret_cast<__gm__ T*>(addr);
}

constexpr float kNegInf = -__builtin_inff();
constexpr float kPosInf = __builtin_inff();

// Orders pipe E's source before its destination (the event id comes from the core's TPipe).
template <AscendC::HardEvent E>
__aicore__ inline void PipeSync(AscendC::TPipe* pipe) {
  const AscendC::TEventID id = pipe->FetchEventID(E);
  AscendC::SetFlag<E>(id);
  AscendC::WaitFlag<E>(id);
}

struct Args {
  MlaDecodeParams p;
  MlaDecodeAscendLaunch h;
  MlaDecodeTiling t;
  Chunks c;
  Workspace ws;
  __gm__ uint8_t* workspace;
  AscendC::GlobalTensor<int32_t> parts, num_splits;

  __aicore__ inline void Load(GM_ADDR params, GM_ADDR work, GM_ADDR tiling) {
    AscendC::GlobalTensor<uint8_t> pg;
    pg.SetGlobalBuffer(params, sizeof(MlaDecodeParams));
    uint8_t* dst = reinterpret_cast<uint8_t*>(&p);
    for (uint32_t i = 0; i < sizeof(MlaDecodeParams); ++i) dst[i] = pg.GetValue(i);
    AscendC::GlobalTensor<int32_t> tg;
    constexpr int32_t kHeads = MlaDecodeAscendLaunch::kInts + MlaDecodeTiling::kInts;
    tg.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), kHeads);
    int32_t* hd = reinterpret_cast<int32_t*>(&h);
    for (int32_t i = 0; i < MlaDecodeAscendLaunch::kInts; ++i) hd[i] = tg.GetValue(i);
    int32_t* td = reinterpret_cast<int32_t*>(&t);
    for (int32_t i = 0; i < MlaDecodeTiling::kInts; ++i) td[i] = tg.GetValue(MlaDecodeAscendLaunch::kInts + i);
    __gm__ int32_t* arrays = reinterpret_cast<__gm__ int32_t*>(tiling) + kHeads;
    parts.SetGlobalBuffer(arrays, static_cast<uint64_t>(t.num_sm_parts) * t.part_stride);
    num_splits.SetGlobalBuffer(arrays + t.num_sm_parts * t.part_stride, static_cast<uint64_t>(t.batch) + 1);
    c = MakeChunks(h);
    ws = MakeWorkspace(h);
    workspace = work;
  }

  // This AI core's slice of the workspace.
  template <typename T>
  __aicore__ inline __gm__ T* Ws(uint64_t region_offset) const {
    const uint64_t core = AscendC::GetBlockIdx() / AscendC::GetTaskRation();
    return reinterpret_cast<__gm__ T*>(workspace + ws.per_core * core + region_offset);
  }
  __aicore__ inline int32_t Part(int32_t part, int32_t field) const {
    return parts.GetValue(static_cast<uint64_t>(part) * t.part_stride + field);
  }
  __aicore__ inline int32_t Splits(int32_t r) const {
    return num_splits.GetValue(r + 1) - num_splits.GetValue(r);
  }
};

// One pass: q rows [r0, r1) (row = i * h_q + h) of request b against keys [k0, k1) of the
// request's key positions, all rows sharing one key list (sparse: rows of one query token).
struct Pass {
  int32_t b, tok;      // request; sparse: the query token of all rows, dense: -1
  int32_t r0, r1;      // q rows
  int32_t k0, k1;      // key positions
  int32_t slot, ns;    // split slot of the piece and the request's split count
  int32_t kv_len;      // dense: cache_seqlens[b] (causal limit)
  int32_t tiles;
  __aicore__ inline int32_t TileKeys(int32_t kv_tile, int32_t j) const {
    return MinI(kv_tile, k1 - (k0 + j * kv_tile));
  }
};

// Walks this AI core's work items (m block, part) in the order both sides use and calls
// f.OnPass(pass) for every pass.
template <typename F>
__aicore__ inline void ForEachPass(const Args& a, int32_t core, F& f) {
  const int32_t items = a.t.num_sm_parts * a.t.num_m_blocks;
  AscendC::GlobalTensor<int32_t> lens;
  lens.SetGlobalBuffer(Gm<int32_t>(a.p.cache_seqlens), static_cast<uint64_t>(a.t.batch));
  const int32_t topk_span = a.t.extra_topk > 0 ? RoundUp(a.t.topk, a.t.block_tokens) + a.t.extra_topk : a.t.topk;
  for (int32_t w = core; w < items; w += a.h.num_cores) {
    const int32_t mb = w % a.t.num_m_blocks, part = w / a.t.num_m_blocks;
    const int32_t begin_req = a.Part(part, 0), end_req = a.Part(part, 1);
    const int32_t row_lo = mb * a.h.m_rows, row_hi = MinI(a.t.q_rows, row_lo + a.h.m_rows);
    for (int32_t r = begin_req; r <= end_req; ++r) {
      Pass ps;
      ps.b = r;
      ps.kv_len = a.t.sparse ? topk_span : lens.GetValue(r);
      ps.k0 = r == begin_req ? a.Part(part, 2) : 0;
      ps.k1 = r == end_req ? a.Part(part, 3) : ps.kv_len;
      ps.ns = a.Splits(r);
      ps.slot = a.num_splits.GetValue(r) + (r == begin_req ? a.Part(part, 4) : 0);
      ps.tiles = ps.k1 > ps.k0 ? CeilDiv(ps.k1 - ps.k0, a.h.kv_tile) : 0;
      if (!a.t.sparse) {
        ps.tok = -1;
        ps.r0 = row_lo;
        ps.r1 = row_hi;
        f.OnPass(ps);
        continue;
      }
      for (int32_t i = row_lo / a.t.h_q; i * a.t.h_q < row_hi; ++i) {
        ps.tok = i;
        ps.r0 = MaxI(row_lo, i * a.t.h_q);
        ps.r1 = MinI(row_hi, (i + 1) * a.t.h_q);
        f.OnPass(ps);
      }
    }
  }
}

// Where the key at position pos of a pass lives: pool 0 (kv_cache) or 1 (extra_kv_cache) and its
// token row in that pool (block * page_block_size + offset), or -1 for an invalid entry (sparse
// -1 / out-of-range indices, entries past topk_length, the padding before the extra indices).
struct KeyMap {
  const Args* a;
  int32_t b, tok, topk_len, extra_len, extra_base;
  int64_t cap, extra_cap;
  AscendC::GlobalTensor<int32_t> table, idx, extra_idx;

  __aicore__ inline void Init(const Args& args, const Pass& ps) {
    a = &args;
    b = ps.b;
    tok = ps.tok;
    if (!a->t.sparse) {
      table.SetGlobalBuffer(Gm<int32_t>(a->p.block_table));
      return;
    }
    const int32_t s_q = a->t.s_q;
    idx.SetGlobalBuffer(Gm<int32_t>(a->p.indices) +
                            (static_cast<int64_t>(b) * s_q + tok) * a->h.topk_cols,
                        static_cast<uint64_t>(a->h.topk_cols));
    topk_len = Clamped(a->p.topk_length, a->h.topk_cols);
    cap = a->p.num_blocks * a->h.page_block_size;
    extra_len = 0;
    extra_base = a->h.extra_topk_cols > 0 ? RoundUp(a->h.topk_cols, a->t.block_tokens) : a->h.topk_cols;
    if (a->h.extra_topk_cols > 0) {
      extra_idx.SetGlobalBuffer(Gm<int32_t>(a->p.extra_indices) +
                                    (static_cast<int64_t>(b) * s_q + tok) * a->h.extra_topk_cols,
                                static_cast<uint64_t>(a->h.extra_topk_cols));
      extra_len = Clamped(a->p.extra_topk_length, a->h.extra_topk_cols);
      extra_cap = a->p.extra_num_blocks * a->h.extra_page_block_size;
    }
  }

  // Row of the key at pos (-1: invalid); run = following keys in consecutive rows of the same
  // pool with the same validity, capped at want.
  __aicore__ inline int64_t Row(int32_t pos, int32_t want, int32_t& pool, int32_t& run) const {
    pool = 0;
    run = 1;
    if (!a->t.sparse) {
      const int32_t bs = a->h.page_block_size;
      const int64_t blk = table.GetValue(static_cast<uint64_t>(b) * a->p.block_table_stride + pos / bs);
      run = MinI(want, bs - pos % bs);
      return blk * bs + pos % bs;
    }
    if (pos < extra_base) {
      if (pos >= topk_len) return -1;
      const int64_t v = idx.GetValue(pos);
      return v >= 0 && v < cap ? v : -1;
    }
    const int32_t e = pos - extra_base;
    if (e >= extra_len) return -1;
    pool = 1;
    const int64_t v = extra_idx.GetValue(e);
    return v >= 0 && v < extra_cap ? v : -1;
  }

 private:
  __aicore__ inline int32_t Clamped(void* lens, int32_t cols) const {
    if (lens == nullptr) return cols;
    AscendC::GlobalTensor<int32_t> g;
    g.SetGlobalBuffer(Gm<int32_t>(lens), static_cast<uint64_t>(a->t.batch));
    const int32_t v = g.GetValue(b);
    return v < 0 ? 0 : (v > cols ? cols : v);
  }
};

}  // namespace mla
}  // namespace dualops

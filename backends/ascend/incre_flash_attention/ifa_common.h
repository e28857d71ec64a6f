// Pieces of the Ascend C IFA kernel shared by the cube and the vector side: the kernel
// arguments read from GM (params struct + plan header), the unit decode, and where a key row
// of the (contiguous or paged) cache lives.
#pragma once
#include "kernel_operator.h"

#include "dualops/params.h"
#include "ascend/common/gm_addr.h"
#include "ascend/common/pipe_sync.h"
#include "ascend/incre_flash_attention/ifa_layout.h"

namespace dualops {
namespace ifa {

using ascend::PipeSync;
using ascend::VecBarrier;

// Cross-core flags (mode 2: cube <-> the two vector cores of one AI core).
constexpr uint16_t kFlagScoresReady = 1;   // AIC -> AIV: mm1 scores of a tile are in S
constexpr uint16_t kFlagOutReady = 2;      // AIC -> AIV: mm2 result of a tile is in O
constexpr uint16_t kFlagProbsReady = 3;    // AIV -> AIC: P of a tile is written
constexpr uint16_t kFlagKvReady = 4;       // AIV -> AIC: converted K/V tile is written

// std::is_same without the host standard library (kernel sources build for the NPU too).
template <typename A, typename B>
struct IsSame {
  static constexpr bool value = false;
};
template <typename A>
struct IsSame<A, A> {
  static constexpr bool value = true;
};

constexpr float kNegInf = -__builtin_inff();
constexpr float kPosInf = __builtin_inff();
constexpr float kNaN = __builtin_nanf("");

// GM addresses of the call, as integers (the kernel's GM_ADDR arguments); 0 = tensor absent.
struct GmAddrs {
  uint64_t q, k, v, out, lse, kv_lens, block_table, atten_mask, pse_shift, k_scale, v_scale, k_offset, v_offset,
      o_accum, lse_accum, workspace;
};

// Everything a core needs to know about the call, loaded once from GM by the scalar unit: the
// addresses, and from the tiling buffer the plan header followed by the packed params struct
// (whose scalars -- strides, scale, dtypes, flags -- the kernel uses; its address fields are
// not read: addresses come from the arguments, as CANN kernels get them).
struct Args {
  IncreFlashAttentionParams p;
  GmAddrs g;
  IncreFlashAttentionTiling t;
  CubeChunks cube;
  Workspace ws;
  bool convert_kv;

  __aicore__ inline void Load(const GmAddrs& addrs, GM_ADDR tiling) {
    g = addrs;
    AscendC::GlobalTensor<int32_t> tg;
    tg.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), IncreFlashAttentionTiling::kInts);
    int32_t* td = reinterpret_cast<int32_t*>(&t);
    for (int32_t i = 0; i < IncreFlashAttentionTiling::kInts; ++i) td[i] = tg.GetValue(i);
    AscendC::GlobalTensor<uint8_t> pg;
    pg.SetGlobalBuffer(tiling + IncreFlashAttentionTiling::kInts * sizeof(int32_t), sizeof(IncreFlashAttentionParams));
    uint8_t* dst = reinterpret_cast<uint8_t*>(&p);
    for (uint32_t i = 0; i < sizeof(IncreFlashAttentionParams); ++i) dst[i] = pg.GetValue(i);
    cube = MakeCubeChunks(t);
    convert_kv = NeedsKvConvert(p.q_dtype, p.kv_dtype);
    ws = MakeWorkspace(t, convert_kv);
  }

  // This AI core's slice of the workspace.
  template <typename T>
  __aicore__ inline __gm__ T* Ws(uint64_t region_offset) const {
    return ascend::GmPtr<T>(g.workspace + ws.per_core * static_cast<uint64_t>(AscendC::GetBlockIdx() /
                                                                              AscendC::GetTaskRation()) +
                            region_offset);
  }
};

// One unit of work: (batch b, kv head kvh, split) and the keys it covers. The plan's first
// whole_groups units take a whole (b, kvh) group each (ns 1: out / lse written directly); the
// others split `split` of a later group (ns = num_splits: partials for the combine).
struct Unit {
  int32_t b, kvh, split, ns;
  int32_t kv_len;   // valid keys of request b
  int32_t k0, k1;   // keys [k0, k1) of this split (k1 <= kv_len; empty when k1 <= k0)
  int32_t tiles;    // kv tiles covering [k0, k1)

  __aicore__ inline void Decode(const Args& a, int32_t u) {
    const bool whole = u < a.t.whole_groups;
    const int32_t grp = whole ? u : a.t.whole_groups + (u - a.t.whole_groups) / a.t.num_splits;
    split = whole ? 0 : (u - a.t.whole_groups) % a.t.num_splits;
    ns = whole ? 1 : a.t.num_splits;
    kvh = grp % a.t.h_kv;
    b = grp / a.t.h_kv;
    const int32_t span = whole ? a.t.max_kv_len : a.t.split_len;
    AscendC::GlobalTensor<int32_t> lens;
    lens.SetGlobalBuffer(ascend::GmPtr<int32_t>(a.g.kv_lens), a.t.batch);
    kv_len = lens.GetValue(b);
    k0 = split * span;
    k1 = MinI(k0 + span, kv_len);
    tiles = k1 > k0 ? CeilDiv(k1 - k0, a.t.kv_tile) : 0;
  }
  // Valid keys of tile j.
  __aicore__ inline int32_t TileKeys(const Args& a, int32_t j) const {
    return MinI(a.t.kv_tile, k1 - (k0 + j * a.t.kv_tile));
  }
};

// Element offset of key `pos` of request b, kv head kvh, in a cache with strides s0/s1/s2
// (contiguous: batch/seq/head; paged: block/slot/head), and how many following keys share
// the same block (so one strided copy can take them).
struct KeyLocator {
  const Args* a;
  int32_t b, kvh;
  AscendC::GlobalTensor<int32_t> table;

  __aicore__ inline void Init(const Args& args, int32_t batch, int32_t head) {
    a = &args;
    b = batch;
    kvh = head;
    if (a->t.block_size) {
      table.SetGlobalBuffer(ascend::GmPtr<int32_t>(a->g.block_table));
    }
  }
  // Offset (elements) of key pos; run = keys from pos on in the same block, capped at want.
  __aicore__ inline int64_t Offset(int32_t pos, int32_t want, int64_t s0, int64_t s1, int64_t s2, int32_t& run) const {
    if (a->t.block_size == 0) {
      run = want;
      return static_cast<int64_t>(b) * s0 + static_cast<int64_t>(pos) * s1 + static_cast<int64_t>(kvh) * s2;
    }
    const int32_t bs = a->t.block_size;
    const int64_t blk = table.GetValue(static_cast<uint64_t>(b) * a->p.block_table_stride + pos / bs);
    const int32_t slot = pos % bs;
    run = MinI(want, bs - slot);
    return blk * s0 + static_cast<int64_t>(slot) * s1 + static_cast<int64_t>(kvh) * s2;
  }
};

// Query row r of a unit (r = g * s_q + i) -> (query index i, query head h).
__aicore__ inline void RowCoords(const Args& a, int32_t kvh, int32_t r, int32_t& i, int32_t& h) {
  const int32_t g = r / a.t.s_q;
  i = r % a.t.s_q;
  h = kvh * a.t.group + g;
}

}  // namespace ifa
}  // namespace dualops

// Pieces of the Ascend grouped-GEMM kernel shared by the cube and the vector side: the call's
// arguments read from GM (params + plan header), the decode of one work item into the output
// tile it covers, and the cross-core flags.
#pragma once
#include "kernel_operator.h"

#include "ascend/grouped_gemm/gg_layout.h"

namespace dualops {
namespace gg {

// Cross-core flags (mode 2: the cube core and the two vector cores of one AI core).
constexpr uint16_t kFlagTileReady = 5;   // AIC -> AIV: a tile (or K slice) is in the core's slot
constexpr uint16_t kFlagSlotFree = 6;    // AIV -> AIC: both vector cores are done with a slot

// std::is_same without the host standard library (kernel sources build for the NPU too).
template <typename A, typename B>
struct IsSameT {
  static constexpr bool value = false;
};
template <typename A>
struct IsSameT<A, A> {
  static constexpr bool value = true;
};

__aicore__ inline int32_t MinI(int32_t a, int32_t b) { return a < b ? a : b; }
__aicore__ inline int32_t MaxI(int32_t a, int32_t b) { return a > b ? a : b; }
__aicore__ inline int32_t RoundUpI(int32_t a, int32_t b) { return (a + b - 1) / b * b; }
__aicore__ inline int32_t CeilDivI(int32_t a, int32_t b) { return (a + b - 1) / b; }

// dualops::GroupedGemmParams (ops/include/dualops/params.h) with its addresses as integers:
// the kernel converts integer -> __gm__ T*, never a generic pointer.
struct GemmArgs {
  uint64_t addr_x, addr_w, addr_y, addr_offsets, addr_masked, addr_xs, addr_ws;
  int64_t m, n, k;
  int32_t num_groups, m_max, scale_mode, in_dtype, out_dtype;
};
static_assert(sizeof(GemmArgs) == 104, "GemmArgs mirrors dualops::GroupedGemmParams");

template <typename T>
__aicore__ inline __gm__ T* GmPtr(uint64_t addr) {
  return reinterpret_cast<__gm__ T*>(addr);
}

struct Args {
  GemmArgs p;
  GroupedGemmTiling t;
  Workspace ws;
  uint64_t ws_addr;
  uint64_t items_addr;

  __aicore__ inline void Load(GM_ADDR params, GM_ADDR work, GM_ADDR tiling) {
    AscendC::GlobalTensor<uint8_t> pg;
    pg.SetGlobalBuffer(params, sizeof(GemmArgs));
    uint8_t* dst = reinterpret_cast<uint8_t*>(&p);
    for (uint32_t i = 0; i < sizeof(GemmArgs); ++i) dst[i] = pg.GetValue(i);
    AscendC::GlobalTensor<int32_t> tg;
    tg.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), GroupedGemmTiling::kInts);
    int32_t* td = reinterpret_cast<int32_t*>(&t);
    for (int32_t i = 0; i < GroupedGemmTiling::kInts; ++i) td[i] = tg.GetValue(i);
    ws = MakeWorkspace(t);
    ws_addr = reinterpret_cast<uint64_t>(work);
    items_addr = reinterpret_cast<uint64_t>(tiling) + GroupedGemmTiling::kInts * sizeof(int32_t);
  }

  // Slot s of AI core `core`'s epilogue tiles (fp32 / int32 [round16(tile_m), tile_n]).
  __aicore__ inline uint64_t SlotAddr(int32_t core, int32_t s) const {
    return ws_addr + ws.slots + (static_cast<uint64_t>(core) * kSlots + s) * ws.slot_bytes;
  }
  __aicore__ inline bool Fp8() const { return t.in_dtype == DType::kFloat8E4m3fn; }
  // The cube's operands: the inputs, or their fp16 decode in the workspace for fp8.
  __aicore__ inline uint64_t CubeX() const { return Fp8() ? ws_addr + ws.x16 : p.addr_x; }
  __aicore__ inline uint64_t CubeW() const { return Fp8() ? ws_addr + ws.w16 : p.addr_w; }
};

__aicore__ inline int64_t Clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Rows a contiguous call may touch: those of x, and at most the plan's (the fp8 decode of x in the
// workspace holds the plan's rows).
__aicore__ inline int64_t ContiguousRows(const Args& a) {
  return a.p.m < a.t.m_total ? a.p.m : static_cast<int64_t>(a.t.m_total);
}

// The output tile of one work item, from the plan item and the device's group sizes: rows
// [row0, row0 + mr) of the flattened x / y rows, columns [n0, n0 + nc). A tile whose first
// row is at or past its group's rows (shape-only masked plans) is empty (mr = 0).
struct TileOf {
  int32_t g, nt, mr, n0, nc;
  int64_t row0;

  __aicore__ inline void Decode(const Args& a, int32_t item) {
    AscendC::GlobalTensor<int32_t> it;
    it.SetGlobalBuffer(GmPtr<int32_t>(a.items_addr), static_cast<uint64_t>(a.t.num_items) * 3);
    g = it.GetValue(3 * item);
    const int32_t mt = it.GetValue(3 * item + 1);
    nt = it.GetValue(3 * item + 2);
    int64_t base = 0;
    int32_t rows = 0;
    if (a.t.layout == GgLayout::kMasked) {
      AscendC::GlobalTensor<int32_t> mm;
      mm.SetGlobalBuffer(GmPtr<int32_t>(a.p.addr_masked), a.t.num_groups);
      rows = MinI(MaxI(mm.GetValue(g), 0), a.t.m_max);
      base = static_cast<int64_t>(g) * a.t.m_max;
    } else {
      AscendC::GlobalTensor<int32_t> off;
      off.SetGlobalBuffer(GmPtr<int32_t>(a.p.addr_offsets), a.t.num_groups + 1);
      // Clamped to [0, ContiguousRows()] and non-decreasing: offsets past x (or the plan's rows)
      // never send a copy outside x, x_scale, y or the fp8 decode of x.
      const int64_t m = ContiguousRows(a);
      base = Clamp64(off.GetValue(g), 0, m);
      rows = static_cast<int32_t>(Clamp64(off.GetValue(g + 1), base, m) - base);
    }
    const int32_t r0 = mt * a.t.tile_m;
    mr = rows > r0 ? MinI(a.t.tile_m, rows - r0) : 0;
    row0 = base + r0;
    n0 = nt * a.t.tile_n;
    nc = MinI(a.t.tile_n, a.t.n - n0);
  }
};

}  // namespace gg
}  // namespace dualops

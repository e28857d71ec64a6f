// Self-test kernel of every pipe synchronization a cube -> vector pipeline needs, each one
// droppable: tiling [rounds, drop] runs the pipeline with the synchronization `drop` (a Drop
// value, 0 = none) left out. With all of them the result is exact in every pipe_sync mode; with
// one missing, "strict" and "worst" fault and "worst_unchecked" computes a wrong result, the
// same on every run (tests/test_ascend_sim_worst.py).
//
// Cube core of block b, per round r: x[b, r] (16 x 16 fp16) -> L1 -> L0A, times an identity
// (L0B), -> L0C -> ws[b, r] (fp32), one cross-core flag to its vector cores after the last round.
// Vector core (b, s), per round: 128 floats of ws[b, r] -> t (MTE2); 128 scalar stores of r into
// sb; o1 = t + sb; o = 2 * o1 (two vector instructions); o -> out[b, r] (MTE3). After the last
// round the scalar unit reads o[0] and stores it to out3[2b + s].
//
// x: half [blocks, rounds, 16, 16]; eye: half [16, 16]; out: float [blocks, rounds, 256];
// out3: float [blocks * 2]; ws: float [blocks, rounds, 256]; tiling (int32): [rounds, drop]
#include "kernel_operator.h"

#include "ascend/common/pipe_sync.h"
#include "sim_test_cube.h"

using namespace AscendC;
using dualops::ascend::PipeSync;
namespace sim_test = dualops::ascend::sim_test;

namespace {

enum Drop : int32_t {
  kNone = 0,
  kMte2Mte1 = 1,   // LoadData reads L1 before DataCopy filled it
  kMte1Mte2 = 2,   // the next round's DataCopy overwrites L1 LoadData still reads
  kMte1M = 3,      // Mmad reads L0A before LoadData filled it
  kMMte1 = 4,      // the next round's LoadData overwrites L0A Mmad still reads
  kMFix = 5,       // Fixpipe reads L0C before Mmad wrote it
  kFixM = 6,       // the next round's Mmad overwrites L0C Fixpipe still reads
  kFixFlag = 7,    // the cross-core flag goes out on PIPE_MTE2 instead of PIPE_FIX
  kMte2V = 8,      // Add reads t before DataCopy filled it
  kVMte2 = 9,      // the next round's DataCopy overwrites t Add still reads
  kVBarrier = 10,  // Muls reads o1 without PipeBarrier<PIPE_V> after Add wrote it
  kVMte3 = 11,     // DataCopy (MTE3) reads o before Muls wrote it
  kMte3V = 12,     // the next round's Muls overwrites o DataCopy (MTE3) still reads
  kSV = 13,        // Add reads sb before the scalar stores landed
  kVS = 14,        // the scalar unit reads o[0] before Muls wrote it
};

using dualops::ascend::sim_test::kTile;
constexpr uint16_t kFlagReady = 1;

template <HardEvent E>
__aicore__ inline void Sync(int32_t drop, int32_t which) {
  if (drop != which) PipeSync<E>();
}

__aicore__ inline void CubeSide(GM_ADDR x, GM_ADDR eye, GM_ADDR ws, int32_t rounds, int32_t drop) {
  sim_test::CubeTiles cube;
  cube.Init(x, eye, ws, rounds, rounds);
  for (int32_t r = 0; r < rounds; ++r) {
    if (r > 0) Sync<HardEvent::MTE1_MTE2>(drop, kMte1Mte2);
    DataCopy(cube.a1, cube.xg[r * kTile], Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
    Sync<HardEvent::MTE2_MTE1>(drop, kMte2Mte1);
    if (r > 0) Sync<HardEvent::M_MTE1>(drop, kMMte1);
    LoadData(cube.a2, cube.a1, LoadData2DParams(0, 1, 1, 0, 0, false, 0));
    Sync<HardEvent::MTE1_M>(drop, kMte1M);
    if (r > 0) Sync<HardEvent::FIX_M>(drop, kFixM);
    Mmad(cube.c, cube.a2, cube.b2, MmadParams(16, 16, 16, 0, false, true));
    Sync<HardEvent::M_FIX>(drop, kMFix);
    Fixpipe<float, float, CFG_ROW_MAJOR>(cube.wg[r * kTile], cube.c, FixpipeParamsV220(16, 16, 16, 16, false));
  }
  if (drop == kFixFlag) CrossCoreSetFlag<2, PIPE_MTE2>(kFlagReady);
  else CrossCoreSetFlag<2, PIPE_FIX>(kFlagReady);
}

__aicore__ inline void VectorSide(GM_ADDR ws, GM_ADDR out, GM_ADDR out3, int32_t rounds, int32_t drop) {
  const int64_t blk = GetBlockIdx() / 2;
  const int64_t sub = GetSubBlockIdx();
  TPipe pipe;
  TBuf<TPosition::VECCALC> tb, sbb, o1b, ob;
  pipe.InitBuffer(tb, 128 * sizeof(float));
  pipe.InitBuffer(sbb, 128 * sizeof(float));
  pipe.InitBuffer(o1b, 128 * sizeof(float));
  pipe.InitBuffer(ob, 128 * sizeof(float));
  LocalTensor<float> t = tb.Get<float>(), sb = sbb.Get<float>(), o1 = o1b.Get<float>(), o = ob.Get<float>();
  GlobalTensor<float> wg, og, o3;
  wg.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws) + blk * rounds * kTile, rounds * kTile);
  og.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out) + blk * rounds * kTile, rounds * kTile);
  o3.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out3) + GetBlockIdx(), 1);
  CrossCoreWaitFlag(kFlagReady);
  for (int32_t r = 0; r < rounds; ++r) {
    if (r > 0) Sync<HardEvent::V_MTE2>(drop, kVMte2);
    DataCopy(t, wg[r * kTile + sub * 128], 128);
    if (r > 0) PipeSync<HardEvent::V_S>();   // the last Add read sb
    for (int32_t j = 0; j < 128; ++j) sb.SetValue(j, static_cast<float>(r));
    Sync<HardEvent::MTE2_V>(drop, kMte2V);
    Sync<HardEvent::S_V>(drop, kSV);
    Add(o1, t, sb, 128);
    if (drop != kVBarrier) PipeBarrier<PIPE_V>();
    if (r > 0) Sync<HardEvent::MTE3_V>(drop, kMte3V);
    Muls(o, o1, 2.0f, 128);
    Sync<HardEvent::V_MTE3>(drop, kVMte3);
    DataCopy(og[r * kTile + sub * 128], o, 128);
  }
  Sync<HardEvent::V_S>(drop, kVS);
  o3.SetValue(0, o.GetValue(0));
}

}  // namespace

extern "C" __global__ __aicore__ void sim_test_races(GM_ADDR x, GM_ADDR eye, GM_ADDR out, GM_ADDR out3, GM_ADDR ws,
                                                      GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<int32_t> t;
  t.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), 2);
  const int32_t rounds = t.GetValue(0);
  const int32_t drop = t.GetValue(1);
  if ASCEND_IS_AIC {
    CubeSide(x, eye, ws, rounds, drop);
  }
  if ASCEND_IS_AIV {
    VectorSide(ws, out, out3, rounds, drop);
  }
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(sim_test_races, KERNEL_TYPE_MIX_AIC_1_2);
#endif

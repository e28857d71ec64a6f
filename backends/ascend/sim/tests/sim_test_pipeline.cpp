// Self-test kernel of cube -> vector hand-off, as IFA does it: per round r the AIC multiplies a
// 16 x 16 fp16 tile of x by an identity (so C = x tile in fp32) into a GM workspace slot
// (two slots in flight), signals its two AIVs with CrossCoreSetFlag<2, PIPE_FIX>; each AIV
// takes 8 rows, adds r and writes them to out, then acknowledges with CrossCoreSetFlag<2,
// PIPE_MTE3> so the AIC may reuse the slot. Finally all AIVs SyncAll and each one copies a
// row written by another AI core into out2 (only correct if SyncAll really synchronized).
//
// x: half [blocks, rounds, 16, 16]; eye: half [16, 16]; out: float [blocks, rounds, 16, 16];
// out2: float [blocks * 2, 16]; ws: float [blocks, 2, 16, 16]; tiling (int32): [rounds]
#include "kernel_operator.h"

#include "ascend/common/pipe_sync.h"
#include "sim_test_cube.h"

using namespace AscendC;
using dualops::ascend::PipeSync;
namespace sim_test = dualops::ascend::sim_test;

namespace {

using dualops::ascend::sim_test::kTile;
constexpr uint16_t kFlagTileReady = 1;
constexpr uint16_t kFlagSlotFree = 2;

__aicore__ inline void CubeSide(GM_ADDR x, GM_ADDR eye, GM_ADDR ws, int32_t rounds) {
  sim_test::CubeTiles cube;
  cube.Init(x, eye, ws, rounds, 2);
  for (int32_t r = 0; r < rounds; ++r) {
    if (r >= 2) CrossCoreWaitFlag(kFlagSlotFree);   // both AIVs are done with slot r % 2
    if (r > 0) PipeSync<HardEvent::MTE1_MTE2>();    // the last LoadData read cube.a1
    DataCopy(cube.a1, cube.xg[r * kTile], Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
    PipeSync<HardEvent::MTE2_MTE1>();
    if (r > 0) PipeSync<HardEvent::M_MTE1>();       // the last Mmad read cube.a2
    LoadData(cube.a2, cube.a1, LoadData2DParams(0, 1, 1, 0, 0, false, 0));
    PipeSync<HardEvent::MTE1_M>();
    if (r > 0) PipeSync<HardEvent::FIX_M>();        // the last Fixpipe read cube.c
    Mmad(cube.c, cube.a2, cube.b2, MmadParams(16, 16, 16, 0, false, true));
    PipeSync<HardEvent::M_FIX>();
    Fixpipe<float, float, CFG_ROW_MAJOR>(cube.wg[(r % 2) * kTile], cube.c, FixpipeParamsV220(16, 16, 16, 16, false));
    CrossCoreSetFlag<2, PIPE_FIX>(kFlagTileReady);
  }
  // Consume the acknowledgements of the last rounds so no flag outlives the kernel.
  for (int32_t r = rounds > 2 ? rounds - 2 : 0; r < rounds; ++r) CrossCoreWaitFlag(kFlagSlotFree);
}

__aicore__ inline void VectorSide(GM_ADDR ws, GM_ADDR out, GM_ADDR out2, int32_t rounds) {
  const int64_t blk = GetBlockIdx() / 2;
  const int64_t sub = GetSubBlockIdx();
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inq;
  TQue<TPosition::VECOUT, 1> outq;
  pipe.InitBuffer(inq, 2, 128 * sizeof(float));
  pipe.InitBuffer(outq, 2, 128 * sizeof(float));
  GlobalTensor<float> wg, og, o2;
  wg.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws) + blk * 2 * kTile, 2 * kTile);
  og.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out) + blk * rounds * kTile, rounds * kTile);
  for (int32_t r = 0; r < rounds; ++r) {
    CrossCoreWaitFlag(kFlagTileReady);
    LocalTensor<float> t = inq.AllocTensor<float>();
    DataCopy(t, wg[(r % 2) * kTile + sub * 128], 128);
    inq.EnQue(t);
    t = inq.DeQue<float>();
    LocalTensor<float> o = outq.AllocTensor<float>();
    Adds(o, t, static_cast<float>(r), 128);
    inq.FreeTensor(t);
    outq.EnQue(o);
    o = outq.DeQue<float>();
    DataCopy(og[r * kTile + sub * 128], o, 128);
    outq.FreeTensor(o);
    PipeSync<HardEvent::MTE2_MTE3>();   // the flag goes out on MTE3: the slot's read is done too
    CrossCoreSetFlag<2, PIPE_MTE3>(kFlagSlotFree);
  }
  SyncAll();
  // Row 0 of round 0 of the next AI core (wrapping), written by another core before SyncAll.
  const int64_t nb = GetBlockNum();
  const int64_t src_blk = (blk + 1) % nb;
  GlobalTensor<float> src;
  src.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out) + src_blk * rounds * kTile + sub * 128, 16);
  o2.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out2) + GetBlockIdx() * 16, 16);
  LocalTensor<float> t = inq.AllocTensor<float>();
  DataCopy(t, src, 16);
  inq.EnQue(t);
  t = inq.DeQue<float>();
  LocalTensor<float> o = outq.AllocTensor<float>();
  DataCopy(o, t, 16);
  inq.FreeTensor(t);
  outq.EnQue(o);
  o = outq.DeQue<float>();
  DataCopy(o2, o, 16);
  outq.FreeTensor(o);
}

}  // namespace

extern "C" __global__ __aicore__ void sim_test_pipeline(GM_ADDR x, GM_ADDR eye, GM_ADDR out, GM_ADDR out2,
                                                         GM_ADDR ws, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<int32_t> t;
  t.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), 1);
  const int32_t rounds = t.GetValue(0);
  if ASCEND_IS_AIC {
    CubeSide(x, eye, ws, rounds);
  }
  if ASCEND_IS_AIV {
    VectorSide(ws, out, out2, rounds);
  }
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(sim_test_pipeline, KERNEL_TYPE_MIX_AIC_1_2);
#endif

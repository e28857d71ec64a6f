// Cube-core side of the cube -> vector pipeline self-test kernels (sim_test_pipeline.cpp,
// sim_test_races.cpp): one 16 x 16 fp16 tile in L1 for x and one for an identity, one each in
// L0A and L0B, one fp32 tile in L0C; the block's x tiles and its `ws_tiles` workspace tiles in
// GM. Init() loads the identity into L0B (L1 -> L0B behind the MTE2 -> MTE1 synchronization), so
// every round computes C = x tile * I = the x tile in fp32.
#pragma once
#include "kernel_operator.h"

#include "ascend/common/pipe_sync.h"

namespace dualops::ascend::sim_test {

constexpr int32_t kTile = 256;  // 16 x 16 values

struct CubeTiles {
  AscendC::TPipe pipe;
  AscendC::TBuf<AscendC::TPosition::A1> a1b, b1b;
  AscendC::TBuf<AscendC::TPosition::A2> a2b;
  AscendC::TBuf<AscendC::TPosition::B2> b2b;
  AscendC::TBuf<AscendC::TPosition::CO1> cb;
  AscendC::LocalTensor<half> a1, a2, b2;
  AscendC::LocalTensor<float> c;
  AscendC::GlobalTensor<half> xg;   // this block's `rounds` x tiles
  AscendC::GlobalTensor<float> wg;  // this block's workspace tiles

  __aicore__ inline void Init(GM_ADDR x, GM_ADDR eye, GM_ADDR ws, int32_t rounds, int32_t ws_tiles) {
    using namespace AscendC;
    const int64_t blk = GetBlockIdx();
    xg.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(x) + blk * rounds * kTile, rounds * kTile);
    wg.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws) + blk * ws_tiles * kTile, ws_tiles * kTile);
    pipe.InitBuffer(a1b, kTile * sizeof(half));
    pipe.InitBuffer(b1b, kTile * sizeof(half));
    pipe.InitBuffer(a2b, kTile * sizeof(half));
    pipe.InitBuffer(b2b, kTile * sizeof(half));
    pipe.InitBuffer(cb, kTile * sizeof(float));
    GlobalTensor<half> eg;
    eg.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(eye), kTile);
    LocalTensor<half> b1 = b1b.Get<half>();
    a1 = a1b.Get<half>();
    a2 = a2b.Get<half>();
    b2 = b2b.Get<half>();
    c = cb.Get<float>();
    DataCopy(b1, eg, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
    PipeSync<HardEvent::MTE2_MTE1>();
    LoadData(b2, b1, LoadData2DParams(0, 1, 1, 0, 0, false, 0));
  }
};

}  // namespace dualops::ascend::sim_test

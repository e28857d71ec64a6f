// Self-test kernel of the strided copies (AIV only, one block): gathers `rows` rows of `len`
// floats spaced `src_pitch` floats apart in x with DataCopyPad (rows land 32-B aligned in UB,
// the slack padded with -1), then writes them back densely with DataCopyPad, and also the
// padded UB image with a DataCopyParams copy.
//
// tiling (int32): [rows, len, src_pitch]; x: float; out: float [rows * len];
// out_padded: float [rows * ceil(len / 8) * 8].
#include "kernel_operator.h"

using namespace AscendC;

extern "C" __global__ __aicore__ void sim_test_datacopy(GM_ADDR x, GM_ADDR out, GM_ADDR out_padded, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  GlobalTensor<int32_t> t;
  t.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), 3);
  const int32_t rows = t.GetValue(0), len = t.GetValue(1), pitch = t.GetValue(2);
  const int32_t padded = (len + 7) / 8 * 8;
  TPipe pipe;
  TQue<TPosition::VECIN, 1> inq;
  pipe.InitBuffer(inq, 1, rows * padded * sizeof(float));
  GlobalTensor<float> xg, og, pg;
  xg.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x));
  og.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out), rows * len);
  pg.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out_padded), rows * padded);
  LocalTensor<float> u = inq.AllocTensor<float>();
  DataCopyPad(u, xg, DataCopyExtParams(rows, len * sizeof(float), (pitch - len) * sizeof(float), 0, 0),
              DataCopyPadExtParams<float>(true, 0, static_cast<uint8_t>(padded - len), -1.0f));
  inq.EnQue(u);
  u = inq.DeQue<float>();
  SetFlag<HardEvent::MTE2_MTE3>(0);   // the queue orders V after MTE2; MTE3 reads here
  WaitFlag<HardEvent::MTE2_MTE3>(0);
  DataCopyPad(og, u, DataCopyExtParams(rows, len * sizeof(float), 0, 0, 0));
  DataCopy(pg, u, DataCopyParams(rows, padded * sizeof(float) / 32, 0, 0));
  inq.FreeTensor(u);
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(sim_test_datacopy, KERNEL_TYPE_AIV_ONLY);
#endif

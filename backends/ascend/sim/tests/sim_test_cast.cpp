// Self-test kernel of Cast and its rounding modes (AIV only, one block).
//
// tiling (int32): [kind, round_mode, n]; kind 0: float -> half, 1: float -> bfloat16_t,
// 2: float -> int32_t, 3: float -> float (round to integral), 4: int8_t -> half,
// 5: uint8_t -> half, 6: int32_t -> float, 7: half -> int32_t (x holds halves).
// x: source elements; out: destination elements (n of them, at their own width).
#include "kernel_operator.h"

using namespace AscendC;

namespace {

template <typename D, typename S>
__aicore__ inline void CastCase(GM_ADDR x, GM_ADDR out, RoundMode mode, int32_t n) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> sb, db;
  pipe.InitBuffer(sb, n * sizeof(S) + 32);
  pipe.InitBuffer(db, n * sizeof(D) + 32);
  GlobalTensor<S> xg;
  GlobalTensor<D> og;
  xg.SetGlobalBuffer(reinterpret_cast<__gm__ S*>(x), n);
  og.SetGlobalBuffer(reinterpret_cast<__gm__ D*>(out), n);
  LocalTensor<S> s = sb.Get<S>();
  LocalTensor<D> d = db.Get<D>();
  DataCopyPad(s, xg, DataCopyExtParams(1, n * sizeof(S), 0, 0, 0), DataCopyPadExtParams<S>(false, 0, 0, S(0)));
  SetFlag<HardEvent::MTE2_V>(0);
  WaitFlag<HardEvent::MTE2_V>(0);
  Cast(d, s, mode, n);
  SetFlag<HardEvent::V_MTE3>(0);
  WaitFlag<HardEvent::V_MTE3>(0);
  DataCopyPad(og, d, DataCopyExtParams(1, n * sizeof(D), 0, 0, 0));
}

}  // namespace

extern "C" __global__ __aicore__ void sim_test_cast(GM_ADDR x, GM_ADDR out, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  GlobalTensor<int32_t> t;
  t.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), 3);
  const int32_t kind = t.GetValue(0);
  const RoundMode mode = static_cast<RoundMode>(t.GetValue(1));
  const int32_t n = t.GetValue(2);
  switch (kind) {
    case 0: CastCase<half, float>(x, out, mode, n); break;
    case 1: CastCase<bfloat16_t, float>(x, out, mode, n); break;
    case 2: CastCase<int32_t, float>(x, out, mode, n); break;
    case 3: CastCase<float, float>(x, out, mode, n); break;
    case 4: CastCase<half, int8_t>(x, out, mode, n); break;
    case 5: CastCase<half, uint8_t>(x, out, mode, n); break;
    case 6: CastCase<float, int32_t>(x, out, mode, n); break;
    case 7: CastCase<int32_t, half>(x, out, mode, n); break;
    default: break;
  }
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(sim_test_cast, KERNEL_TYPE_AIV_ONLY);
#endif

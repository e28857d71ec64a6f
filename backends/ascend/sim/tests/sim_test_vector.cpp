// Self-test kernel of the simulator's vector unit: one op per launch, chosen by the tiling
// buffer, over n float elements per block (AIV only). Driven by tests/test_ascend_sim.py.
//
// tiling (int32): [op, n_per_block]; x, y: float [blocks * n]; out: float [blocks * n].
#include "kernel_operator.h"

using namespace AscendC;

namespace {

enum VecOp : int32_t {
  kAdd = 0, kSub, kMul, kDiv, kMax, kMin, kAdds, kMuls, kExp, kLn, kAbs, kSqrt, kReduceMax, kReduceSum,
  kSelectScalar, kSelectTensor, kDuplicate, kVecIndex, kGatherReverse, kHalfAdd, kReciprocal, kMaxsMins,
};

class VectorOpKernel {
 public:
  __aicore__ inline void Run(GM_ADDR x, GM_ADDR y, GM_ADDR out, GM_ADDR tiling) {
    GlobalTensor<int32_t> t;
    t.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), 2);
    const int32_t op = t.GetValue(0);
    const int32_t n = t.GetValue(1);
    const int64_t base = GetBlockIdx() * n;
    xg_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x) + base, n);
    yg_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(y) + base, n);
    og_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out) + base, n);
    const uint32_t bytes = n * sizeof(float);
    pipe_.InitBuffer(inX_, 1, bytes);
    pipe_.InitBuffer(inY_, 1, bytes);
    pipe_.InitBuffer(out_, 1, bytes);
    pipe_.InitBuffer(tmp_, bytes);
    pipe_.InitBuffer(mask_, bytes);

    LocalTensor<float> xl = inX_.AllocTensor<float>();
    LocalTensor<float> yl = inY_.AllocTensor<float>();
    DataCopy(xl, xg_, n);
    DataCopy(yl, yg_, n);
    inX_.EnQue(xl);
    inY_.EnQue(yl);
    xl = inX_.DeQue<float>();
    yl = inY_.DeQue<float>();
    LocalTensor<float> o = out_.AllocTensor<float>();
    LocalTensor<float> tmp = tmp_.Get<float>();
    LocalTensor<uint8_t> bits = mask_.Get<uint8_t>();

    switch (op) {
      case kAdd: Add(o, xl, yl, n); break;
      case kSub: Sub(o, xl, yl, n); break;
      case kMul: Mul(o, xl, yl, n); break;
      case kDiv: Div(o, xl, yl, n); break;
      case kMax: Max(o, xl, yl, n); break;
      case kMin: Min(o, xl, yl, n); break;
      case kAdds: Adds(o, xl, 2.5f, n); break;
      case kMuls: Muls(o, xl, -1.5f, n); break;
      case kExp: Exp(o, xl, n); break;
      case kLn: Ln(o, xl, n); break;
      case kAbs: Abs(o, xl, n); break;
      case kSqrt: Sqrt(o, xl, n); break;
      case kReduceMax:
      case kReduceSum: {
        Duplicate(o, 0.0f, n);
        PipeBarrier<PIPE_V>();
        if (op == kReduceMax) ReduceMax(o, xl, tmp, n, false);
        else ReduceSum(o, xl, tmp, n);
        break;
      }
      case kSelectScalar:   // out = x > 0 ? x : -7
        CompareScalar(bits, xl, 0.0f, CMPMODE::GT, n);
        PipeBarrier<PIPE_V>();
        Select(o, bits, xl, -7.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, n);
        break;
      case kSelectTensor:   // out = x < y ? x : y
        Compare(bits, xl, yl, CMPMODE::LT, n);
        PipeBarrier<PIPE_V>();
        Select(o, bits, xl, yl, SELMODE::VSEL_TENSOR_TENSOR_MODE, n);
        break;
      case kDuplicate: Duplicate(o, 3.25f, n); break;
      case kVecIndex: CreateVecIndex(o, 0.5f, n); break;
      case kGatherReverse: {   // out[i] = x[n - 1 - i] through a UB table lookup
        LocalTensor<uint32_t> off = tmp.ReinterpretCast<uint32_t>();
        for (int32_t i = 0; i < n; ++i) off.SetValue(i, static_cast<uint32_t>((n - 1 - i) * sizeof(float)));
        SetFlag<HardEvent::S_V>(0);
        WaitFlag<HardEvent::S_V>(0);
        Gather(o, xl, off, 0, n);
        break;
      }
      case kHalfAdd: {   // fp16 arithmetic: round x and y to half, add in half, back to float
        LocalTensor<half> hx = tmp.ReinterpretCast<half>();
        LocalTensor<half> hy = hx[n];
        Cast(hx, xl, RoundMode::CAST_RINT, n);
        Cast(hy, yl, RoundMode::CAST_RINT, n);
        PipeBarrier<PIPE_V>();
        Add(hx, hx, hy, n);
        PipeBarrier<PIPE_V>();
        Cast(o, hx, RoundMode::CAST_NONE, n);
        break;
      }
      case kReciprocal: Reciprocal(o, xl, n); break;
      case kMaxsMins:   // clamp to [-1, 1]
        Maxs(o, xl, -1.0f, n);
        PipeBarrier<PIPE_V>();
        Mins(o, o, 1.0f, n);
        break;
      default: break;
    }
    inX_.FreeTensor(xl);
    inY_.FreeTensor(yl);
    out_.EnQue(o);
    o = out_.DeQue<float>();
    DataCopy(og_, o, n);
    out_.FreeTensor(o);
  }

 private:
  TPipe pipe_;
  TQue<TPosition::VECIN, 1> inX_, inY_;
  TQue<TPosition::VECOUT, 1> out_;
  TBuf<TPosition::VECCALC> tmp_, mask_;
  GlobalTensor<float> xg_, yg_, og_;
};

}  // namespace

extern "C" __global__ __aicore__ void sim_test_vector(GM_ADDR x, GM_ADDR y, GM_ADDR out, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  VectorOpKernel k;
  k.Run(x, y, out, tiling);
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(sim_test_vector, KERNEL_TYPE_AIV_ONLY);
#endif

// Self-test kernel of the cube path: C[M, N] = A[M, K] . B on the AIC with the low-level API
// (GM -> L1 by Nd2Nz, L1 -> L0A / L0B by LoadData, Mmad into L0C, Fixpipe NZ -> ND to GM).
// Each block computes rows [block * m_tile, ...) of C.
//
// tiling (int32): [M, N, K, m_tile, dtype (1 fp16, 2 bf16), b_is_nk (1: B given as [N, K],
//                  0: as [K, N]), out_f16 (1: C in A's dtype via the fixpipe cast, 0: fp32)]
#include "kernel_operator.h"

using namespace AscendC;

namespace {

template <typename T>
class MatmulKernel {
 public:
  __aicore__ inline void Run(GM_ADDR a, GM_ADDR b, GM_ADDR c, const int32_t* p) {
    const int32_t M = p[0], N = p[1], K = p[2], mt = p[3], b_is_nk = p[5], out_half = p[6];
    const int32_t m0 = GetBlockIdx() * mt;
    if (m0 >= M) return;
    const int32_t m = (M - m0) < mt ? (M - m0) : mt;
    const int32_t mp = (m + 15) / 16 * 16, np = (N + 15) / 16 * 16, kp = (K + 15) / 16 * 16;
    ag_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(a), static_cast<uint64_t>(M) * K);
    bg_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(b), static_cast<uint64_t>(N) * K);

    pipe_.InitBuffer(a1_, 1, mp * kp * sizeof(T));
    pipe_.InitBuffer(b1_, 1, np * kp * sizeof(T));
    pipe_.InitBuffer(a2_, 1, mp * kp * sizeof(T));
    pipe_.InitBuffer(b2_, 1, kp * np * sizeof(T));
    pipe_.InitBuffer(co1_, 1, mp * np * sizeof(float));

    // A rows -> L1 NZ (C0Stride = mp rows). Padding rows/cols must be zero for the cube.
    LocalTensor<T> a1 = a1_.AllocTensor<T>();
    InitConstValue(a1, InitConstValueParams<T>(1, static_cast<uint16_t>(mp * kp * sizeof(T) / 32), 0, T(0)));
    DataCopy(a1, ag_[static_cast<uint64_t>(m0) * K],
             Nd2NzParams(1, m, K, 0, K, mp, 1, 0));
    LocalTensor<T> b1 = b1_.AllocTensor<T>();
    InitConstValue(b1, InitConstValueParams<T>(1, static_cast<uint16_t>(np * kp * sizeof(T) / 32), 0, T(0)));
    if (b_is_nk) {
      DataCopy(b1, bg_, Nd2NzParams(1, N, K, 0, K, np, 1, 0));   // B^T rows in NZ
    } else {
      DataCopy(b1, bg_, Nd2NzParams(1, K, N, 0, N, kp, 1, 0));   // B rows (k) in NZ
    }
    a1_.EnQue(a1);
    b1_.EnQue(b1);
    a1 = a1_.DeQue<T>();
    b1 = b1_.DeQue<T>();

    const int32_t mb = mp / 16, nb = np / 16, kb = kp / 16;
    LocalTensor<T> a2 = a2_.AllocTensor<T>();
    for (int32_t i = 0; i < mb; ++i) {   // NZ (k-block major) -> ZZ (m-block major)
      LoadData(a2[i * kb * 256], a1, LoadData2DParams(i, kb, mb, 0, 0, false, 0));
    }
    LocalTensor<T> b2 = b2_.AllocTensor<T>();
    if (b_is_nk) {
      // NZ of B^T is already the ZN layout of B: one straight load.
      LoadData(b2, b1, LoadData2DParams(0, kb * nb, 1, 0, 0, false, 0));
    } else {
      for (int32_t i = 0; i < kb; ++i) {   // transpose each fractal of B's NZ
        LoadData(b2[i * nb * 256], b1, LoadData2DParams(i, nb, kb, 0, 0, true, 0));
      }
    }
    a1_.FreeTensor(a1);
    b1_.FreeTensor(b1);
    a2_.EnQue(a2);
    b2_.EnQue(b2);
    a2 = a2_.DeQue<T>();
    b2 = b2_.DeQue<T>();

    LocalTensor<float> c1 = co1_.AllocTensor<float>();
    Mmad(c1, a2, b2, MmadParams(m, N, K, 0, false, true));
    a2_.FreeTensor(a2);
    b2_.FreeTensor(b2);
    co1_.EnQue(c1);
    c1 = co1_.DeQue<float>();

    FixpipeParamsV220 fp(N, m, mp, N, false);
    if (out_half) {
      GlobalTensor<T> cg;
      cg.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(c) + static_cast<uint64_t>(m0) * N, static_cast<uint64_t>(m) * N);
      fp.quantPre = sizeof(T) == 2 && std::is_same<T, half>::value ? QuantMode_t::F322F16 : QuantMode_t::F322BF16;
      Fixpipe<T, float, CFG_ROW_MAJOR>(cg, c1, fp);
    } else {
      GlobalTensor<float> cg;
      cg.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(c) + static_cast<uint64_t>(m0) * N, static_cast<uint64_t>(m) * N);
      Fixpipe<float, float, CFG_ROW_MAJOR>(cg, c1, fp);
    }
    co1_.FreeTensor(c1);
  }

 private:
  TPipe pipe_;
  TQue<TPosition::A1, 1> a1_;
  TQue<TPosition::B1, 1> b1_;
  TQue<TPosition::A2, 1> a2_;
  TQue<TPosition::B2, 1> b2_;
  TQue<TPosition::CO1, 1> co1_;
  GlobalTensor<T> ag_, bg_;
};

}  // namespace

extern "C" __global__ __aicore__ void sim_test_matmul(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
  GlobalTensor<int32_t> t;
  t.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), 7);
  int32_t p[7];
  for (int32_t i = 0; i < 7; ++i) p[i] = t.GetValue(i);
  if (p[4] == 1) {
    MatmulKernel<half> k;
    k.Run(a, b, c, p);
  } else {
    MatmulKernel<bfloat16_t> k;
    k.Run(a, b, c, p);
  }
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(sim_test_matmul, KERNEL_TYPE_AIC_ONLY);
#endif

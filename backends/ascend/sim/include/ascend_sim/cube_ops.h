// The cube path of an A2 AI core (AIC only): L1 -> L0A / L0B (LoadData with 512-B fractals),
// Mmad into L0C (fp16 / bf16 inputs, fp32 accumulation; int8 -> int32), L0C -> GM (Fixpipe with
// NZ -> ND and the fp32 -> fp16 / bf16 conversion), and InitConstValue to zero L1 / L0 tiles.
//
// Fractal layouts (C0 = 32 B / sizeof(T) elements, 16 rows):
//   L1   "NZ": element (row r, col c) of a matrix at ((c / C0) * C0Stride + r) * C0 + c % C0
//   L0A  "ZZ": A[m][k] in fractal (m / 16) * kBlocks + k / C0, at (m % 16) * C0 + k % C0
//   L0B  "ZN": B[k][n] in fractal (k / C0) * nBlocks + n / 16, at (n % 16) * C0 + k % C0
//   L0C  "NZ": C[m][n] in fractal (n / 16) * mBlocks + m / 16, at (m % 16) * 16 + n % 16
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor.h"

namespace AscendC {

struct LoadData2DParams {
  __aicore__ LoadData2DParams() {}
  __aicore__ LoadData2DParams(const uint16_t startIndexIn, const uint8_t repeatTimesIn, const uint16_t srcStrideIn,
                              const uint8_t sidIn, const uint16_t dstGapIn, const bool ifTransposeIn,
                              const uint8_t addrModeIn)
      : startIndex(startIndexIn), dstGap(dstGapIn), srcStride(srcStrideIn), ifTranspose(ifTransposeIn),
        repeatTimes(repeatTimesIn), sid(sidIn), addrMode(addrModeIn) {}
  uint16_t startIndex = 0;   // first source fractal
  uint16_t dstGap = 0;       // fractals skipped in dst between repeats
  uint16_t srcStride = 0;    // source fractals between repeats
  bool ifTranspose = false;  // transpose each 16x16 fractal (L1 -> L0B)
  uint8_t repeatTimes = 0;
  uint8_t sid = 0;
  uint8_t addrMode = 0;
};
using LoadData2dParams = LoadData2DParams;

struct MmadParams {
  __aicore__ MmadParams() {}
  __aicore__ MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn, const bool isBiasIn,
                        const int32_t fmOffsetIn, const bool enSsparseIn, const bool enWinogradAIn,
                        const bool enWinogradBIn)
      : m(mIn), n(nIn), k(kIn), isBias(isBiasIn), fmOffset(fmOffsetIn), enSsparse(enSsparseIn),
        enWinogradA(enWinogradAIn), enWinogradB(enWinogradBIn) {}
  __aicore__ MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn, const uint8_t unitFlagIn,
                        const bool cmatrixSourceIn, const bool cmatrixInitValIn)
      : m(mIn), n(nIn), k(kIn), unitFlag(unitFlagIn), cmatrixSource(cmatrixSourceIn),
        cmatrixInitVal(cmatrixInitValIn) {}
  uint16_t m = 0;
  uint16_t n = 0;
  uint16_t k = 0;
  bool isBias = false;
  int32_t fmOffset = 0;
  bool enSsparse = false;
  bool enWinogradA = false;
  bool enWinogradB = false;
  uint8_t unitFlag = 0;
  bool kDirectionAlign = false;
  bool cmatrixSource = false;
  bool cmatrixInitVal = true;   // true: C = A.B; false: C += A.B
};

template <typename T>
struct InitConstValueParams {
  __aicore__ InitConstValueParams() {}
  __aicore__ InitConstValueParams(const uint16_t repeatTimesIn, const uint16_t blockNumIn, const uint16_t dstGapIn,
                                  const T initValueIn)
      : repeatTimes(repeatTimesIn), blockNum(blockNumIn), dstGap(dstGapIn), initValue(initValueIn) {}
  __aicore__ InitConstValueParams(const uint16_t repeatTimesIn, const T initValueIn)
      : repeatTimes(repeatTimesIn), initValue(initValueIn) {}
  uint16_t repeatTimes = 0;
  uint16_t blockNum = 0;
  uint16_t dstGap = 0;
  T initValue = T(0);
};

enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };

struct FixpipeConfig {
  CO2Layout format;
  __aicore__ constexpr FixpipeConfig(CO2Layout f) : format(f) {}
  __aicore__ constexpr FixpipeConfig(CO2Layout f, bool) : format(f) {}
};
constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};
constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
constexpr FixpipeConfig CFG_COLUMN_MAJOR = {CO2Layout::COLUMN_MAJOR};

struct FixpipeParamsV220 {
  __aicore__ FixpipeParamsV220() {}
  __aicore__ FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn, const uint16_t srcStrideIn,
                               const uint32_t dstStrideIn, const bool reluEnIn)
      : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), reluEn(reluEnIn) {}
  __aicore__ FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn, const uint16_t srcStrideIn,
                               const uint32_t dstStrideIn, const bool reluEnIn, const QuantMode_t quantPreIn,
                               const int64_t deqScalarIn, const uint16_t ndNumIn, const uint16_t srcNdStrideIn,
                               const uint16_t dstNdStrideIn, const uint8_t unitFlagIn)
      : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), quantPre(quantPreIn),
        deqScalar(static_cast<uint64_t>(deqScalarIn)), ndNum(ndNumIn), srcNdStride(srcNdStrideIn),
        dstNdStride(dstNdStrideIn), reluEn(reluEnIn), unitFlag(unitFlagIn) {}
  uint16_t nSize = 0;       // columns written
  uint16_t mSize = 0;       // rows written
  uint16_t srcStride = 0;   // L0C rows between column fractals (the M extent, multiple of 16)
  uint32_t dstStride = 0;   // ND: elements between rows in GM
  QuantMode_t quantPre = QuantMode_t::NoQuant;
  uint64_t deqScalar = 0;
  uint16_t ndNum = 1;
  uint16_t srcNdStride = 0;
  uint16_t dstNdStride = 0;
  bool reluEn = false;
  uint8_t unitFlag = 0;
  bool isChannelSplit = false;
};

}  // namespace AscendC

namespace ascend_sim {

constexpr uint32_t kFractalBytes = 512;

inline void CubeEnter(const char* api) {
  Enter();
  RequireCore(api, CoreKind::AIC);
}

template <typename T>
float CubeIn(T v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16_t>) return static_cast<float>(v);
  else return static_cast<float>(v);
}

}  // namespace ascend_sim

namespace AscendC {

template <typename T>
__aicore__ inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p, ASIM_LOC) {
  const char* api = "LoadData(2D)";
  ascend_sim::CubeEnter(api);
  using ascend_sim::Mem;
  ascend_sim::CheckOperand(api, "src", src, 0, {Mem::L1}, 32);
  ascend_sim::CheckOperand(api, "dst", dst, 0, {Mem::L0A, Mem::L0B}, ascend_sim::kFractalBytes);
  if (p.ifTranspose) {
    if (dst.ref.mem != Mem::L0B) ascend_sim::Fault(api, "ifTranspose is only available towards L0B");
    if (sizeof(T) != 2) ascend_sim::Fault(api, "ifTranspose is supported for 16-bit types only in the simulator");
  }
  if (p.repeatTimes == 0) return;
  constexpr uint32_t fe = ascend_sim::kFractalBytes / sizeof(T);   // elements per fractal
  const uint64_t src_last = (static_cast<uint64_t>(p.startIndex) + static_cast<uint64_t>(p.repeatTimes - 1) * p.srcStride + 1) * fe;
  const uint64_t dst_last = (static_cast<uint64_t>(p.repeatTimes - 1) * (1 + p.dstGap) + 1) * fe;
  if (src_last > src.GetSize()) {
    ascend_sim::Fault(api, ascend_sim::Str("reads source fractal ", src_last / fe - 1, " but the L1 tensor holds ",
                                           src.GetSize() / fe, " fractals"));
  }
  if (dst_last > dst.GetSize()) {
    ascend_sim::Fault(api, ascend_sim::Str("writes destination fractal ", dst_last / fe - 1, " but the ",
                                           ascend_sim::MemName(dst.ref.mem), " tensor holds ", dst.GetSize() / fe,
                                           " fractals (", ascend_sim::Cur().cap[static_cast<int>(dst.ref.mem)],
                                           " B buffer)"));
  }
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPMte1,
                     {ascend_sim::RngBytes(src, static_cast<uint64_t>(p.startIndex) * ascend_sim::kFractalBytes,
                                           src_last * sizeof(T))},
                     {ascend_sim::Rng(dst, dst_last)});
  ascend_sim::Exec([=] {
    const T* s = src.SimPtr();
    T* d = dst.SimPtr();
    for (uint32_t i = 0; i < p.repeatTimes; ++i) {
      const T* sf = s + (static_cast<uint64_t>(p.startIndex) + static_cast<uint64_t>(i) * p.srcStride) * fe;
      T* df = d + static_cast<uint64_t>(i) * (1 + p.dstGap) * fe;
      if (!p.ifTranspose) {
        std::memcpy(df, sf, ascend_sim::kFractalBytes);
      } else {
        for (uint32_t r = 0; r < 16; ++r)
          for (uint32_t c = 0; c < 16; ++c) df[c * 16 + r] = sf[r * 16 + c];
      }
    }
  });
  ascend_sim::Cur().c.local_copy_bytes += static_cast<uint64_t>(p.repeatTimes) * ascend_sim::kFractalBytes;
}

template <typename T, typename U, typename S>
__aicore__ inline void Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter,
                            const MmadParams& p, ASIM_LOC) {
  const char* api = "Mmad";
  ascend_sim::CubeEnter(api);
  using ascend_sim::Mem;
  static_assert(std::is_same_v<U, S>, "Mmad: A and B must have the same element type");
  constexpr bool kF16 = std::is_same_v<U, half> || std::is_same_v<U, bfloat16_t>;
  constexpr bool kI8 = std::is_same_v<U, int8_t>;
  constexpr bool kF32 = std::is_same_v<U, float>;
  static_assert(kF16 || kI8 || kF32, "Mmad inputs: half, bfloat16_t, int8_t or float");
  static_assert(kI8 ? std::is_same_v<T, int32_t> : std::is_same_v<T, float>,
                "Mmad accumulates fp16/bf16/fp32 into float and int8 into int32_t");
  if (p.isBias || p.cmatrixSource) ascend_sim::Fault(api, "bias / bias-table C matrices are not supported by the simulator");
  if (p.m == 0 || p.n == 0 || p.k == 0) return;
  constexpr uint32_t c0 = 32 / sizeof(U);
  const uint32_t mb = (p.m + 15) / 16, nb = (p.n + 15) / 16, kb = (p.k + c0 - 1) / c0;
  ascend_sim::CheckOperand(api, "A (fm)", fm, static_cast<uint64_t>(mb) * kb * 16 * c0, {Mem::L0A}, ascend_sim::kFractalBytes);
  ascend_sim::CheckOperand(api, "B (filter)", filter, static_cast<uint64_t>(kb) * nb * 16 * c0, {Mem::L0B}, ascend_sim::kFractalBytes);
  ascend_sim::CheckOperand(api, "C (dst)", dst, static_cast<uint64_t>(mb) * nb * 256, {Mem::L0C}, 64);
  const uint32_t M = mb * 16, N = nb * 16, K = kb * c0;
  {
    const ascend_sim::Range c = ascend_sim::Rng(dst, static_cast<uint64_t>(mb) * nb * 256);
    const ascend_sim::Range none{0, 0, 0};
    ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPM,
                       {ascend_sim::Rng(fm, static_cast<uint64_t>(mb) * kb * 16 * c0),
                        ascend_sim::Rng(filter, static_cast<uint64_t>(kb) * nb * 16 * c0), p.cmatrixInitVal ? none : c},
                       {c});
  }
  ascend_sim::Exec([=] {
    // Whole fractals are multiplied, padding included, as on the hardware: keep it zero.
    std::vector<float> a(static_cast<size_t>(M) * K), b(static_cast<size_t>(K) * N);
    const U* A = fm.SimPtr();
    const S* B = filter.SimPtr();
    for (uint32_t m = 0; m < M; ++m)
      for (uint32_t k = 0; k < K; ++k)
        a[static_cast<size_t>(m) * K + k] = ascend_sim::CubeIn(A[((m / 16) * kb + k / c0) * 16 * c0 + (m % 16) * c0 + k % c0]);
    for (uint32_t k = 0; k < K; ++k)
      for (uint32_t n = 0; n < N; ++n)
        b[static_cast<size_t>(k) * N + n] = ascend_sim::CubeIn(B[((k / c0) * nb + n / 16) * 16 * c0 + (n % 16) * c0 + k % c0]);
    T* C = dst.SimPtr();
    for (uint32_t m = 0; m < M; ++m) {
      for (uint32_t n = 0; n < N; ++n) {
        T& c = C[((n / 16) * mb + m / 16) * 256 + (m % 16) * 16 + n % 16];
        if constexpr (kI8) {
          int32_t acc = p.cmatrixInitVal ? 0 : c;
          for (uint32_t k = 0; k < K; ++k)
            acc += static_cast<int32_t>(a[static_cast<size_t>(m) * K + k]) * static_cast<int32_t>(b[static_cast<size_t>(k) * N + n]);
          c = acc;
        } else {
          float acc = p.cmatrixInitVal ? 0.0f : c;
          for (uint32_t k = 0; k < K; ++k) acc += a[static_cast<size_t>(m) * K + k] * b[static_cast<size_t>(k) * N + n];
          c = acc;
        }
      }
    }
  });
  ascend_sim::CoreContext& cc = ascend_sim::Cur();
  cc.c.cube_instrs += 1;
  cc.c.cube_macs += static_cast<uint64_t>(M) * N * K;
  if (kF32) cc.c.cube_fp32_macs += static_cast<uint64_t>(M) * N * K;
}

// L0C -> GM. ROW_MAJOR converts NZ fractals to an ND matrix with row pitch dstStride.
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
__aicore__ inline void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsV220& p, ASIM_LOC) {
  const char* api = "Fixpipe(L0C->GM)";
  ascend_sim::CubeEnter(api);
  using ascend_sim::Mem;
  static_assert(std::is_same_v<U, float> || std::is_same_v<U, int32_t>, "Fixpipe reads float / int32_t from L0C");
  if (config.format != CO2Layout::ROW_MAJOR) ascend_sim::Fault(api, "only CFG_ROW_MAJOR (NZ -> ND) is supported by the simulator");
  if (p.ndNum != 1) ascend_sim::Fault(api, "ndNum > 1 is not supported by the simulator");
  if constexpr (std::is_same_v<T, half>) {
    if (p.quantPre != QuantMode_t::F322F16) ascend_sim::Fault(api, "fp32 -> half output needs quantPre = F322F16");
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
    if (p.quantPre != QuantMode_t::F322BF16) ascend_sim::Fault(api, "fp32 -> bfloat16 output needs quantPre = F322BF16");
  } else {
    static_assert(std::is_same_v<T, U>, "Fixpipe without quantization keeps the L0C type");
    if (p.quantPre != QuantMode_t::NoQuant) ascend_sim::Fault(api, "an fp32 / int32 output needs quantPre = NoQuant");
  }
  if (p.mSize == 0 || p.nSize == 0) return;
  if (p.srcStride < p.mSize || p.srcStride % 16) {
    ascend_sim::Fault(api, ascend_sim::Str("srcStride ", p.srcStride, " must be a multiple of 16 covering mSize ", p.mSize));
  }
  if (p.dstStride < p.nSize) {
    ascend_sim::Fault(api, ascend_sim::Str("dstStride ", p.dstStride, " is smaller than nSize ", p.nSize));
  }
  const uint32_t nb = (p.nSize + 15) / 16;
  ascend_sim::CheckOperand(api, "src (L0C)", src, static_cast<uint64_t>(nb - 1) * p.srcStride * 16 + static_cast<uint64_t>(p.srcStride) * 16,
                           {Mem::L0C}, 64);
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPFix, {ascend_sim::Rng(src, static_cast<uint64_t>(nb) * p.srcStride * 16)}, {});
  for (uint32_t r = 0; r < p.mSize; ++r) dst.SimCheck(api, static_cast<uint64_t>(r) * p.dstStride, p.nSize, true);
  ascend_sim::Exec([=] {
    const U* s = src.SimPtr();
    for (uint32_t r = 0; r < p.mSize; ++r) {
      T* d = dst.SimPtr(static_cast<uint64_t>(r) * p.dstStride);
      for (uint32_t c = 0; c < p.nSize; ++c) {
        U v = s[(static_cast<uint64_t>(c / 16) * p.srcStride + r) * 16 + c % 16];
        if (p.reluEn && v < 0) v = 0;
        if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16_t>) d[c] = T(static_cast<float>(v));
        else d[c] = v;
      }
    }
  });
  ascend_sim::PipeGm(api, asim_loc, ascend_sim::kPFix, reinterpret_cast<uint64_t>(dst.SimPtr()), p.mSize,
                     static_cast<uint64_t>(p.nSize) * sizeof(T), static_cast<uint64_t>(p.dstStride) * sizeof(T), true);
  ascend_sim::CoreContext& cc = ascend_sim::Cur();
  cc.c.fixpipe_bytes += static_cast<uint64_t>(p.mSize) * p.nSize * sizeof(T);
}

// Fill L1 (32-B blocks) or L0A / L0B (512-B fractals) with a constant.
template <typename T, typename U = T>
__aicore__ inline void InitConstValue(const LocalTensor<T>& dst, const InitConstValueParams<U>& p, ASIM_LOC) {
  const char* api = "InitConstValue";
  ascend_sim::CubeEnter(api);
  using ascend_sim::Mem;
  ascend_sim::CheckOperand(api, "dst", dst, 0, {Mem::L1, Mem::L0A, Mem::L0B}, 32);
  const uint32_t unit = dst.ref.mem == Mem::L1 ? 32u : ascend_sim::kFractalBytes;
  const uint32_t per = unit / sizeof(T);
  const uint64_t pitch = static_cast<uint64_t>(p.blockNum + p.dstGap) * per;
  if (p.repeatTimes == 0 || p.blockNum == 0) return;
  const uint64_t end = static_cast<uint64_t>(p.repeatTimes - 1) * pitch + static_cast<uint64_t>(p.blockNum) * per;
  if (end > dst.GetSize()) {
    ascend_sim::Fault(api, ascend_sim::Str("fills ", end, " elements but the tensor holds ", dst.GetSize()));
  }
  // L1 is filled by MTE2, L0A / L0B by MTE1.
  ascend_sim::PipeOp(api, asim_loc, dst.ref.mem == Mem::L1 ? ascend_sim::kPMte2 : ascend_sim::kPMte1, {},
                     {ascend_sim::Rng(dst, end)});
  ascend_sim::Exec([=] {
    T* d = dst.SimPtr();
    const T v = static_cast<T>(p.initValue);
    for (uint32_t r = 0; r < p.repeatTimes; ++r)
      for (uint64_t i = 0; i < static_cast<uint64_t>(p.blockNum) * per; ++i) d[r * pitch + i] = v;
  });
}

template <typename T, typename U = T>
__aicore__ inline void Fill(const LocalTensor<T>& dst, const InitConstValueParams<U>& p, ASIM_LOC) {
  InitConstValue(dst, p, asim_loc);
}

}  // namespace AscendC

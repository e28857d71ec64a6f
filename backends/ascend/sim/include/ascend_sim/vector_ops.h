// Vector unit (AIV only, operands in UB, 32-B aligned): element-wise binary / scalar / unary
// ops, Duplicate, Cast with RoundMode, reductions, Compare / Select with bit masks,
// CreateVecIndex and Gather, in their "first count elements" forms. Data types follow the
// A2 vector unit: half / float arithmetic (int16 / int32 where the ALU has it), no bf16
// arithmetic (bf16 is a Cast-only type on A2). fp16 results are computed in fp32 and
// rounded to nearest even; Exp / Ln run in fp32.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tensor.h"

namespace ascend_sim {

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, half>;
template <typename T>
constexpr bool kIsFloatLike = std::is_same_v<T, half> || std::is_same_v<T, float>;
template <typename T>
constexpr bool kIsIntAlu = std::is_same_v<T, int16_t> || std::is_same_v<T, int32_t> ||
                           std::is_same_v<T, uint16_t> || std::is_same_v<T, uint32_t>;

template <typename T>
void RequireVecType(const char* api, bool ints_ok) {
  if constexpr (std::is_same_v<T, bfloat16_t>) {
    Fault(api, "bfloat16_t has no vector arithmetic on Atlas A2: Cast it to float first");
  }
  if (!(kIsFloatLike<T> || (ints_ok && kIsIntAlu<T>))) {
    Fault(api, Str("unsupported element type ", TypeName<T>(), ints_ok ? " (half / float / int16 / int32)" : " (half / float)"));
  }
}

// Operands of a vector instruction: vector core, UB, 32-B aligned, count elements each.
template <typename T>
void VecOperand(const char* api, const char* role, const AscendC::LocalTensor<T>& t, uint64_t count) {
  CheckOperand(api, role, t, count, {Mem::UB}, 32);
}

// Operands are checked first (UB only, which only vector cores have), so a vector instruction
// on a cube core reports the operand that is not in UB.
inline void VecEnter(const char* api) {
  (void)api;
  Enter();
}

template <typename T>
inline float ToF(T v) { return static_cast<float>(v); }

template <typename T>
inline T FromF(float f) {
  if constexpr (std::is_same_v<T, half>) return half(f);
  else if constexpr (std::is_same_v<T, float>) return f;
  else return static_cast<T>(f);
}

// Hardware-like numerics (profile vec_ulp = n > 0): the result of a vector Exp / Ln / Div / Sqrt /
// Reciprocal (the instructions of weight 4) moves by a deterministic pseudo-random k in [-n, n]
// ulp, a function of the operand bits, instead of fp32 libm's correctly rounded value.
inline float Approx(float in, float out) {
  const int32_t n = Cur().vec_ulp;
  if (n <= 0 || !std::isfinite(out) || out == 0.0f) return out;
  uint32_t h;
  std::memcpy(&h, &in, 4);
  h ^= h >> 16;
  h *= 0x7feb352dU;
  h ^= h >> 15;
  h *= 0x846ca68bU;
  h ^= h >> 16;
  const int32_t k = static_cast<int32_t>(h % static_cast<uint32_t>(2 * n + 1)) - n;
  uint32_t b;
  std::memcpy(&b, &out, 4);
  const uint32_t mag = b & 0x7fffffffU;
  const int64_t m2 = static_cast<int64_t>(mag) + k;
  if (m2 <= 0 || m2 >= 0x7f800000) return out;
  b = (b & 0x80000000U) | static_cast<uint32_t>(m2);
  float r;
  std::memcpy(&r, &b, 4);
  return r;
}

template <typename T, typename F>
void Binary(const char* api, const Loc& loc, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& a,
            const AscendC::LocalTensor<T>& b, int64_t count, bool ints_ok, F f, uint32_t weight = 1) {
  VecEnter(api);
  RequireVecType<T>(api, ints_ok);
  if (count < 0) Fault(api, Str("count ", count, " is negative"));
  VecOperand(api, "dst", dst, count);
  VecOperand(api, "src0", a, count);
  VecOperand(api, "src1", b, count);
  PipeOp(api, loc, kPV, {Rng(a, count), Rng(b, count)}, {Rng(dst, count)});
  T* d = dst.SimPtr();
  const T* x = a.SimPtr();
  const T* y = b.SimPtr();
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (kIsFloatLike<T>) {
      const float r = f(ToF(x[i]), ToF(y[i]));
      d[i] = FromF<T>(weight == 4 ? Approx(ToF(x[i]) + ToF(y[i]), r) : r);
    }
    else d[i] = static_cast<T>(f(x[i], y[i]));
  }
  CountVector(count, sizeof(T), weight);
}

template <typename T, typename F>
void Unary(const char* api, const Loc& loc, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& a, int64_t count,
           bool ints_ok, F f, uint32_t weight = 1) {
  VecEnter(api);
  RequireVecType<T>(api, ints_ok);
  if (count < 0) Fault(api, Str("count ", count, " is negative"));
  VecOperand(api, "dst", dst, count);
  VecOperand(api, "src", a, count);
  PipeOp(api, loc, kPV, {Rng(a, count)}, {Rng(dst, count)});
  T* d = dst.SimPtr();
  const T* x = a.SimPtr();
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (kIsFloatLike<T>) {
      const float r = f(ToF(x[i]));
      d[i] = FromF<T>(weight == 4 ? Approx(ToF(x[i]), r) : r);
    }
    else d[i] = static_cast<T>(f(x[i]));
  }
  CountVector(count, sizeof(T), weight);
}

Rounding ToRounding(AscendC::RoundMode m);

// Cast support table of the A2 vector unit; faults on pairs / modes it does not have.
template <typename D, typename S>
void CheckCast(const char* api, AscendC::RoundMode mode) {
  using AscendC::RoundMode;
  const bool none = mode == RoundMode::CAST_NONE;
  bool ok = false;
  bool lossy = false;
  if constexpr (std::is_same_v<S, float> && (std::is_same_v<D, half> || std::is_same_v<D, bfloat16_t>)) {
    ok = true, lossy = true;
  } else if constexpr ((std::is_same_v<S, half> || std::is_same_v<S, bfloat16_t>) && std::is_same_v<D, float>) {
    ok = none;
  } else if constexpr ((std::is_same_v<S, int8_t> || std::is_same_v<S, uint8_t>) && std::is_same_v<D, half>) {
    ok = none;
  } else if constexpr (std::is_same_v<S, half> && (std::is_same_v<D, int8_t> || std::is_same_v<D, uint8_t> ||
                                                   std::is_same_v<D, int16_t> || std::is_same_v<D, int32_t>)) {
    ok = mode != RoundMode::CAST_ODD, lossy = true;
  } else if constexpr (std::is_same_v<S, float> && (std::is_same_v<D, int32_t> || std::is_same_v<D, int16_t>)) {
    ok = mode != RoundMode::CAST_ODD, lossy = true;
  } else if constexpr (std::is_same_v<S, int32_t> && std::is_same_v<D, float>) {
    ok = mode != RoundMode::CAST_ODD;
  } else if constexpr (std::is_same_v<S, int16_t> && std::is_same_v<D, half>) {
    ok = mode != RoundMode::CAST_ODD;
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, float>) {
    ok = mode != RoundMode::CAST_ODD;   // float -> float rounds to an integral value (CANN's "round" casts)
  }
  if (!ok) {
    Fault(api, Str("Cast ", TypeName<S>(), " -> ", TypeName<D>(), " with RoundMode ", static_cast<int>(mode),
                   " is not supported by the Atlas A2 vector unit"));
  }
  (void)lossy;
}

template <typename D>
D CastValue(double v, Rounding r) {
  if constexpr (std::is_same_v<D, half>) {
    return half::FromBits(static_cast<uint16_t>(Fp16Format::Encode(v, r)));
  } else if constexpr (std::is_same_v<D, bfloat16_t>) {
    return bfloat16_t::FromBits(static_cast<uint16_t>(Bf16Format::Encode(v, r)));
  } else if constexpr (std::is_same_v<D, float>) {
    return static_cast<float>(v);
  } else {
    // Integer destinations: round with the mode, then saturate.
    if (std::isnan(v)) return D(0);
    double x;
    switch (r) {
      case Rounding::kFloor: x = std::floor(v); break;
      case Rounding::kCeil: x = std::ceil(v); break;
      case Rounding::kTrunc: x = std::trunc(v); break;
      case Rounding::kNearestAway: x = std::round(v); break;
      default: x = std::nearbyint(v); break;   // default FE mode: nearest even
    }
    const double lo = static_cast<double>(std::numeric_limits<D>::min());
    const double hi = static_cast<double>(std::numeric_limits<D>::max());
    return static_cast<D>(std::min(std::max(x, lo), hi));
  }
}

inline bool CompareOp(AscendC::CMPMODE m, float a, float b) {
  switch (m) {
    case AscendC::CMPMODE::LT: return a < b;
    case AscendC::CMPMODE::GT: return a > b;
    case AscendC::CMPMODE::EQ: return a == b;
    case AscendC::CMPMODE::LE: return a <= b;
    case AscendC::CMPMODE::GE: return a >= b;
    case AscendC::CMPMODE::NE: return a != b;
  }
  return false;
}

// Conservative rule of the simulator for the count forms of Compare / CompareScalar: whole
// 256-B repeats, so every bit of the mask that is written is defined.
template <typename T>
void RequireWholeRepeats(const char* api, int64_t count) {
  if ((count * static_cast<int64_t>(sizeof(T))) % 256) {
    Fault(api, Str("count ", count, " x ", sizeof(T), " B is not a whole number of 256-B repeats"));
  }
}

// dst[0] = max / min / sum of src[0, count); with calIndex, dst[1] holds the index (bits of an
// integer of T's width, as the hardware stores it).
template <typename T>
void ReduceCommon(const char* api, const Loc& loc, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                  const AscendC::LocalTensor<T>& tmp, int32_t count, bool calIndex, int kind) {
  VecEnter(api);
  RequireVecType<T>(api, false);
  if (count <= 0) Fault(api, Str("count must be > 0, got ", count));
  VecOperand(api, "src", src, count);
  VecOperand(api, "dst", dst, calIndex ? 2 : 1);
  // Work space for the per-repeat partial results: two values per repeat, 32-B rounded.
  const uint32_t per_repeat = 256 / sizeof(T);
  const uint32_t repeats = (count + per_repeat - 1) / per_repeat;
  const uint32_t need = ((2 * repeats * sizeof(T) + 31) / 32 * 32) / sizeof(T);
  VecOperand(api, "sharedTmpBuffer", tmp, need);
  PipeOp(api, loc, kPV, {Rng(src, count)}, {Rng(dst, calIndex ? 2 : 1), Rng(tmp, need)});
  const T* s = src.SimPtr();
  float acc = ToF(s[0]);
  int32_t idx = 0;
  bool nan = std::isnan(acc);
  for (int32_t i = 1; i < count; ++i) {
    const float v = ToF(s[i]);
    nan = nan || std::isnan(v);
    if (kind == 0 && v > acc) acc = v, idx = i;
    if (kind == 1 && v < acc) acc = v, idx = i;
    if (kind == 2) acc += v;
  }
  if (nan && kind != 2) acc = std::numeric_limits<float>::quiet_NaN();
  // Scribble the work space: its contents are undefined after the call.
  T* t = tmp.SimPtr();
  for (uint32_t i = 0; i < need; ++i) t[i] = FromF<T>(std::numeric_limits<float>::quiet_NaN());
  T* d = dst.SimPtr();
  d[0] = FromF<T>(acc);
  if (calIndex) {
    if constexpr (sizeof(T) == 4) {
      uint32_t u = static_cast<uint32_t>(idx);
      std::memcpy(&d[1], &u, 4);
    } else {
      uint16_t u = static_cast<uint16_t>(idx);
      std::memcpy(&d[1], &u, 2);
    }
  }
  CountVector(count, sizeof(T), 2);
}

}  // namespace ascend_sim

namespace AscendC {

// ---- binary ---------------------------------------------------------------------------------
template <typename T>
__aicore__ inline void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count, ASIM_LOC) {
  ascend_sim::Binary("Add", asim_loc, dst, src0, src1, count, true, [](auto a, auto b) { return a + b; });
}
template <typename T>
__aicore__ inline void Sub(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count, ASIM_LOC) {
  ascend_sim::Binary("Sub", asim_loc, dst, src0, src1, count, true, [](auto a, auto b) { return a - b; });
}
template <typename T>
__aicore__ inline void Mul(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count, ASIM_LOC) {
  ascend_sim::Binary("Mul", asim_loc, dst, src0, src1, count, true, [](auto a, auto b) { return a * b; });
}
template <typename T>
__aicore__ inline void Div(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count, ASIM_LOC) {
  ascend_sim::Binary("Div", asim_loc, dst, src0, src1, count, false, [](float a, float b) { return a / b; }, 4);
}
template <typename T>
__aicore__ inline void Max(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count, ASIM_LOC) {
  // NaN propagates (a NaN score must not be hidden by a max).
  ascend_sim::Binary("Max", asim_loc, dst, src0, src1, count, true, [](auto a, auto b) {
    if constexpr (std::is_floating_point_v<decltype(a)>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<decltype(a)>::quiet_NaN();
    }
    return a > b ? a : b;
  });
}
template <typename T>
__aicore__ inline void Min(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count, ASIM_LOC) {
  ascend_sim::Binary("Min", asim_loc, dst, src0, src1, count, true, [](auto a, auto b) {
    if constexpr (std::is_floating_point_v<decltype(a)>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<decltype(a)>::quiet_NaN();
    }
    return a < b ? a : b;
  });
}
template <typename T>
__aicore__ inline void And(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count, ASIM_LOC) {
  static_assert(std::is_same_v<T, int16_t> || std::is_same_v<T, uint16_t>, "And takes int16_t / uint16_t");
  ascend_sim::Binary("And", asim_loc, dst, src0, src1, count, true, [](auto a, auto b) { return a & b; });
}
template <typename T>
__aicore__ inline void Or(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                          const int32_t& count, ASIM_LOC) {
  static_assert(std::is_same_v<T, int16_t> || std::is_same_v<T, uint16_t>, "Or takes int16_t / uint16_t");
  ascend_sim::Binary("Or", asim_loc, dst, src0, src1, count, true, [](auto a, auto b) { return a | b; });
}

// ---- tensor op scalar -------------------------------------------------------------------------
template <typename T, typename U>
__aicore__ inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const U& scalarValue,
                            const int32_t& count, ASIM_LOC) {
  const T s = static_cast<T>(scalarValue);
  ascend_sim::Unary("Adds", asim_loc, dst, src, count, true, [s](auto a) { return a + static_cast<decltype(a)>(s); });
}
template <typename T, typename U>
__aicore__ inline void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const U& scalarValue,
                            const int32_t& count, ASIM_LOC) {
  const T s = static_cast<T>(scalarValue);
  ascend_sim::Unary("Muls", asim_loc, dst, src, count, true, [s](auto a) { return a * static_cast<decltype(a)>(s); });
}
template <typename T, typename U>
__aicore__ inline void Maxs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const U& scalarValue,
                            const int32_t& count, ASIM_LOC) {
  const T s = static_cast<T>(scalarValue);
  ascend_sim::Unary("Maxs", asim_loc, dst, src, count, true, [s](auto a) {
    const auto b = static_cast<decltype(a)>(s);
    return a > b ? a : b;
  });
}
template <typename T, typename U>
__aicore__ inline void Mins(const LocalTensor<T>& dst, const LocalTensor<T>& src, const U& scalarValue,
                            const int32_t& count, ASIM_LOC) {
  const T s = static_cast<T>(scalarValue);
  ascend_sim::Unary("Mins", asim_loc, dst, src, count, true, [s](auto a) {
    const auto b = static_cast<decltype(a)>(s);
    return a < b ? a : b;
  });
}

// ---- unary ----------------------------------------------------------------------------------
template <typename T>
__aicore__ inline void Exp(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count, ASIM_LOC) {
  ascend_sim::Unary("Exp", asim_loc, dst, src, count, false, [](float a) { return std::exp(a); }, 4);
}
template <typename T>
__aicore__ inline void Ln(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count, ASIM_LOC) {
  ascend_sim::Unary("Ln", asim_loc, dst, src, count, false, [](float a) { return std::log(a); }, 4);
}
template <typename T>
__aicore__ inline void Sqrt(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count, ASIM_LOC) {
  ascend_sim::Unary("Sqrt", asim_loc, dst, src, count, false, [](float a) { return std::sqrt(a); }, 4);
}
template <typename T>
__aicore__ inline void Reciprocal(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count, ASIM_LOC) {
  ascend_sim::Unary("Reciprocal", asim_loc, dst, src, count, false, [](float a) { return 1.0f / a; }, 4);
}
template <typename T>
__aicore__ inline void Abs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count, ASIM_LOC) {
  ascend_sim::Unary("Abs", asim_loc, dst, src, count, false, [](float a) { return std::fabs(a); });
}
template <typename T>
__aicore__ inline void Relu(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count, ASIM_LOC) {
  ascend_sim::Unary("Relu", asim_loc, dst, src, count, true, [](auto a) { return a > 0 ? a : decltype(a)(0); });
}

template <typename T>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count, ASIM_LOC) {
  const char* api = "Duplicate";
  ascend_sim::VecEnter(api);
  if (count < 0) ascend_sim::Fault(api, ascend_sim::Str("count ", count, " is negative"));
  ascend_sim::VecOperand(api, "dst", dst, count);
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV, {}, {ascend_sim::Rng(dst, count)});
  T* d = dst.SimPtr();
  for (int32_t i = 0; i < count; ++i) d[i] = scalarValue;
  ascend_sim::CountVector(count, sizeof(T));
}

// ---- Cast -----------------------------------------------------------------------------------
template <typename T, typename U>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& round_mode,
                            const uint32_t count, ASIM_LOC) {
  const char* api = "Cast";
  ascend_sim::VecEnter(api);
  ascend_sim::CheckCast<T, U>(api, round_mode);
  ascend_sim::VecOperand(api, "dst", dst, count);
  ascend_sim::VecOperand(api, "src", src, count);
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV, {ascend_sim::Rng(src, count)}, {ascend_sim::Rng(dst, count)});
  const ascend_sim::Rounding r = ascend_sim::ToRounding(round_mode);
  T* d = dst.SimPtr();
  const U* s = src.SimPtr();
  for (uint32_t i = 0; i < count; ++i) {
    double v;
    if constexpr (std::is_same_v<U, half> || std::is_same_v<U, bfloat16_t>) v = static_cast<float>(s[i]);
    else v = static_cast<double>(s[i]);
    if constexpr (std::is_same_v<T, float> && std::is_same_v<U, float>) {
      // float -> float: round to an integral value with the mode.
      d[i] = static_cast<float>(ascend_sim::CastValue<int64_t>(v, r));
      if (std::isnan(v) || std::isinf(v)) d[i] = static_cast<float>(v);
    } else if constexpr (std::is_same_v<T, float> && std::is_same_v<U, int32_t>) {
      d[i] = ascend_sim::BitsFloat(ascend_sim::Format<23, 8>::Encode(v, r));
    } else {
      d[i] = ascend_sim::CastValue<T>(v, r);
    }
  }
  ascend_sim::CountVector(count, std::max(sizeof(T), sizeof(U)));
}

// ---- reductions (ascend_sim::ReduceCommon) -------------------------------------------------
template <typename T>
__aicore__ inline void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                 const LocalTensor<T>& sharedTmpBuffer, const int32_t count, bool calIndex = 0, ASIM_LOC) {
  ascend_sim::ReduceCommon("ReduceMax", asim_loc, dst, src, sharedTmpBuffer, count, calIndex, 0);
}
template <typename T>
__aicore__ inline void ReduceMin(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                 const LocalTensor<T>& sharedTmpBuffer, const int32_t count, bool calIndex = 0, ASIM_LOC) {
  ascend_sim::ReduceCommon("ReduceMin", asim_loc, dst, src, sharedTmpBuffer, count, calIndex, 1);
}
template <typename T>
__aicore__ inline void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                 const LocalTensor<T>& sharedTmpBuffer, const int32_t count, ASIM_LOC) {
  ascend_sim::ReduceCommon("ReduceSum", asim_loc, dst, src, sharedTmpBuffer, count, false, 2);
}

// ---- compare / select (bit masks: bit i of byte i/8 is element i) ------------------------------
template <typename T, typename U>
__aicore__ inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                               CMPMODE cmpMode, uint32_t count, ASIM_LOC) {
  const char* api = "Compare";
  ascend_sim::VecEnter(api);
  static_assert(std::is_same_v<U, uint8_t>, "Compare writes a uint8_t bit mask");
  ascend_sim::RequireVecType<T>(api, false);
  ascend_sim::RequireWholeRepeats<T>(api, count);
  ascend_sim::VecOperand(api, "src0", src0, count);
  ascend_sim::VecOperand(api, "src1", src1, count);
  ascend_sim::VecOperand(api, "dst", dst, (count + 7) / 8);
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV, {ascend_sim::Rng(src0, count), ascend_sim::Rng(src1, count)},
                     {ascend_sim::Rng(dst, (count + 7) / 8)});
  uint8_t* d = dst.SimPtr();
  const T* a = src0.SimPtr();
  const T* b = src1.SimPtr();
  for (uint32_t i = 0; i < count; i += 8) d[i / 8] = 0;
  for (uint32_t i = 0; i < count; ++i)
    if (ascend_sim::CompareOp(cmpMode, ascend_sim::ToF(a[i]), ascend_sim::ToF(b[i]))) d[i / 8] |= uint8_t(1u << (i % 8));
  ascend_sim::CountVector(count, sizeof(T));
}

template <typename T, typename U>
__aicore__ inline void CompareScalar(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar,
                                     CMPMODE cmpMode, uint32_t count, ASIM_LOC) {
  const char* api = "CompareScalar";
  ascend_sim::VecEnter(api);
  static_assert(std::is_same_v<U, uint8_t>, "CompareScalar writes a uint8_t bit mask");
  ascend_sim::RequireVecType<T>(api, false);
  ascend_sim::RequireWholeRepeats<T>(api, count);
  ascend_sim::VecOperand(api, "src0", src0, count);
  ascend_sim::VecOperand(api, "dst", dst, (count + 7) / 8);
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV, {ascend_sim::Rng(src0, count)}, {ascend_sim::Rng(dst, (count + 7) / 8)});
  uint8_t* d = dst.SimPtr();
  const T* a = src0.SimPtr();
  const float b = ascend_sim::ToF(src1Scalar);
  for (uint32_t i = 0; i < count; i += 8) d[i / 8] = 0;
  for (uint32_t i = 0; i < count; ++i)
    if (ascend_sim::CompareOp(cmpMode, ascend_sim::ToF(a[i]), b)) d[i / 8] |= uint8_t(1u << (i % 8));
  ascend_sim::CountVector(count, sizeof(T));
}
template <typename T, typename U>
__aicore__ inline void Compares(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar,
                                CMPMODE cmpMode, uint32_t count, ASIM_LOC) {
  CompareScalar(dst, src0, src1Scalar, cmpMode, count, asim_loc);
}

// Select mode 1 (tensor / scalar): dst[i] = bit i ? src0[i] : src1.
template <typename T, typename U>
__aicore__ inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                              T src1, SELMODE selMode, uint32_t count, ASIM_LOC) {
  const char* api = "Select";
  ascend_sim::VecEnter(api);
  ascend_sim::RequireVecType<T>(api, false);
  if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE) {
    ascend_sim::Fault(api, "a scalar src1 needs SELMODE::VSEL_TENSOR_SCALAR_MODE");
  }
  ascend_sim::VecOperand(api, "dst", dst, count);
  ascend_sim::VecOperand(api, "src0", src0, count);
  ascend_sim::VecOperand(api, "selMask", selMask, (count * 1ull + 8 * sizeof(U) - 1) / (8 * sizeof(U)));
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV,
                     {ascend_sim::Rng(src0, count), ascend_sim::RngBytes(selMask, 0, (count + 7) / 8)},
                     {ascend_sim::Rng(dst, count)});
  const uint8_t* m = reinterpret_cast<const uint8_t*>(selMask.SimPtr());
  T* d = dst.SimPtr();
  const T* a = src0.SimPtr();
  for (uint32_t i = 0; i < count; ++i) d[i] = ((m[i / 8] >> (i % 8)) & 1u) ? a[i] : src1;
  ascend_sim::CountVector(count, sizeof(T));
}

// Select mode 2 (tensor / tensor).
template <typename T, typename U>
__aicore__ inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                              const LocalTensor<T>& src1, SELMODE selMode, uint32_t count, ASIM_LOC) {
  const char* api = "Select";
  ascend_sim::VecEnter(api);
  ascend_sim::RequireVecType<T>(api, false);
  if (selMode != SELMODE::VSEL_TENSOR_TENSOR_MODE) {
    ascend_sim::Fault(api, "the count form with two tensors needs SELMODE::VSEL_TENSOR_TENSOR_MODE in the simulator");
  }
  ascend_sim::VecOperand(api, "dst", dst, count);
  ascend_sim::VecOperand(api, "src0", src0, count);
  ascend_sim::VecOperand(api, "src1", src1, count);
  ascend_sim::VecOperand(api, "selMask", selMask, (count * 1ull + 8 * sizeof(U) - 1) / (8 * sizeof(U)));
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV,
                     {ascend_sim::Rng(src0, count), ascend_sim::Rng(src1, count), ascend_sim::RngBytes(selMask, 0, (count + 7) / 8)},
                     {ascend_sim::Rng(dst, count)});
  const uint8_t* m = reinterpret_cast<const uint8_t*>(selMask.SimPtr());
  T* d = dst.SimPtr();
  const T* a = src0.SimPtr();
  const T* b = src1.SimPtr();
  for (uint32_t i = 0; i < count; ++i) d[i] = ((m[i / 8] >> (i % 8)) & 1u) ? a[i] : b[i];
  ascend_sim::CountVector(count, sizeof(T));
}

// dst[i] = firstValue + i.
template <typename T>
__aicore__ inline void CreateVecIndex(LocalTensor<T> dst, const T& firstValue, uint32_t calCount, ASIM_LOC) {
  const char* api = "CreateVecIndex";
  ascend_sim::VecEnter(api);
  ascend_sim::RequireVecType<T>(api, true);
  ascend_sim::VecOperand(api, "dst", dst, calCount);
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV, {}, {ascend_sim::Rng(dst, calCount)});
  T* d = dst.SimPtr();
  const float f0 = ascend_sim::ToF(firstValue);
  for (uint32_t i = 0; i < calCount; ++i) {
    if constexpr (ascend_sim::kIsFloatLike<T>) d[i] = ascend_sim::FromF<T>(f0 + static_cast<float>(i));
    else d[i] = static_cast<T>(firstValue + static_cast<T>(i));
  }
  ascend_sim::CountVector(calCount, sizeof(T));
}

// dst[i] = element of src at byte offset srcBaseAddr + srcOffset[i] (a UB table lookup).
template <typename T>
__aicore__ inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                              const LocalTensor<uint32_t>& srcOffset, const uint32_t srcBaseAddr,
                              const uint32_t count, ASIM_LOC) {
  const char* api = "Gather";
  ascend_sim::VecEnter(api);
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "Gather takes 16- or 32-bit elements");
  ascend_sim::VecOperand(api, "dst", dst, count);
  ascend_sim::VecOperand(api, "srcOffset", srcOffset, count);
  ascend_sim::CheckOperand(api, "src", src, 0, {ascend_sim::Mem::UB}, 32);
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV, {ascend_sim::Rng(src, src.GetSize()), ascend_sim::Rng(srcOffset, count)},
                     {ascend_sim::Rng(dst, count)});
  T* d = dst.SimPtr();
  const uint8_t* base = reinterpret_cast<const uint8_t*>(src.SimPtr());
  const uint32_t* off = srcOffset.SimPtr();
  const uint64_t src_bytes = static_cast<uint64_t>(src.GetSize()) * sizeof(T);
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t o = static_cast<uint64_t>(srcBaseAddr) + off[i];
    if (o % sizeof(T) || o + sizeof(T) > src_bytes) {
      ascend_sim::Fault(api, ascend_sim::Str("srcOffset[", i, "] = ", off[i], " (+ base ", srcBaseAddr,
                                             ") is outside the ", src_bytes, "-byte source or misaligned"));
    }
    std::memcpy(&d[i], base + o, sizeof(T));
  }
  ascend_sim::CountVector(count, sizeof(T), 2);
}

}  // namespace AscendC

// Simulator side of the vector unit (vector_ops.h): operand checks, the element loops of the
// binary / unary instructions, hardware-like numerics (vec_ulp), the A2 Cast table and the
// reductions' common body.
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
  Exec([=] {
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (kIsFloatLike<T>) {
        const float r = f(ToF(x[i]), ToF(y[i]));
        d[i] = FromF<T>(weight == 4 ? Approx(ToF(x[i]) + ToF(y[i]), r) : r);
      }
      else d[i] = static_cast<T>(f(x[i], y[i]));
    }
  });
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
  Exec([=] {
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (kIsFloatLike<T>) {
        const float r = f(ToF(x[i]));
        d[i] = FromF<T>(weight == 4 ? Approx(ToF(x[i]), r) : r);
      }
      else d[i] = static_cast<T>(f(x[i]));
    }
  });
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
  T* t = tmp.SimPtr();
  T* d = dst.SimPtr();
  Exec([=] {
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
    for (uint32_t i = 0; i < need; ++i) t[i] = FromF<T>(std::numeric_limits<float>::quiet_NaN());
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
  });
  CountVector(count, sizeof(T), 2);
}

}  // namespace ascend_sim

// Number formats of the Atlas A2 vector and cube units, done bit-exactly on the CPU:
// fp16 / bf16 storage types with round-to-nearest-even conversions (what the cube's FIXPIPE
// and a CAST_RINT do) plus the other rounding modes Cast accepts.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ascend_sim {

// Rounding of a real value to a narrower format (mirrors AscendC::RoundMode minus CAST_NONE).
enum class Rounding { kNearestEven, kFloor, kCeil, kNearestAway, kTrunc, kOdd };

inline uint32_t FloatBits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float BitsFloat(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// A binary floating-point format with `kMant` stored mantissa bits and exponent bias `kBias`
// (IEEE-like: all-ones exponent = inf/NaN, subnormals).
template <int kMant, int kExpBits>
struct Format {
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr int kEmin = 1 - kBias;   // smallest normal exponent
  static constexpr int kEmax = kBias;       // largest finite exponent
  static constexpr uint32_t kExpMask = (1u << kExpBits) - 1;

  static double Decode(uint32_t bits) {
    const uint32_t sign = bits >> (kMant + kExpBits);
    const uint32_t e = (bits >> kMant) & kExpMask;
    const uint32_t m = bits & ((1u << kMant) - 1);
    double v;
    if (e == kExpMask) {
      v = m ? NAN : INFINITY;
    } else if (e == 0) {
      v = std::ldexp(static_cast<double>(m), kEmin - kMant);
    } else {
      v = std::ldexp(static_cast<double>(m | (1u << kMant)), static_cast<int>(e) - kBias - kMant);
    }
    return sign ? -v : v;
  }

  // Round `x` (any double; floats are exact in it) to this format with the given mode.
  static uint32_t Encode(double x, Rounding mode) {
    const uint32_t sign_bit = 1u << (kMant + kExpBits);
    if (std::isnan(x)) return (kExpMask << kMant) | (1u << (kMant - 1));   // quiet NaN
    const bool neg = std::signbit(x);
    const uint32_t sign = neg ? sign_bit : 0;
    const double a = std::fabs(x);
    const uint32_t inf = sign | (kExpMask << kMant);
    if (std::isinf(a)) return inf;
    if (a == 0.0) return sign;
    int ex;
    std::frexp(a, &ex);                       // a = f * 2^ex, f in [0.5, 1)
    int e = ex - 1;
    if (e < kEmin) e = kEmin;                 // subnormal range shares the smallest ulp
    const double ulp = std::ldexp(1.0, e - kMant);
    const double q = std::floor(a / ulp);     // exact: division by a power of two
    const double rem = a - q * ulp;
    const double half_ulp = ulp / 2;
    bool up = false;
    switch (mode) {
      case Rounding::kNearestEven:
        up = rem > half_ulp || (rem == half_ulp && std::fmod(q, 2.0) != 0.0);
        break;
      case Rounding::kNearestAway: up = rem >= half_ulp; break;
      case Rounding::kTrunc: up = false; break;
      case Rounding::kFloor: up = neg && rem > 0; break;
      case Rounding::kCeil: up = !neg && rem > 0; break;
      case Rounding::kOdd: up = rem > 0 && std::fmod(q, 2.0) == 0.0; break;
    }
    const double mag = (q + (up ? 1.0 : 0.0)) * ulp;
    const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -kMant), kEmax);
    if (mag > max_finite) {
      // Overflow: modes that never round away from zero saturate at the largest finite value.
      const bool saturate = mode == Rounding::kTrunc || mode == Rounding::kOdd ||
                            (mode == Rounding::kFloor && !neg) || (mode == Rounding::kCeil && neg);
      if (!saturate) return inf;
      return sign | ((kExpMask - 1) << kMant) | ((1u << kMant) - 1);
    }
    if (mag == 0.0) return sign;   // rounded to zero (keeps the sign)
    return sign | EncodeMagnitude(mag);
  }

  static uint32_t EncodeMagnitude(double mag) {   // mag exactly representable, > 0
    int ex;
    std::frexp(mag, &ex);
    const int e = ex - 1;
    if (e < kEmin) return static_cast<uint32_t>(std::ldexp(mag, kMant - kEmin));   // subnormal
    const double frac = std::ldexp(mag, -e) - 1.0;                                 // [0, 1)
    return (static_cast<uint32_t>(e + kBias) << kMant) | static_cast<uint32_t>(std::ldexp(frac, kMant));
  }
};

using Fp16Format = Format<10, 5>;
using Bf16Format = Format<7, 8>;

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return BitsFloat(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return BitsFloat(sign);
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((e + 112) << 23) | (m << 13));
}

inline uint16_t F32ToF16(float f, Rounding r = Rounding::kNearestEven) {
  return static_cast<uint16_t>(Fp16Format::Encode(static_cast<double>(f), r));
}

inline float Bf16ToF32(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t F32ToBf16(float f, Rounding r = Rounding::kNearestEven) {
  const uint32_t u = FloatBits(f);
  if (r == Rounding::kNearestEven && (u & 0x7f800000u) != 0x7f800000u) {
    // Fast path, exact RNE on the bit pattern (finite inputs).
    const uint32_t lsb = (u >> 16) & 1u;
    const uint64_t rounded = static_cast<uint64_t>(u) + 0x7fffu + lsb;
    if ((rounded >> 16) > 0xffffu) return static_cast<uint16_t>((u >> 16) | 0x7f80u);
    return static_cast<uint16_t>(rounded >> 16);
  }
  return static_cast<uint16_t>(Bf16Format::Encode(static_cast<double>(f), r));
}

}  // namespace ascend_sim

// The NPU compiler's built-in 16-bit float types. Storage + conversions; arithmetic goes
// through float, which is what the vector unit's fp16 ALU rounds back from.
struct half {
  uint16_t bits;
  half() = default;
  half(float f) : bits(ascend_sim::F32ToF16(f)) {}
  half(double d) : bits(ascend_sim::F32ToF16(static_cast<float>(d))) {}
  half(int i) : bits(ascend_sim::F32ToF16(static_cast<float>(i))) {}
  operator float() const { return ascend_sim::F16ToF32(bits); }
  static half FromBits(uint16_t b) { half h; h.bits = b; return h; }
};

struct bfloat16_t {
  uint16_t bits;
  bfloat16_t() = default;
  bfloat16_t(float f) : bits(ascend_sim::F32ToBf16(f)) {}
  bfloat16_t(double d) : bits(ascend_sim::F32ToBf16(static_cast<float>(d))) {}
  bfloat16_t(int i) : bits(ascend_sim::F32ToBf16(static_cast<float>(i))) {}
  operator float() const { return ascend_sim::Bf16ToF32(bits); }
  static bfloat16_t FromBits(uint16_t b) { bfloat16_t h; h.bits = b; return h; }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16_t) == 2, "16-bit float types must be 2 bytes");

// hi / lo split of fp32 values into a 16-bit cube input type T (half / bfloat16_t), shared by the
// Ascend C kernels: hi = x rounded toward zero, lo = round(x - hi), so lo has hi's sign (or is 0)
// and hi . v + lo . v never turns into inf - inf where x . v is +-inf. The cube multiplies both parts and
// accumulates in fp32, so a product keeps ~2^-17 relative accuracy instead of T's 2^-8 / 2^-11.
//
// SplitHiLo(hi, lo, x, tmp, bits, count, keep_nonzero, finite_lo)
//   x (fp32, UB) is consumed; tmp: count floats of scratch; bits: count / 8 bytes of scratch.
//   keep_nonzero (for probabilities P in [0, 1]): where hi > 0 but lo rounds to 0, lo becomes
//   T's smallest subnormal, so lo . v stays finite-times-v: a value +-inf in V then gives +-inf
//   in both passes, as p . v does in fp32, instead of 0 . inf = NaN in the lo pass. The added
//   error is at most one subnormal of T per such element.
//   finite_lo (for converted K / V): where x - hi is NaN (x = +-inf, hi = x), lo becomes 0, so
//   hi + lo is +-inf as x is, instead of inf + NaN. (x NaN: hi is NaN already.)
// Call with count a multiple of 64 (whole 256-B repeats for CompareScalar).
#pragma once
#include "ascend/common/pipe_sync.h"

namespace dualops {
namespace ascend {

template <typename T>
struct HiLoTraits {
  static constexpr float kTiny = 0x1p-24f;   // half: smallest subnormal
};
template <>
struct HiLoTraits<bfloat16_t> {
  static constexpr float kTiny = 0x1p-133f;   // bfloat16: smallest subnormal
};

template <typename T>
__aicore__ inline void SplitHiLo(const AscendC::LocalTensor<T>& hi, const AscendC::LocalTensor<T>& lo,
                                 const AscendC::LocalTensor<float>& x, const AscendC::LocalTensor<float>& tmp,
                                 const AscendC::LocalTensor<uint8_t>& bits, uint32_t count, bool keep_nonzero,
                                 bool finite_lo = false) {
  AscendC::Cast(hi, x, AscendC::RoundMode::CAST_TRUNC, count);
  VecBarrier();
  AscendC::Cast(tmp, hi, AscendC::RoundMode::CAST_NONE, count);
  VecBarrier();
  AscendC::Sub(x, x, tmp, static_cast<int32_t>(count));
  VecBarrier();
  if (finite_lo) {
    AscendC::Compare(bits, x, x, AscendC::CMPMODE::EQ, count);   // false where NaN
    VecBarrier();
    AscendC::Select(x, bits, x, 0.0f, AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, count);
    VecBarrier();
  }
  AscendC::Cast(lo, x, AscendC::RoundMode::CAST_RINT, count);
  if (!keep_nonzero) return;
  // tmp = hi > 0 ? tiny : 0 (hi <= 1 here); x = lo as float; lo = lo != 0 ? lo : tmp.
  AscendC::Muls(tmp, tmp, 0x1p100f, static_cast<int32_t>(count));
  VecBarrier();
  AscendC::Mins(tmp, tmp, HiLoTraits<T>::kTiny, static_cast<int32_t>(count));
  AscendC::Cast(x, lo, AscendC::RoundMode::CAST_NONE, count);
  VecBarrier();
  AscendC::CompareScalar(bits, x, 0.0f, AscendC::CMPMODE::NE, count);
  VecBarrier();
  AscendC::Select(x, bits, x, tmp, AscendC::SELMODE::VSEL_TENSOR_TENSOR_MODE, count);
  VecBarrier();
  AscendC::Cast(lo, x, AscendC::RoundMode::CAST_RINT, count);
}

}  // namespace ascend
}  // namespace dualops

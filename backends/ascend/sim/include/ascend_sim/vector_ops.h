// Vector unit (AIV only, operands in UB, 32-B aligned): element-wise binary / scalar / unary
// ops, Duplicate, Cast with RoundMode, reductions, Compare / Select with bit masks,
// CreateVecIndex and Gather, in their "first count elements" forms. Data types follow the
// A2 vector unit: half / float arithmetic (int16 / int32 where the ALU has it), no bf16
// arithmetic (bf16 is a Cast-only type on A2). fp16 results are computed in fp32 and
// rounded to nearest even; Exp / Ln run in fp32.
#pragma once
#include "vector_helpers.h"

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
  ascend_sim::Exec([=] {
    T* d = dst.SimPtr();
    for (int32_t i = 0; i < count; ++i) d[i] = scalarValue;
  });
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
  ascend_sim::Exec([=] {
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
  });
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
  ascend_sim::Exec([=] {
    uint8_t* d = dst.SimPtr();
    const T* a = src0.SimPtr();
    const T* b = src1.SimPtr();
    for (uint32_t i = 0; i < count; i += 8) d[i / 8] = 0;
    for (uint32_t i = 0; i < count; ++i)
      if (ascend_sim::CompareOp(cmpMode, ascend_sim::ToF(a[i]), ascend_sim::ToF(b[i]))) d[i / 8] |= uint8_t(1u << (i % 8));
  });
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
  ascend_sim::Exec([=] {
    uint8_t* d = dst.SimPtr();
    const T* a = src0.SimPtr();
    const float b = ascend_sim::ToF(src1Scalar);
    for (uint32_t i = 0; i < count; i += 8) d[i / 8] = 0;
    for (uint32_t i = 0; i < count; ++i)
      if (ascend_sim::CompareOp(cmpMode, ascend_sim::ToF(a[i]), b)) d[i / 8] |= uint8_t(1u << (i % 8));
  });
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
  ascend_sim::Exec([=] {
    const uint8_t* m = reinterpret_cast<const uint8_t*>(selMask.SimPtr());
    T* d = dst.SimPtr();
    const T* a = src0.SimPtr();
    for (uint32_t i = 0; i < count; ++i) d[i] = ((m[i / 8] >> (i % 8)) & 1u) ? a[i] : src1;
  });
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
  ascend_sim::Exec([=] {
    const uint8_t* m = reinterpret_cast<const uint8_t*>(selMask.SimPtr());
    T* d = dst.SimPtr();
    const T* a = src0.SimPtr();
    const T* b = src1.SimPtr();
    for (uint32_t i = 0; i < count; ++i) d[i] = ((m[i / 8] >> (i % 8)) & 1u) ? a[i] : b[i];
  });
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
  ascend_sim::Exec([=] {
    T* d = dst.SimPtr();
    const float f0 = ascend_sim::ToF(firstValue);
    for (uint32_t i = 0; i < calCount; ++i) {
      if constexpr (ascend_sim::kIsFloatLike<T>) d[i] = ascend_sim::FromF<T>(f0 + static_cast<float>(i));
      else d[i] = static_cast<T>(firstValue + static_cast<T>(i));
    }
  });
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
  ascend_sim::Exec([=] {
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
  });
  ascend_sim::CountVector(count, sizeof(T), 2);
}

}  // namespace AscendC

// FP8 decoding for Atlas A2, whose vector unit has no fp8 type, shared by the Ascend C kernels:
//   E4m3ToHalfBits(byte)  fp16 bit pattern of an e4m3fn byte (every e4m3 value is exact in fp16;
//                         0x7F / 0xFF are NaN).
//   FillE4m3Table(lut)    that pattern of every byte into a 256-entry fp16 table in UB
//                         (kE4m3TableBytes), after which an S -> V sync (the table is written by
//                         the scalar unit).
//   E4m3ToHalf(...)       the decode of `count` bytes on the vector unit through that table (Gather).
#pragma once
#include "kernel_operator.h"

namespace dualops {
namespace ascend {

// fp16 bit pattern of an e4m3fn byte (S.EEEE.MMM, bias 7, no infinities, 0x7F/0xFF = NaN).
__aicore__ inline uint16_t E4m3ToHalfBits(uint32_t byte) {
  const uint32_t sign = (byte & 0x80u) << 8;
  const uint32_t e = (byte >> 3) & 0xFu;
  uint32_t m = byte & 0x7u;
  if (e == 0xF && m == 0x7) return static_cast<uint16_t>(sign | 0x7E00u);
  if (e == 0) {
    if (m == 0) return static_cast<uint16_t>(sign);
    // Subnormal m * 2^-9: normalize into an fp16 normal.
    int32_t exp = -9 + 15;   // fp16 biased exponent of 2^-9
    while (m < 4) {          // shift the leading 1 up to bit 2 (the implicit bit)
      m <<= 1;
      exp -= 1;
    }
    return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp + 2) << 10) | ((m & 0x3u) << 8));
  }
  return static_cast<uint16_t>(sign | ((e + 8) << 10) | (m << 7));
}

constexpr uint32_t kE4m3TableBytes = 256 * sizeof(uint16_t);

__aicore__ inline void FillE4m3Table(const AscendC::LocalTensor<uint16_t>& lut) {
  for (uint32_t b = 0; b < 256; ++b) lut.SetValue(b, E4m3ToHalfBits(b));
}

// `count` e4m3 bytes of raw -> fp16 in dst through the 256-entry fp16 table lut: byte -> its value
// in fp16 (in tmp) -> int32 (in idx) -> byte offset into the table -> Gather. dst may be tmp.
__aicore__ inline void E4m3ToHalf(const AscendC::LocalTensor<half>& dst, const AscendC::LocalTensor<uint8_t>& raw,
                                  const AscendC::LocalTensor<half>& tmp, const AscendC::LocalTensor<int32_t>& idx,
                                  const AscendC::LocalTensor<uint16_t>& lut, uint32_t count) {
  AscendC::Cast(tmp, raw, AscendC::RoundMode::CAST_NONE, count);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Cast(idx, tmp, AscendC::RoundMode::CAST_RINT, count);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Muls(idx, idx, static_cast<int32_t>(sizeof(half)), static_cast<int32_t>(count));
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Gather(dst, lut.template ReinterpretCast<half>(), idx.template ReinterpretCast<uint32_t>(), 0, count);
}

}  // namespace ascend
}  // namespace dualops

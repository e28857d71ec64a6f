// Plain C++ shared by the Ascend C kernels and their host sides: the Atlas A2 AI core's on-chip
// capacities the kernels size their buffers for, and the small integer helpers of tile and
// workspace arithmetic. No AscendC types: the host side (pybind module) includes it without the
// simulator, where __aicore__ means nothing.
#pragma once
#include <cstdint>

#ifndef __aicore__
#define __aicore__
#endif

namespace dualops {
namespace ascend {

constexpr uint32_t kL1Bytes = 524288;
constexpr uint32_t kL0aBytes = 65536;
constexpr uint32_t kL0bBytes = 65536;
constexpr uint32_t kL0cBytes = 131072;
constexpr uint32_t kUbBytes = 196608;

__aicore__ inline constexpr int32_t RoundUp(int32_t a, int32_t b) { return (a + b - 1) / b * b; }
__aicore__ inline constexpr int64_t RoundUp64(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
__aicore__ inline constexpr int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline constexpr int32_t MinI(int32_t a, int32_t b) { return a < b ? a : b; }
__aicore__ inline constexpr int32_t MaxI(int32_t a, int32_t b) { return a > b ? a : b; }
__aicore__ inline constexpr int32_t Floor16(int64_t v) { return static_cast<int32_t>(v / 16 * 16); }

}  // namespace ascend
}  // namespace dualops

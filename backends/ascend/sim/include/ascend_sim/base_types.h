// Qualifiers, enums and small structs of the AscendC API, with CANN's names and scopes, so a
// kernel source compiles unchanged against the simulator (g++) and against CANN (bisheng).
#pragma once
#include <cstdint>

// Address-space and function qualifiers are meaningful only to the NPU compiler. The strict
// qualifier check (ASCEND_SIM_STRICT_QUALIFIERS, clang -fsyntax-only; docs/ascend_sim.md) gives
// them teeth: GM pointers live in their own address space and kernel code may call only kernel
// code (or the AscendC API).
#if defined(ASCEND_SIM_STRICT_QUALIFIERS)
#define __aicore__ __attribute__((enforce_tcb("aicore")))
#define __gm__ __attribute__((address_space(1)))
#else
#define __aicore__
#define __gm__
#endif
#define __global__
#define __ubuf__
#define __cbuf__
#define __inout_pipe__(x)
#define __in_pipe__(x)
#define __out_pipe__(x)
#define __sync_alias__
#define __sync_noalias__
#ifndef GM_ADDR
#define GM_ADDR __gm__ uint8_t*
#endif

// Hardware pipelines (global scope in CANN).
enum pipe_t : int32_t {
  PIPE_S = 0, PIPE_V = 1, PIPE_M = 2, PIPE_MTE1 = 3, PIPE_MTE2 = 4, PIPE_MTE3 = 5,
  PIPE_ALL = 6, PIPE_MTE4 = 7, PIPE_MTE5 = 8, PIPE_V2 = 9, PIPE_FIX = 10,
};

// Kernel task types of KERNEL_TASK_TYPE_DEFAULT (global scope in CANN).
enum KernelMetaType : int32_t {
  KERNEL_TYPE_AIV_ONLY = 0,
  KERNEL_TYPE_AIC_ONLY = 1,
  KERNEL_TYPE_MIX_AIV_1_0 = 2,
  KERNEL_TYPE_MIX_AIC_1_0 = 3,
  KERNEL_TYPE_MIX_AIC_1_1 = 4,
  KERNEL_TYPE_MIX_AIC_1_2 = 5,
};

// Fixpipe quantization modes (global scope in CANN).
enum QuantMode_t : int32_t {
  NoQuant = 0, F322F16 = 1, F322BF16 = 2, DEQF16 = 3, VDEQF16 = 4, QF322B8_PRE = 5,
  VQF322B8_PRE = 6, REQ8 = 7, VREQ8 = 8,
};

namespace AscendC {

// Core types, as g_coreType compares them.
constexpr int32_t MIX = 0;
constexpr int32_t AIC = 1;
constexpr int32_t AIV = 2;

using TEventID = int8_t;

enum class TPosition : uint8_t {
  GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, SPM, SHM, TSCM,
  C2PIPE2GM, C2PIPE2LOCAL, MAX,
};
using QuePosition = TPosition;

// Intra-core pipe-to-pipe events (SetFlag / WaitFlag); producer pipe first.
enum class HardEvent : uint8_t {
  MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V,
  MTE3_MTE1, MTE1_MTE3, MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3,
  S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3,
  MTE1_FIX, FIX_MTE1, FIX_FIX, MAX,
};

enum class RoundMode : uint8_t {
  CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD,
};

enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };

enum class SELMODE : uint8_t {
  VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE,
};

enum class CacheMode : uint8_t { CACHE_MODE_DISABLE = 0, CACHE_MODE_NORMAL, CACHE_MODE_LAST, CACHE_MODE_PERSISTENT };

}  // namespace AscendC

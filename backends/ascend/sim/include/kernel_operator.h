// The AscendC API subset dualops kernels use, implemented for the CPU: a faithful model of an
// Atlas A2 (910B) AI core -- one cube core (AIC) and two vector cores (AIV) running as
// concurrent threads, real buffer capacities and alignment rules, bounds-checked GM,
// cross-core flags that really synchronize. Names, namespaces, template parameters and
// signatures follow CANN's kernel_operator.h (asc-devkit include/basic_api), so the same
// kernel source builds with CANN for the NPU. See docs/ascend_sim.md.
#pragma once
// Under the strict qualifier check (ASCEND_SIM_STRICT_QUALIFIERS, clang only), the simulator's
// own functions are the AscendC API that __aicore__ code may call: they are marked as leaves of
// the "aicore" trusted computing base, and its __aicore__ is empty inside them.
#if defined(ASCEND_SIM_STRICT_QUALIFIERS)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>
#include "ascend_sim/base_types.h"
#pragma push_macro("__aicore__")
#undef __aicore__
#define __aicore__
#pragma clang attribute push(__attribute__((enforce_tcb_leaf("aicore"))), apply_to = function)
#endif
#include "ascend_sim/base_types.h"
#include "ascend_sim/numerics.h"
#include "ascend_sim/runtime.h"
#include "ascend_sim/tensor.h"
#include "ascend_sim/tpipe.h"
#include "ascend_sim/sync.h"
#include "ascend_sim/data_copy.h"
#include "ascend_sim/vector_ops.h"
#include "ascend_sim/cube_ops.h"
#include "ascend_sim/registry.h"
#if defined(ASCEND_SIM_STRICT_QUALIFIERS)
#pragma clang attribute pop
#pragma pop_macro("__aicore__")
#endif

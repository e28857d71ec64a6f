// The AscendC API subset dualops kernels use, implemented for the CPU: a faithful model of an
// Atlas A2 (910B) AI core -- one cube core (AIC) and two vector cores (AIV) running as
// concurrent threads, real buffer capacities and alignment rules, bounds-checked GM,
// cross-core flags that really synchronize. Names, namespaces, template parameters and
// signatures follow CANN's kernel_operator.h (asc-devkit include/basic_api), so the same
// kernel source builds with CANN for the NPU. See docs/ascend_sim.md.
#pragma once
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

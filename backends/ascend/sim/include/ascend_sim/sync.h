// Core identity (GetBlockIdx, g_coreType, ASCEND_IS_AIC/AIV) and synchronization: intra-core
// SetFlag/WaitFlag/PipeBarrier, cross-core CrossCoreSetFlag/CrossCoreWaitFlag and SyncAll.
// Cross-core waits really block this core's thread until the other core signals; a wait that
// can never be satisfied (every live core waiting) fails at once, others after the timeout.
#pragma once
#include <cstdint>

#include "runtime.h"

namespace ascend_sim {

int32_t CurrentCoreType();           // AscendC::AIC / AscendC::AIV
void DeclareTaskType(int32_t type);  // KERNEL_TASK_TYPE_DEFAULT: must match the registration
int64_t BlockIdx();
int64_t BlockNum();
int64_t SubBlockIdx();
int64_t TaskRation();
void SetEventFlag(const char* api, AscendC::HardEvent evt, int32_t id);
void WaitEventFlag(const char* api, AscendC::HardEvent evt, int32_t id);
void PipeBarrierCheck(const char* api, pipe_t pipe);
void CrossCoreSet(int32_t mode, pipe_t pipe, int32_t flag_id);
void CrossCoreWait(int32_t mode, pipe_t pipe, int32_t flag_id);
void SyncAllCores(bool aiv_only);

}  // namespace ascend_sim

#define g_coreType (::ascend_sim::CurrentCoreType())
#define ASCEND_IS_AIV (g_coreType == ::AscendC::AIV)
#define ASCEND_IS_AIC (g_coreType == ::AscendC::AIC)
#define ASCEND_IS_NOT_AIV (g_coreType != ::AscendC::AIV)
#define ASCEND_IS_NOT_AIC (g_coreType != ::AscendC::AIC)
#define KERNEL_TASK_TYPE_DEFAULT(type) ::ascend_sim::DeclareTaskType(type)

namespace AscendC {

__aicore__ inline int64_t GetBlockIdx() { return ascend_sim::BlockIdx(); }
__aicore__ inline int64_t GetBlockNum() { return ascend_sim::BlockNum(); }
__aicore__ inline int64_t GetSubBlockIdx() { return ascend_sim::SubBlockIdx(); }
__aicore__ inline int64_t GetSubBlockNum() { return ascend_sim::CurrentCoreType() == AIV ? ascend_sim::TaskRation() : 1; }
__aicore__ inline int64_t GetTaskRation() { return ascend_sim::TaskRation(); }

template <HardEvent event>
__aicore__ inline void SetFlag(int32_t eventID) {
  ascend_sim::SetEventFlag("SetFlag", event, eventID);
}
template <HardEvent event>
__aicore__ inline void WaitFlag(int32_t eventID) {
  ascend_sim::WaitEventFlag("WaitFlag", event, eventID);
}
template <pipe_t pipe>
__aicore__ inline void PipeBarrier() {
  ascend_sim::PipeBarrierCheck("PipeBarrier", pipe);
}

template <uint8_t modeId, pipe_t pipe>
__aicore__ inline void CrossCoreSetFlag(uint16_t flagId) {
  ascend_sim::CrossCoreSet(modeId, pipe, flagId);
}
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
__aicore__ inline void CrossCoreWaitFlag(uint16_t flagId) {
  ascend_sim::CrossCoreWait(modeId, pipe, flagId);
}

template <bool isAIVOnly = true>
__aicore__ inline void SyncAll() {
  ascend_sim::SyncAllCores(isAIVOnly);
}

}  // namespace AscendC

// The old lower-case spelling CANN kernels still use.
#define pipe_barrier(pipe) ::AscendC::PipeBarrier<pipe>()

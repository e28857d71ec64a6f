// Pipe synchronisation helpers shared by the Ascend C kernels (names are stable; kernels include
// this as "ascend/common/pipe_sync.h").
//   PipeSync<E>()   SetFlag<E> + WaitFlag<E> on a fresh event id: pipe E's consumer waits for
//                   everything its producer issued so far (E = HardEvent::MTE2_V, V_MTE3, ...).
//   VecBarrier()    PipeBarrier<PIPE_V>: a vector instruction that reads what an earlier one wrote.
#pragma once
#include "kernel_operator.h"

namespace dualops {
namespace ascend {

template <AscendC::HardEvent E>
__aicore__ inline void PipeSync() {
  const AscendC::TEventID id = GetTPipePtr()->FetchEventID(E);
  AscendC::SetFlag<E>(id);
  AscendC::WaitFlag<E>(id);
}

__aicore__ inline void VecBarrier() { AscendC::PipeBarrier<PIPE_V>(); }

}  // namespace ascend
}  // namespace dualops

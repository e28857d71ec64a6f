// Global-memory addresses in kernel code: a kernel keeps GM addresses as integers (uint64_t, from
// its GM_ADDR arguments) and turns them into typed __gm__ pointers here, the only conversion CANN's
// compiler accepts (an integer to a __gm__ pointer; never a generic pointer to a __gm__ one).
#pragma once
#include "kernel_operator.h"

namespace dualops {
namespace ascend {

__aicore__ inline uint64_t GmAddr(GM_ADDR p) { return reinterpret_cast<uint64_t>(p); }

template <typename T>
__aicore__ inline __gm__ T* GmPtr(uint64_t addr) {
  return reinterpret_cast<__gm__ T*>(addr);
}

}  // namespace ascend
}  // namespace dualops

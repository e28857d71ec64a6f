// Kernel registry of the simulator: maps a kernel's name to its entry function
// (extern "C" __global__ __aicore__ void name(GM_ADDR...)) and its task type, so the launcher
// can run it by name. Kernel sources register under `#if defined(DUALOPS_ASCEND_SIM)`, which
// CANN's build never defines.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base_types.h"

namespace ascend_sim {

using KernelArgs = std::vector<uint8_t*>;

struct KernelInfo {
  std::string name;
  int32_t task_type = KERNEL_TYPE_MIX_AIC_1_2;
  size_t num_args = 0;
  std::function<void(const KernelArgs&)> entry;
};

bool RegisterKernel(KernelInfo info);
const KernelInfo* FindKernel(const std::string& name);
std::vector<std::string> KernelNames();

template <typename... A, size_t... I>
void CallKernel(void (*f)(A...), const KernelArgs& args, std::index_sequence<I...>) {
  f(reinterpret_cast<A>(args[I])...);
}

template <typename... A>
KernelInfo MakeKernelInfo(const char* name, int32_t task_type, void (*f)(A...)) {
  static_assert((std::is_pointer_v<A> && ...), "kernel arguments must all be GM_ADDR");
  KernelInfo k;
  k.name = name;
  k.task_type = task_type;
  k.num_args = sizeof...(A);
  k.entry = [f](const KernelArgs& a) { CallKernel(f, a, std::index_sequence_for<A...>{}); };
  return k;
}

}  // namespace ascend_sim

#define ASCEND_SIM_REGISTER_KERNEL(name, task_type)                 \
  static const bool ascend_sim_registered_##name [[maybe_unused]] = \
      ::ascend_sim::RegisterKernel(::ascend_sim::MakeKernelInfo(#name, task_type, &name))

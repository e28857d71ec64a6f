// Host side of the NPU build: the launch functions of the Ascend C kernels that CANN's
// ascendc_library generates (aclrtlaunch_<kernel>, declared in aclrtlaunch_<kernel>.h) called with
// the GM addresses, workspace and tiling the Python glue prepared (the same tiling and workspace
// sizes as the simulator path), on a stream handle passed in as an integer (torch_npu's current
// stream). No torch types.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualops {
namespace npu {

// One kernel's launcher: args = the kernel's GM_ADDR arguments in order, as device addresses.
using Launcher = uint32_t (*)(uint32_t block_dim, void* stream, const std::vector<uint64_t>& args);

inline void* Addr(uint64_t a) { return reinterpret_cast<void*>(static_cast<uintptr_t>(a)); }

inline void CheckArgs(const char* kernel, const std::vector<uint64_t>& args, size_t want) {
  if (args.size() != want) {
    throw std::invalid_argument(std::string("npu_launch: kernel ") + kernel + " takes " + std::to_string(want) +
                                " GM addresses, got " + std::to_string(args.size()));
  }
}

namespace detail {
template <typename... A, size_t... I>
uint32_t Call(uint32_t (*fn)(uint32_t, void*, A...), uint32_t block_dim, void* stream,
              const std::vector<uint64_t>& args, std::index_sequence<I...>) {
  return fn(block_dim, stream, Addr(args[I])...);
}
}  // namespace detail

// Calls CANN's generated aclrtlaunch_<kernel> (`fn`: numBlocks, stream, then one void* per GM_ADDR
// argument of the kernel entry) with `args`, after checking their count.
template <typename... A>
uint32_t Launch(const char* kernel, uint32_t (*fn)(uint32_t, void*, A...), uint32_t block_dim, void* stream,
                const std::vector<uint64_t>& args) {
  static_assert((std::is_same<A, void*>::value && ...), "every argument of a kernel entry must be a GM_ADDR");
  CheckArgs(kernel, args, sizeof...(A));
  return detail::Call(fn, block_dim, stream, args, std::index_sequence_for<A...>{});
}

uint32_t LaunchIncreFlashAttention(uint32_t block_dim, void* stream, const std::vector<uint64_t>& args);
uint32_t LaunchMlaDecode(uint32_t block_dim, void* stream, const std::vector<uint64_t>& args);
uint32_t LaunchGroupedGemm(uint32_t block_dim, void* stream, const std::vector<uint64_t>& args);

}  // namespace npu
}  // namespace dualops

// Host entry of the Ascend C MLA decode kernel (no torch types): the GM workspace a launch needs
// and the check of a tiling buffer (launch header + shared MLA plan) before a launch.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dualops {
namespace mla {

// GM workspace bytes (all AI cores) for a tiling buffer of `n` bytes.
uint64_t AscendWorkspaceBytes(const void* tiling, size_t n);
// nullptr when the tiling buffer is one the kernel can run, else why not.
const char* AscendCheckTiling(const void* tiling, size_t n);

}  // namespace mla
}  // namespace dualops

// Host entry of the Ascend grouped GEMM: what the launcher needs besides the params struct and
// the plan bytes (dualops::GroupedGemmParams, ops/include/dualops/params.h; plan layout in
// gg_layout.h). No torch types.
#pragma once
#include <cstdint>
#include <string>

namespace dualops {

// GM workspace bytes (all cores) the kernel needs for this plan.
uint64_t AscendGroupedGemmWorkspaceBytes(const std::string& tiling);

// Empty when the plan can run on an AI core with these on-chip capacities, else why not.
std::string AscendGroupedGemmCheckTiling(const std::string& tiling, int64_t l1_bytes, int64_t l0a_bytes,
                                         int64_t l0b_bytes, int64_t l0c_bytes);

}  // namespace dualops

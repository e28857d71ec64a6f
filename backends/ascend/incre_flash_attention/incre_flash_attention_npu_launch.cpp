// NPU launch of the Ascend C IFA kernel (incre_flash_attention_kernel.cpp built by CANN's
// ascendc_library): 15 tensor addresses, the workspace and the tiling buffer (ifa_common.h Args).
#include "aclrtlaunch_incre_flash_attention.h"
#include "ascend/npu_launch.h"

namespace dualops {
namespace npu {

uint32_t LaunchIncreFlashAttention(uint32_t block_dim, void* stream, const std::vector<uint64_t>& args) {
  return Launch("incre_flash_attention", &ACLRT_LAUNCH_KERNEL(incre_flash_attention), block_dim, stream, args);
}

}  // namespace npu
}  // namespace dualops

// NPU launch of the Ascend C IFA kernel (incre_flash_attention_kernel.cpp built by CANN's
// ascendc_library): 15 tensor addresses, the workspace and the tiling buffer (ifa_common.h Args).
#include "aclrtlaunch_incre_flash_attention.h"
#include "ascend/npu_launch.h"

namespace dualops {
namespace npu {

uint32_t LaunchIncreFlashAttention(uint32_t block_dim, void* stream, const std::vector<uint64_t>& a) {
  CheckArgs("incre_flash_attention", a, 17);
  return ACLRT_LAUNCH_KERNEL(incre_flash_attention)(
      block_dim, stream, Addr(a[0]), Addr(a[1]), Addr(a[2]), Addr(a[3]), Addr(a[4]), Addr(a[5]), Addr(a[6]),
      Addr(a[7]), Addr(a[8]), Addr(a[9]), Addr(a[10]), Addr(a[11]), Addr(a[12]), Addr(a[13]), Addr(a[14]),
      Addr(a[15]), Addr(a[16]));
}

}  // namespace npu
}  // namespace dualops

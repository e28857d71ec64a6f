// NPU launch of the Ascend C grouped GEMM kernel (grouped_gemm_kernel.cpp built by CANN's
// ascendc_library): the packed params (device copy), the workspace and the tiling buffer.
#include "aclrtlaunch_grouped_gemm.h"
#include "ascend/npu_launch.h"

namespace dualops {
namespace npu {

uint32_t LaunchGroupedGemm(uint32_t block_dim, void* stream, const std::vector<uint64_t>& a) {
  CheckArgs("grouped_gemm", a, 3);
  return ACLRT_LAUNCH_KERNEL(grouped_gemm)(block_dim, stream, Addr(a[0]), Addr(a[1]), Addr(a[2]));
}

}  // namespace npu
}  // namespace dualops

// NPU launch of the Ascend C grouped GEMM kernel (grouped_gemm_kernel.cpp built by CANN's
// ascendc_library): the packed params (device copy), the workspace and the tiling buffer.
#include "aclrtlaunch_grouped_gemm.h"
#include "ascend/npu_launch.h"

namespace dualops {
namespace npu {

uint32_t LaunchGroupedGemm(uint32_t block_dim, void* stream, const std::vector<uint64_t>& args) {
  return Launch("grouped_gemm", &ACLRT_LAUNCH_KERNEL(grouped_gemm), block_dim, stream, args);
}

}  // namespace npu
}  // namespace dualops

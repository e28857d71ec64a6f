// NPU launch of the Ascend C MLA decode kernel (mla_decode_kernel.cpp built by CANN's
// ascendc_library): the packed params (device copy), the workspace and the tiling buffer.
#include "aclrtlaunch_mla_decode.h"
#include "ascend/npu_launch.h"

namespace dualops {
namespace npu {

uint32_t LaunchMlaDecode(uint32_t block_dim, void* stream, const std::vector<uint64_t>& args) {
  return Launch("mla_decode", &ACLRT_LAUNCH_KERNEL(mla_decode), block_dim, stream, args);
}

}  // namespace npu
}  // namespace dualops

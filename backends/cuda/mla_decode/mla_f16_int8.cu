// MLA decode, f16 q with the int8 cache int8_v32 (d_qk 576; fp8_v32's layout with int8 values).
#include "mla_launch.cuh"

namespace dualops::cuda::mla {
DUALOPS_MLA_INSTANTIATE(__half, kFmtI8V32, 576)
}  // namespace dualops::cuda::mla

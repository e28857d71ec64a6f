// MLA decode, bf16 q with the FP8 caches fp8_v32 (d_qk 576) and fp8_model1 (d_qk 512).
#include "mla_launch.cuh"

namespace dualops::cuda::mla {
DUALOPS_MLA_INSTANTIATE(__nv_bfloat16, kFmtV32, 576)
DUALOPS_MLA_INSTANTIATE(__nv_bfloat16, kFmtModel1, 512)
}  // namespace dualops::cuda::mla

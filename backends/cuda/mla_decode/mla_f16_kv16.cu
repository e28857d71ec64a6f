// MLA decode, f16 q with a f16 cache (kv_format "bf16" family), d_qk 576 and 512.
#include "mla_launch.cuh"

namespace dualops::cuda::mla {
DUALOPS_MLA_INSTANTIATE(__half, kFmtBf16, 576)
DUALOPS_MLA_INSTANTIATE(__half, kFmtBf16, 512)
}  // namespace dualops::cuda::mla

// The pieces of backends/cuda/common/wgmma.cuh that the wgmma MLA kernels (mla_wg_*, mla_wt_*)
// name without their namespace.
#pragma once
#include "../common/wgmma.cuh"

namespace dualops::cuda::mla {

using common::fence_proxy_async_smem;
using common::wgmma_commit;
using common::wgmma_desc_sw128;
using common::wgmma_fence;
using common::wgmma_fence_regs;
using common::wgmma_wait;

}  // namespace dualops::cuda::mla

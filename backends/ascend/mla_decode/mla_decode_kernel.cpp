// MLA decode (DeepSeek multi-head latent attention, FlashMLA semantics) in Ascend C for Atlas A2,
// cube + vector (MIX 1:2).
//   AIC: per kv tile the latent vectors go to L1 once and serve as K (mm1 = Q . K^T, all d_qk)
//        and V (mm2 = P . V, the first d_v columns) (mla_cube.h)
//   AIV: scale / invalid-key and causal masks / online softmax, rescale-accumulate, final divide,
//        lse, attention sink (mla_vector.h, mla_combine.h); FP8 dequantization (mla_dequant.h);
//        split-KV combine after SyncAll (mla_combine.h)
// Arguments: `params` = the packed dualops::MlaDecodeParams, `workspace` = per-core GM scratch
// (mla_layout.h), `tiling` = the Ascend launch header followed by the shared MLA plan
// (dualops.tiling.plan_mla_decode, the same schedule the CUDA kernel reads).
#include "kernel_operator.h"

#include "ascend/mla_decode/mla_cube.h"
#include "ascend/mla_decode/mla_vector.h"

namespace dualops {
namespace mla {

template <typename QT>
__aicore__ inline void RunTyped(const Args& a) {
  if ASCEND_IS_AIC {
    MlaCube<QT> c;
    c.Init(a);
    c.Process();
    return;
  }
  MlaVector<QT> v;
  v.Init(a);
  v.Process();
}

}  // namespace mla
}  // namespace dualops

extern "C" __global__ __aicore__ void mla_decode(GM_ADDR params, GM_ADDR workspace, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  dualops::mla::Args args;
  args.Load(params, workspace, tiling);
  if (args.h.q_dtype == dualops::DType::kFloat16) {
    dualops::mla::RunTyped<half>(args);
  } else {
    dualops::mla::RunTyped<bfloat16_t>(args);
  }
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(mla_decode, KERNEL_TYPE_MIX_AIC_1_2);
#endif

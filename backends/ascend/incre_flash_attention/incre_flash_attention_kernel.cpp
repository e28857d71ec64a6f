// Incremental (decode) flash attention in Ascend C for Atlas A2, cube + vector (MIX 1:2).
//   AIC: mm1 = Q . K^T, mm2 = P . V (ifa_cube.h)
//   AIV: scale / pse / masks / online softmax, rescale-accumulate, final divide, lse,
//        int8 / fp8 / other-dtype antiquant (ifa_convert.h), split-KV combine (ifa_combine.h)
// Arguments: the GM addresses of the tensors, `workspace` = per-core GM scratch (ifa_layout.h),
// `tiling` = the IFA plan header from dualops.tiling.plan_incre_flash_attention followed by the
// packed dualops::IncreFlashAttentionParams scalars, as CANN kernels get tiling.
#include "kernel_operator.h"

#include "ascend/incre_flash_attention/ifa_cube.h"
#include "ascend/incre_flash_attention/ifa_vector.h"

namespace dualops {
namespace ifa {

template <typename QT, typename KT>
__aicore__ inline void RunVector(const Args& a) {
  IfaVector<QT, KT> v;
  v.Init(a);
  v.Process();
}

template <typename QT>
__aicore__ inline void RunTyped(const Args& a) {
  if ASCEND_IS_AIC {
    const int32_t core = static_cast<int32_t>(AscendC::GetBlockIdx());
    if (core >= a.t.num_cores) return;
    IfaCube<QT> c;
    c.Init(a);
    c.Process();
    return;
  }
  switch (a.p.kv_dtype) {
    case DType::kInt8: RunVector<QT, int8_t>(a); break;
    case DType::kFloat8E4m3fn: RunVector<QT, uint8_t>(a); break;   // e4m3 bytes, decoded on the vector core
    case DType::kFloat16: RunVector<QT, half>(a); break;
    case DType::kBfloat16: RunVector<QT, bfloat16_t>(a); break;
    default: break;   // rejected on the host
  }
}

}  // namespace ifa
}  // namespace dualops

// Arguments as CANN kernels receive them: GM addresses (0 where an optional tensor is absent),
// the workspace, and the tiling buffer (plan header + params scalars, ifa_common.h Args).
extern "C" __global__ __aicore__ void incre_flash_attention(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR out, GM_ADDR lse,
                                                             GM_ADDR kv_lens, GM_ADDR block_table, GM_ADDR atten_mask,
                                                             GM_ADDR pse_shift, GM_ADDR k_scale, GM_ADDR v_scale,
                                                             GM_ADDR k_offset, GM_ADDR v_offset, GM_ADDR o_accum,
                                                             GM_ADDR lse_accum, GM_ADDR workspace, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  using dualops::ascend::GmAddr;
  const dualops::ifa::GmAddrs addrs{GmAddr(q), GmAddr(k), GmAddr(v), GmAddr(out), GmAddr(lse), GmAddr(kv_lens),
                                    GmAddr(block_table), GmAddr(atten_mask), GmAddr(pse_shift), GmAddr(k_scale),
                                    GmAddr(v_scale), GmAddr(k_offset), GmAddr(v_offset), GmAddr(o_accum),
                                    GmAddr(lse_accum), GmAddr(workspace)};
  dualops::ifa::Args args;
  args.Load(addrs, tiling);
  if (args.p.q_dtype == dualops::DType::kFloat16) {
    dualops::ifa::RunTyped<half>(args);
  } else {
    dualops::ifa::RunTyped<bfloat16_t>(args);
  }
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(incre_flash_attention, KERNEL_TYPE_MIX_AIC_1_2);
#endif

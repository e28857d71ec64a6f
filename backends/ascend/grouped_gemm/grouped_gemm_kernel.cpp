// Grouped GEMM (MoE experts) in Ascend C for Atlas A2, cube + vector (MIX 1:2), NT layout:
// y[rows of group g] = x[rows of group g] . w[g]^T.
//   AIC: the (group, m tile, n tile) items of the plan, dealt round-robin over the AI cores;
//        K loop double-buffered through L1 and L0A / L0B, accumulation in L0C (gg_cube.h)
//   AIV: fp8 -> fp16 decode of the operands before the GEMM (gg_decode.h); the dequant
//        epilogue of int8 / fp8 recipes (gg_epilogue.h)
// Arguments: `params` = the packed dualops::GroupedGemmParams, `workspace` = GM scratch
// (gg_layout.h), `tiling` = the grouped-GEMM plan (header + items), as CANN kernels get tiling.
#include "kernel_operator.h"

#include "ascend/grouped_gemm/gg_cube.h"
#include "ascend/grouped_gemm/gg_decode.h"
#include "ascend/grouped_gemm/gg_epilogue.h"

namespace dualops {
namespace gg {

template <typename AT, typename CT, typename OT>
__aicore__ inline void RunCube(const Args& a) {
  GgCube<AT, CT, OT> c;
  c.Init(a);
  c.Process();
}

template <typename CT, typename OT>
__aicore__ inline void RunEpilogue(const Args& a) {
  GgEpilogue<CT, OT> e;
  e.Init(a);
  e.Process();
}

template <typename OT>
__aicore__ inline void RunTyped(const Args& a) {
  if ASCEND_IS_AIC {
    switch (a.t.in_dtype) {
      case DType::kFloat16: RunCube<half, float, OT>(a); break;
      case DType::kBfloat16: RunCube<bfloat16_t, float, OT>(a); break;
      case DType::kInt8: RunCube<int8_t, int32_t, int32_t>(a); break;
      case DType::kFloat8E4m3fn: RunCube<half, float, float>(a); break;   // the fp16 decode in the workspace
      default: break;   // rejected on the host
    }
    return;
  }
  if (a.t.scale_mode == GgScaleMode::kNone) return;
  if (a.t.in_dtype == DType::kInt8) {
    RunEpilogue<int32_t, OT>(a);
  } else {
    RunEpilogue<float, OT>(a);
  }
}

}  // namespace gg
}  // namespace dualops

extern "C" __global__ __aicore__ void grouped_gemm(GM_ADDR params, GM_ADDR workspace, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  dualops::gg::Args args;
  args.Load(params, workspace, tiling);
  if (args.Fp8()) {
    if ASCEND_IS_AIV {
      dualops::gg::GgDecode d;
      d.Init(args);
      d.Process();
    }
    AscendC::SyncAll<false>();   // every decoded operand is in the workspace before any cube reads it
  }
  switch (args.p.out_dtype) {
    case dualops::DType::kFloat16: dualops::gg::RunTyped<half>(args); break;
    case dualops::DType::kBfloat16: dualops::gg::RunTyped<bfloat16_t>(args); break;
    default: dualops::gg::RunTyped<float>(args); break;
  }
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(grouped_gemm, KERNEL_TYPE_MIX_AIC_1_2);
#endif

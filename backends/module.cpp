// dualops._C: the one native module. Each backend registers its own bindings; this file only
// says what was built. Bindings take plain ints (addresses, stream handles) and bytes (packed
// params / tiling structs, see ops/include/dualops), never torch types.
#include <pybind11/pybind11.h>

namespace dualops {
void register_ascend_sim(pybind11::module_& m);
#if DUALOPS_WITH_CUDA
void register_cuda(pybind11::module_& m);
#endif
#if DUALOPS_WITH_CANN
void register_npu(pybind11::module_& m);
#endif
}  // namespace dualops

PYBIND11_MODULE(_C, m) {
  m.doc() = "dualops native kernels (CUDA, Ascend C on the simulator, Ascend C on the NPU)";
  pybind11::dict built;
  built["cuda"] = bool(DUALOPS_BUILD_CUDA);
  built["cann"] = bool(DUALOPS_BUILD_CANN);
  built["ascend_sim"] = true;
#if DUALOPS_WITH_CANN
  built["npu_soc"] = DUALOPS_NPU_SOC;   // the SoC CANN compiled the NPU kernels for
#endif
  m.attr("built") = built;
  dualops::register_ascend_sim(m);
#if DUALOPS_WITH_CUDA
  dualops::register_cuda(m);
#endif
#if DUALOPS_WITH_CANN
  dualops::register_npu(m);
#endif
}

// pybind11 bindings of the CUDA kernels: each op registers its own functions
// (backends/cuda/<op>/<op>_bind.cpp); only the ops this build compiled are registered
// (CMake's DUALOPS_CUDA_OPS defines DUALOPS_CUDA_OP_<OP> for each).
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace dualops {

#if DUALOPS_CUDA_OP_INCRE_FLASH_ATTENTION
void register_cuda_incre_flash_attention(py::module_& m);
#endif
#if DUALOPS_CUDA_OP_MLA_DECODE
void register_cuda_mla_decode(py::module_& m);
#endif
#if DUALOPS_CUDA_OP_GROUPED_GEMM
void register_cuda_grouped_gemm(py::module_& m);
#endif

void register_cuda(py::module_& m) {
  py::list ops;
#if DUALOPS_CUDA_OP_INCRE_FLASH_ATTENTION
  register_cuda_incre_flash_attention(m);
  ops.append("incre_flash_attention");
#endif
#if DUALOPS_CUDA_OP_MLA_DECODE
  register_cuda_mla_decode(m);
  ops.append("mla_decode");
#endif
#if DUALOPS_CUDA_OP_GROUPED_GEMM
  register_cuda_grouped_gemm(m);
  ops.append("grouped_gemm");
#endif
  m.attr("cuda_ops") = ops;
}

}  // namespace dualops

// pybind11 registration of the CUDA incremental flash attention: packed params and tiling as
// bytes, the stream as an int (no torch types).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>

#include "bind_util.h"
#include "incre_flash_attention.h"

namespace py = pybind11;

namespace dualops {

void register_cuda_incre_flash_attention(py::module_& m) {
  m.attr("cuda_ifa_params_bytes") = py::int_(sizeof(IncreFlashAttentionCudaParams));
  m.attr("cuda_ifa_tiling_bytes") = py::int_(sizeof(IncreFlashAttentionCudaTiling));
  m.attr("cuda_ifa_merge_groups") = py::int_(cuda::ifa::kMaxMergeGroups);
  m.def(
      "cuda_incre_flash_attention",
      [](const py::bytes& params, const py::bytes& tiling, std::uintptr_t stream) {
        const auto p = struct_from_bytes<IncreFlashAttentionCudaParams>(params, "params");
        const auto t = struct_from_bytes<IncreFlashAttentionCudaTiling>(tiling, "tiling");
        if (const char* err = cuda::incre_flash_attention_check(p, t)) throw py::value_error(err);
        const char* err = nullptr;
        {
          py::gil_scoped_release nogil;
          err = cuda::incre_flash_attention_launch(p, t, reinterpret_cast<cudaStream_t>(stream));  // checked above
        }
        if (err) throw std::runtime_error(err);
      },
      py::arg("params"), py::arg("tiling"), py::arg("stream"),
      "Incremental flash attention on a CUDA stream. params: packed IncreFlashAttentionCudaParams; tiling: the "
      "packed IFA plan header; stream: cudaStream_t as an int.");
  m.def(
      "cuda_incre_flash_attention_smem",
      [](const py::bytes& params, const py::bytes& tiling) {
        return cuda::incre_flash_attention_smem_bytes(struct_from_bytes<IncreFlashAttentionCudaParams>(params, "params"),
                                                      struct_from_bytes<IncreFlashAttentionCudaTiling>(tiling, "tiling"));
      },
      py::arg("params"), py::arg("tiling"), "Dynamic shared memory of the split kernel this call would launch.");
}

}  // namespace dualops

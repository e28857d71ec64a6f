// pybind11 bindings of the CUDA kernels. They take packed params / tiling structs as bytes (see
// ops/include/dualops) and the stream as an int, never torch types, so the module does not
// depend on the installed torch.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "incre_flash_attention/incre_flash_attention.h"

namespace py = pybind11;

namespace dualops {
namespace {

template <typename T>
T from_bytes(const py::bytes& b, const char* what) {
  const std::string s = b;
  if (s.size() != sizeof(T)) {
    throw py::value_error(std::string(what) + " must be " + std::to_string(sizeof(T)) + " bytes (the packed C struct), got " +
                          std::to_string(s.size()) + "; rebuild dualops._C after a schema change");
  }
  T out;
  std::memcpy(&out, s.data(), sizeof(T));
  return out;
}

}  // namespace

void register_cuda(py::module_& m) {
  m.attr("cuda_ifa_params_bytes") = py::int_(sizeof(IncreFlashAttentionParams));
  m.attr("cuda_ifa_tiling_bytes") = py::int_(sizeof(IncreFlashAttentionTiling));
  m.attr("cuda_ifa_merge_groups") = py::int_(cuda::ifa::kMaxMergeGroups);
  m.def(
      "cuda_incre_flash_attention",
      [](const py::bytes& params, const py::bytes& tiling, std::uintptr_t stream) {
        const auto p = from_bytes<IncreFlashAttentionParams>(params, "params");
        const auto t = from_bytes<IncreFlashAttentionTiling>(tiling, "tiling");
        if (const char* err = cuda::incre_flash_attention_check(p, t)) throw py::value_error(err);
        const char* err = nullptr;
        {
          py::gil_scoped_release nogil;
          err = cuda::incre_flash_attention(p, t, reinterpret_cast<cudaStream_t>(stream));
        }
        if (err) throw std::runtime_error(err);
      },
      py::arg("params"), py::arg("tiling"), py::arg("stream"),
      "Incremental flash attention on a CUDA stream. params: packed IncreFlashAttentionParams; tiling: the "
      "packed IFA plan header; stream: cudaStream_t as an int.");
  m.def(
      "cuda_incre_flash_attention_smem",
      [](const py::bytes& params, const py::bytes& tiling) {
        return cuda::incre_flash_attention_smem_bytes(from_bytes<IncreFlashAttentionParams>(params, "params"),
                                                      from_bytes<IncreFlashAttentionTiling>(tiling, "tiling"));
      },
      py::arg("params"), py::arg("tiling"), "Dynamic shared memory of the split kernel this call would launch.");
}

}  // namespace dualops

// pybind11 registration of the CUDA MLA decode: packed params and plan header as bytes, the
// stream as an int (no torch types).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>

#include "bind_util.h"
#include "mla_decode.h"

namespace py = pybind11;

namespace dualops {

void register_cuda_mla_decode(py::module_& m) {
  m.attr("cuda_mla_params_bytes") = py::int_(sizeof(MlaDecodeCudaParams));
  m.attr("cuda_mla_tiling_bytes") = py::int_(sizeof(MlaDecodeTiling));
  m.def(
      "cuda_mla_decode",
      [](const py::bytes& params, const py::bytes& tiling, std::uintptr_t stream) {
        const auto p = struct_from_bytes<MlaDecodeCudaParams>(params, "params");
        const auto t = struct_prefix_from_bytes<MlaDecodeTiling>(tiling, "tiling");
        if (const char* err = cuda::mla_decode_check(p, t)) throw py::value_error(err);
        const char* err = nullptr;
        {
          py::gil_scoped_release nogil;
          err = cuda::mla_decode_launch(p, t, reinterpret_cast<cudaStream_t>(stream));  // checked above
        }
        if (err) throw std::runtime_error(err);
      },
      py::arg("params"), py::arg("tiling"), py::arg("stream"),
      "MLA decode on a CUDA stream. params: packed MlaDecodeCudaParams (plan: the device copy of the packed plan); "
      "tiling: the packed plan header (total_splits -1 for a plan made on the device); stream: cudaStream_t.");
  m.def(
      "cuda_mla_plan",
      [](std::uintptr_t cache_seqlens, std::uintptr_t plan, const py::bytes& header, std::uintptr_t stream) {
        const auto h = struct_prefix_from_bytes<MlaDecodeTiling>(header, "header");
        const char* err = cuda::mla_plan_on_device(reinterpret_cast<const int*>(cache_seqlens),
                                                   reinterpret_cast<int*>(plan), h,
                                                   reinterpret_cast<cudaStream_t>(stream));
        if (err) throw std::runtime_error(err);
      },
      py::arg("cache_seqlens"), py::arg("plan"), py::arg("header"), py::arg("stream"),
      "Device MLA planner: fills the int32 device buffer `plan` (header, parts, num_splits) from the device "
      "int32 cache_seqlens; header: the packed shape fields (MlaDecodeTiling).");
}

}  // namespace dualops

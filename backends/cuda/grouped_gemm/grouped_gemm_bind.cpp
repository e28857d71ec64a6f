// pybind11 registration of the CUDA grouped GEMM: packed params as bytes, tile M, the stream as
// an int (no torch types).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>

#include "bind_util.h"
#include "grouped_gemm.h"

namespace py = pybind11;

namespace dualops {

void register_cuda_grouped_gemm(py::module_& m) {
  m.attr("cuda_gg_params_bytes") = py::int_(sizeof(GroupedGemmParams));
  m.def(
      "cuda_grouped_gemm",
      [](const py::bytes& params, int tile_m, std::uintptr_t stream) {
        const auto p = struct_from_bytes<GroupedGemmParams>(params, "params");
        if (const char* err = cuda::grouped_gemm_check(p, tile_m)) throw py::value_error(err);
        const char* err = nullptr;
        {
          py::gil_scoped_release nogil;
          err = cuda::grouped_gemm(p, tile_m, reinterpret_cast<cudaStream_t>(stream));
        }
        if (err) throw std::runtime_error(err);
      },
      py::arg("params"), py::arg("tile_m"), py::arg("stream"),
      "Grouped GEMM on a CUDA stream. params: packed GroupedGemmParams; tile_m: tokens per tile "
      "(8/16/32/48/64); stream: cudaStream_t as an int.");
}

}  // namespace dualops

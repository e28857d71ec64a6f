// pybind11 registration of the CUDA grouped GEMM: packed params as bytes, tile M, the stream as
// an int (no torch types).
#include <pybind11/pybind11.h>

#include <cstddef>
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
          err = cuda::grouped_gemm_launch(p, tile_m, reinterpret_cast<cudaStream_t>(stream));  // checked above
        }
        if (err) throw std::runtime_error(err);
      },
      py::arg("params"), py::arg("tile_m"), py::arg("stream"),
      "Grouped GEMM on a CUDA stream. params: packed GroupedGemmParams; tile_m: tokens per tile "
      "(8/16/32/48/64); stream: cudaStream_t as an int.");
  m.attr("cuda_gg_sm90_built") = py::bool_(cuda::grouped_gemm_sm90_built());
  m.def(
      "cuda_grouped_gemm_sm90_workspace",
      [](const py::bytes& params, int config) {
        const auto p = struct_from_bytes<GroupedGemmParams>(params, "params");
        size_t bytes = 0;
        if (const char* err = cuda::grouped_gemm_sm90_workspace(p, config, &bytes)) throw py::value_error(err);
        return bytes;
      },
      py::arg("params"), py::arg("config"),
      "Device workspace bytes of a grouped GEMM call on the CUTLASS sm90 path (config: 0 large "
      "tiles, 1 small tiles, 2 fp8 fast accumulation, 3 large tiles in 1 x 2 clusters; + 256: the "
      "tile scheduler walks the tiles along N).");
  m.def(
      "cuda_grouped_gemm_sm90",
      [](const py::bytes& params, int config, std::uintptr_t ws, std::size_t ws_bytes, std::uintptr_t stream) {
        const auto p = struct_from_bytes<GroupedGemmParams>(params, "params");
        if (const char* err = cuda::grouped_gemm_sm90_check(p, config)) throw py::value_error(err);
        const char* err = nullptr;
        {
          py::gil_scoped_release nogil;
          err = cuda::grouped_gemm_sm90_launch(p, config, reinterpret_cast<void*>(ws), ws_bytes,
                                               reinterpret_cast<cudaStream_t>(stream));  // checked above
        }
        if (err) throw std::runtime_error(err);
      },
      py::arg("params"), py::arg("config"), py::arg("workspace"), py::arg("workspace_bytes"), py::arg("stream"),
      "Grouped GEMM on the CUTLASS sm90 path (large groups). workspace: device pointer of at least "
      "cuda_grouped_gemm_sm90_workspace(params) bytes; stream: cudaStream_t as an int.");
}

}  // namespace dualops

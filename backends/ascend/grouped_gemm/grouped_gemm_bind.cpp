// pybind11 registration of the Ascend grouped GEMM's host helpers for the Python glue:
//   _C.ascend_gg_workspace_bytes(tiling: bytes) -> int
//   _C.ascend_gg_check_tiling(tiling: bytes, l1, l0a, l0b, l0c) -> str | None
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "ascend/grouped_gemm/grouped_gemm.h"

namespace py = pybind11;

namespace dualops {

void register_ascend_sim_grouped_gemm(py::module_& m) {
  m.def(
      "ascend_gg_workspace_bytes",
      [](const py::bytes& tiling) {
        try {
          return AscendGroupedGemmWorkspaceBytes(std::string(tiling));
        } catch (const std::invalid_argument& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("tiling"), "GM workspace bytes the Ascend grouped-GEMM kernel needs for this plan (all cores).");
  m.def(
      "ascend_gg_check_tiling",
      [](const py::bytes& tiling, int64_t l1, int64_t l0a, int64_t l0b, int64_t l0c) -> py::object {
        std::string why;
        try {
          why = AscendGroupedGemmCheckTiling(std::string(tiling), l1, l0a, l0b, l0c);
        } catch (const std::invalid_argument& e) {
          throw py::value_error(e.what());
        }
        if (why.empty()) return py::none();
        return py::str(why);
      },
      py::arg("tiling"), py::arg("l1_bytes"), py::arg("l0a_bytes"), py::arg("l0b_bytes"), py::arg("l0c_bytes"),
      "None when the grouped-GEMM plan can run on the Ascend kernel with these capacities, else why not.");
}

}  // namespace dualops

// pybind11 registration of the Ascend MLA decode kernel's host helpers for the Python glue:
//   _C.ascend_mla_workspace_bytes(tiling: bytes) -> int
//   _C.ascend_mla_check_tiling(tiling: bytes) -> str | None
#include <pybind11/pybind11.h>

#include <string>

#include "ascend/mla_decode/mla_decode.h"

namespace py = pybind11;

namespace dualops {

void register_ascend_sim_mla_decode(py::module_& m) {
  m.def(
      "ascend_mla_workspace_bytes",
      [](const py::bytes& tiling) {
        const std::string s = tiling;
        return mla::AscendWorkspaceBytes(s.data(), s.size());
      },
      py::arg("tiling"), "GM workspace bytes the Ascend MLA decode kernel needs for this tiling (all cores).");
  m.def(
      "ascend_mla_check_tiling",
      [](const py::bytes& tiling) -> py::object {
        const std::string s = tiling;
        const char* why = mla::AscendCheckTiling(s.data(), s.size());
        if (why == nullptr) return py::none();
        return py::str(why);
      },
      py::arg("tiling"), "None when the tiling (launch header + MLA plan) is one the Ascend kernel can run, else why not.");
}

}  // namespace dualops

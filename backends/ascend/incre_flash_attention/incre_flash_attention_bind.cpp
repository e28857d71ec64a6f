// pybind11 registration of the Ascend IFA kernel's host-side helpers for the Python glue: the GM workspace size and a
// plan-header check, from the same ifa_layout.h the kernel uses.
//   _C.ascend_ifa_workspace_bytes(tiling: bytes, q_dtype: int, kv_dtype: int) -> int
//   _C.ascend_ifa_check_tiling(tiling: bytes) -> str | None
#include <pybind11/pybind11.h>

#include <cstring>
#include <string>

#include "ascend/incre_flash_attention/ifa_layout.h"

namespace py = pybind11;

namespace dualops {

namespace {

IncreFlashAttentionTiling TilingFrom(const py::bytes& b) {
  const std::string s = b;
  if (s.size() < sizeof(IncreFlashAttentionTiling)) {
    throw py::value_error("tiling must hold at least the " + std::to_string(IncreFlashAttentionTiling::kInts) +
                          " int32 IFA plan header fields, got " + std::to_string(s.size()) + " bytes");
  }
  IncreFlashAttentionTiling t;
  std::memcpy(&t, s.data(), sizeof(t));
  return t;
}

}  // namespace

void register_ascend_sim_incre_flash_attention(py::module_& m) {
  m.def(
      "ascend_ifa_workspace_bytes",
      [](const py::bytes& tiling, int32_t q_dtype, int32_t kv_dtype) {
        return ifa::WorkspaceBytes(TilingFrom(tiling), q_dtype, kv_dtype);
      },
      py::arg("tiling"), py::arg("q_dtype"), py::arg("kv_dtype"),
      "GM workspace bytes the Ascend IFA kernel needs for this plan (all cores).");
  m.def(
      "ascend_ifa_check_tiling",
      [](const py::bytes& tiling) -> py::object {
        const char* why = ifa::CheckTiling(TilingFrom(tiling));
        if (why == nullptr) return py::none();
        return py::str(why);
      },
      py::arg("tiling"), "None when the IFA plan header is one the Ascend kernel can run, else why not.");
}

}  // namespace dualops

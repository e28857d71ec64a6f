// pybind11 bindings of the NPU build (compiled only when CMake finds CANN): launch a CANN-built
// Ascend C kernel on a stream, and what the runtime says about the device. No torch types: the
// Python glue passes device addresses and torch_npu's current stream as integers.
//
//   _C.npu_launch(kernel: str, block_dim: int, stream: int, args: list[int]) -> None
//   _C.npu_kernels() -> list[str]
//   _C.npu_device_info() -> dict   (soc, ai_cores, vector_cores, cann_version, built_soc)
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "ascend/npu_launch.h"

#ifndef DUALOPS_NPU_SOC
#define DUALOPS_NPU_SOC "unknown"
#endif

namespace py = pybind11;

namespace dualops {

namespace {

const std::map<std::string, npu::Launcher>& Launchers() {
  static const std::map<std::string, npu::Launcher> table = {
      {"incre_flash_attention", &npu::LaunchIncreFlashAttention},
      {"mla_decode", &npu::LaunchMlaDecode},
      {"grouped_gemm", &npu::LaunchGroupedGemm},
  };
  return table;
}

void Launch(const std::string& kernel, uint32_t block_dim, uint64_t stream, const std::vector<uint64_t>& args) {
  const auto it = Launchers().find(kernel);
  if (it == Launchers().end()) throw py::value_error("npu_launch: no NPU kernel named '" + kernel + "'");
  if (block_dim == 0) throw py::value_error("npu_launch: block_dim must be positive, got 0");
  uint32_t rc = 0;
  {
    py::gil_scoped_release nogil;
    rc = it->second(block_dim, reinterpret_cast<void*>(static_cast<uintptr_t>(stream)), args);
  }
  if (rc != 0) {
    throw std::runtime_error("aclrtlaunch_" + kernel + " failed with aclError " + std::to_string(rc) +
                             " (block_dim " + std::to_string(block_dim) + ")");
  }
}

py::dict DeviceInfo() {
  py::dict d;
  d["built_soc"] = DUALOPS_NPU_SOC;
  const char* soc = aclrtGetSocName();
  d["soc"] = soc != nullptr ? py::object(py::str(soc)) : py::object(py::none());
  int32_t dev = 0;
  if (aclrtGetDevice(&dev) != ACL_SUCCESS) dev = 0;
  d["device"] = dev;
  int64_t n = 0;
  d["ai_cores"] = aclGetDeviceCapability(dev, ACL_DEVICE_INFO_AI_CORE_NUM, &n) == ACL_SUCCESS ? py::object(py::int_(n))
                                                                                            : py::object(py::none());
  n = 0;
  d["vector_cores"] = aclGetDeviceCapability(dev, ACL_DEVICE_INFO_VECTOR_CORE_NUM, &n) == ACL_SUCCESS
                          ? py::object(py::int_(n))
                          : py::object(py::none());
  aclCANNPackageVersion v{};
  d["cann_version"] = aclsysGetCANNVersion(ACL_PKG_NAME_CANN, &v) == ACL_SUCCESS ? py::object(py::str(v.version))
                                                                                  : py::object(py::none());
  return d;
}

}  // namespace

void register_npu(py::module_& m) {
  m.def("npu_launch", &Launch, py::arg("kernel"), py::arg("block_dim"), py::arg("stream"), py::arg("args"),
        "Launch a CANN-built Ascend C kernel: block_dim AI cores, on the aclrtStream `stream` (an integer "
        "handle), args = its GM_ADDR arguments as device addresses. A failed launch raises RuntimeError.");
  m.def(
      "npu_kernels",
      [] {
        std::vector<std::string> names;
        for (const auto& kv : Launchers()) names.push_back(kv.first);
        return names;
      },
      "Names of the kernels this build can launch on the NPU.");
  m.def("npu_device_info", &DeviceInfo,
        "The current NPU as the runtime reports it: soc, ai_cores, vector_cores, cann_version (None where a "
        "query fails), device, and built_soc (the SoC the kernels were compiled for).");
}

}  // namespace dualops

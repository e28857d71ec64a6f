// pybind11 bindings of the Ascend C simulator: launch a registered kernel by name on host
// buffers given as integer addresses, get per-core counters back. No torch types.
//
//   _C.ascend_sim_launch(kernel: str, num_blocks: int, args: list[int],
//                        regions: list[tuple[int, int] | tuple[int, int, str]],
//                        profile: dict) -> dict
//   _C.ascend_sim_kernels() -> list[str]
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "ascend_sim/launcher.h"
#include "ascend_sim/registry.h"

namespace py = pybind11;

namespace dualops {

void register_ascend_sim_incre_flash_attention(py::module_& m);   // incre_flash_attention/incre_flash_attention_bind.cpp
void register_ascend_sim_mla_decode(py::module_& m);              // mla_decode/mla_decode_bind.cpp
void register_ascend_sim_grouped_gemm(py::module_& m);            // grouped_gemm/grouped_gemm_bind.cpp

namespace {

ascend_sim::SimConfig ConfigFrom(const py::dict& profile) {
  ascend_sim::SimConfig c;
  auto get_u32 = [&](const char* key, uint32_t& out) {
    if (profile.contains(key)) {
      const int64_t v = profile[key].cast<int64_t>();
      if (v <= 0 || v > (int64_t(1) << 30)) {
        throw py::value_error(std::string("profile['") + key + "'] must be a positive byte count, got " + std::to_string(v));
      }
      out = static_cast<uint32_t>(v);
    }
  };
  if (profile.contains("name")) c.profile = profile["name"].cast<std::string>();
  get_u32("ub_bytes", c.ub_bytes);
  get_u32("l1_bytes", c.l1_bytes);
  get_u32("l0a_bytes", c.l0a_bytes);
  get_u32("l0b_bytes", c.l0b_bytes);
  get_u32("l0c_bytes", c.l0c_bytes);
  if (profile.contains("timeout_s")) c.timeout_s = profile["timeout_s"].cast<double>();
  if (profile.contains("max_blocks")) c.max_blocks = profile["max_blocks"].cast<int32_t>();
  if (profile.contains("vec_ulp")) c.vec_ulp = profile["vec_ulp"].cast<int32_t>();
  if (profile.contains("ai_cores")) c.ai_cores = profile["ai_cores"].cast<int32_t>();
  if (profile.contains("pipe_sync")) {
    const std::string m = profile["pipe_sync"].cast<std::string>();
    using ascend_sim::SyncMode;
    if (m == "strict") c.pipe_sync = SyncMode::kStrict;
    else if (m == "worst") c.pipe_sync = SyncMode::kWorst;
    else if (m == "worst_unchecked") c.pipe_sync = SyncMode::kWorstUnchecked;
    else if (m == "off") c.pipe_sync = SyncMode::kOff;
    else throw py::value_error("profile['pipe_sync'] must be 'strict', 'worst', 'worst_unchecked' or 'off', got '" + m + "'");
  }
  return c;
}

py::dict CountersDict(const ascend_sim::Counters& k) {
  py::dict d;
  d["cube_macs"] = k.cube_macs;
  d["cube_fp32_macs"] = k.cube_fp32_macs;
  d["cube_instrs"] = k.cube_instrs;
  d["vec_elem_ops"] = k.vec_elem_ops;
  d["vec_repeats"] = k.vec_repeats;
  d["vec_instrs"] = k.vec_instrs;
  d["gm_read_bytes"] = k.gm_read_bytes;
  d["gm_write_bytes"] = k.gm_write_bytes;
  d["local_copy_bytes"] = k.local_copy_bytes;
  d["fixpipe_bytes"] = k.fixpipe_bytes;
  d["scalar_gm_accesses"] = k.scalar_gm_accesses;
  d["cross_core_sets"] = k.cross_core_sets;
  d["cross_core_waits"] = k.cross_core_waits;
  d["sync_alls"] = k.sync_alls;
  return d;
}

py::dict Launch(const std::string& kernel, int32_t num_blocks, const std::vector<uint64_t>& args,
                const py::list& regions, const py::dict& profile) {
  std::vector<ascend_sim::GmRegion> regs;
  for (size_t i = 0; i < regions.size(); ++i) {
    py::tuple t = regions[i].cast<py::tuple>();
    if (t.size() != 2 && t.size() != 3) {
      throw py::value_error("regions[" + std::to_string(i) + "] must be (addr, nbytes) or (addr, nbytes, name)");
    }
    ascend_sim::GmRegion r;
    r.addr = t[0].cast<uint64_t>();
    r.bytes = t[1].cast<uint64_t>();
    r.name = t.size() == 3 ? t[2].cast<std::string>() : "buffer" + std::to_string(i);
    regs.push_back(r);
  }
  const ascend_sim::SimConfig cfg = ConfigFrom(profile);
  ascend_sim::LaunchReport rep;
  {
    py::gil_scoped_release nogil;
    rep = ascend_sim::Launch(kernel, num_blocks, args, regs, cfg);
  }
  py::dict out;
  out["kernel"] = rep.kernel;
  out["num_blocks"] = rep.num_blocks;
  out["task_type"] = rep.task_type;
  out["profile"] = cfg.profile;
  out["wall_s"] = rep.wall_s;
  py::list cores;
  for (const auto& c : rep.cores) {
    py::dict d = CountersDict(c.counters);
    d["name"] = c.name;
    d["kind"] = c.kind == 1 ? "AIC" : "AIV";
    d["block"] = c.block;
    d["sub"] = c.sub;
    cores.append(d);
  }
  out["cores"] = cores;
  py::list rl;
  for (size_t i = 0; i < rep.regions.size(); ++i) {
    py::dict d;
    d["name"] = rep.regions[i].name;
    d["addr"] = rep.regions[i].addr;
    d["bytes"] = rep.regions[i].bytes;
    d["read"] = rep.region_read[i];
    d["write"] = rep.region_write[i];
    rl.append(d);
  }
  out["regions"] = rl;
  return out;
}

}  // namespace

void register_ascend_sim(py::module_& m) {
  m.def("ascend_sim_launch", &Launch, py::arg("kernel"), py::arg("num_blocks"), py::arg("args"),
        py::arg("regions"), py::arg("profile") = py::dict(),
        "Run a registered Ascend C kernel on the CPU simulator of an Atlas A2 AI core. args: GM "
        "addresses in kernel-argument order; regions: every GM buffer the kernel may touch as "
        "(addr, nbytes[, name]); profile: capacities (ub_bytes, l1_bytes, l0a_bytes, l0b_bytes, "
        "l0c_bytes), name, timeout_s. Returns per-core counters. A kernel fault raises RuntimeError.");
  m.def("ascend_sim_kernels", &ascend_sim::KernelNames, "Names of the kernels registered with the simulator.");
  register_ascend_sim_incre_flash_attention(m);
  register_ascend_sim_mla_decode(m);
  register_ascend_sim_grouped_gemm(m);
}

}  // namespace dualops

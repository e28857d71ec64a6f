// Host side of the simulator: run a registered kernel on N simulated AI cores (MIX 1:2 -> N cube
// threads + 2N vector threads) over host memory, with the GM buffers the kernel may touch, and
// return per-core counters. A fault on any core aborts the launch and is thrown as SimFault.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime.h"

namespace ascend_sim {

struct GmRegion {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  std::string name;
};

// Capacities and limits of the simulated chip (defaults: Atlas A2 / 910B).
struct SimConfig {
  std::string profile = "ascend910b2";
  uint32_t ub_bytes = 196608;
  uint32_t l1_bytes = 524288;
  uint32_t l0a_bytes = 65536;
  uint32_t l0b_bytes = 65536;
  uint32_t l0c_bytes = 131072;
  double timeout_s = 60.0;   // a blocked cross-core wait fails after this long
  int32_t max_blocks = 64;   // refuse launches that would spawn absurd thread counts
  int32_t ai_cores = 0;      // physical AI cores of the chip (0: unknown); SyncAll needs every block resident
  SyncMode pipe_sync = SyncMode::kStrict;   // asynchronous-pipe model (pipes.h)
  int32_t vec_ulp = 0;       // 0: fp32 libm for Exp / Ln / Div / Sqrt / Reciprocal; n: +-n ulp (hardware-like)
};

struct CoreReport {
  std::string name;
  int32_t kind = 0;   // AscendC::AIC / AscendC::AIV
  int32_t block = 0;
  int32_t sub = 0;
  Counters counters;
};

struct LaunchReport {
  std::string kernel;
  int32_t num_blocks = 0;
  int32_t task_type = 0;
  std::vector<CoreReport> cores;
  std::vector<GmRegion> regions;
  std::vector<uint64_t> region_read, region_write;
  double wall_s = 0.0;
};

// Throws std::invalid_argument for a bad request (unknown kernel, wrong argument count,
// overlapping regions...) and SimFault when the kernel faults.
LaunchReport Launch(const std::string& kernel, int32_t num_blocks, const std::vector<uint64_t>& args,
                    const std::vector<GmRegion>& regions, const SimConfig& cfg);

}  // namespace ascend_sim

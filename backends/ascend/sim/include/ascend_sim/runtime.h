// The simulated core a kernel thread runs on: its kind (AIC / AIV), its on-chip memories with
// the profile's capacities, its counters, and the fault path. Every API call goes through
// Enter() (stops this core when another one faulted) and reports misuse with Fault(), which
// names the kernel, the core and the call.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <stdexcept>
#include <system_error>
#include <string>
#include <vector>

#include "base_types.h"
#include "pipes.h"

namespace ascend_sim {

enum class CoreKind : int32_t { AIC = AscendC::AIC, AIV = AscendC::AIV };

// Physical buffers. UB belongs to a vector core; L1 / L0A / L0B / L0C to a cube core.
enum class Mem : int32_t { NONE = 0, UB, L1, L0A, L0B, L0C, COUNT };
const char* MemName(Mem m);
uint32_t MemAlign(Mem m);   // start-address alignment the hardware requires (bytes)

// A fault: a kernel bug the NPU would crash / hang / corrupt on. Carries the full message.
struct SimFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Thrown on every other core after one faulted, to unwind it quickly (not an error itself).
struct SimAbort {};

struct Counters {
  uint64_t cube_macs = 0;        // multiply-accumulates issued by Mmad (whole fractals)
  uint64_t cube_fp32_macs = 0;   // of which fp32 inputs (quarter rate on the cube)
  uint64_t cube_instrs = 0;
  uint64_t vec_elem_ops = 0;     // elements processed by vector instructions
  uint64_t vec_repeats = 0;      // 256-B vector repeats, weighted by instruction cost
  uint64_t vec_instrs = 0;
  uint64_t gm_read_bytes = 0;    // GM -> on-chip (MTE2) and scalar GM reads
  uint64_t gm_write_bytes = 0;   // on-chip -> GM (MTE3 / FIXPIPE) and scalar GM writes
  uint64_t local_copy_bytes = 0; // on-chip moves: L1 -> L0 (MTE1), UB -> UB
  uint64_t fixpipe_bytes = 0;    // L0C -> GM
  uint64_t scalar_gm_accesses = 0;
  uint64_t cross_core_sets = 0;
  uint64_t cross_core_waits = 0;
  uint64_t sync_alls = 0;
};

class LaunchState;

struct CoreContext {
  LaunchState* launch = nullptr;
  const std::atomic<bool>* aborted = nullptr;
  CoreKind kind = CoreKind::AIV;
  int32_t block = 0;     // AI core index
  int32_t sub = 0;       // vector core within the AI core (0/1), 0 on AIC
  int32_t linear = 0;    // index among all cores of the launch
  int32_t kernel_type = 0;
  std::string name;      // "AIC0", "AIV3"
  uint8_t* mem[static_cast<int>(Mem::COUNT)] = {};
  uint32_t cap[static_cast<int>(Mem::COUNT)] = {};
  uint32_t top[static_cast<int>(Mem::COUNT)] = {};   // TPipe allocation watermark per buffer
  void* pipe = nullptr;                               // the live TPipe, if any
  uint16_t events[64][8] = {};                        // SetFlag counts per (HardEvent, id)
  bool task_type_checked = false;
  Counters c;
  std::vector<uint64_t> region_read, region_write;   // GM bytes per registered region
  PipeState pipes;                                    // asynchronous pipes (pipes.h)
  int32_t vec_ulp = 0;   // hardware-like numerics: Exp / Ln / Div / Sqrt / Reciprocal off by up to this many ulp
};

// The calling thread's core. Fails clearly when an AscendC call runs outside a launch.
CoreContext& Cur();
CoreContext* CurOrNull();   // never throws (destructors)

inline void Enter() {
  CoreContext& c = Cur();
  if (c.aborted->load(std::memory_order_relaxed)) throw SimAbort{};
}

[[noreturn]] void Fault(const char* api, const std::string& what);

// The data effect of the instruction PipeOp just issued: runs now, or, in the worst-order modes,
// when a drain reaches it (pipes.h). `f` captures by value; it runs on this core's thread.
template <typename F>
void Exec(F&& f) {
  PipeState& ps = Cur().pipes;
  if (ps.open < 0) {
    f();
    return;
  }
  ps.pend[ps.open].back().body = std::function<void()>(std::forward<F>(f));
  ps.open = -1;
}

// Checks that [p, p + bytes) lies inside one GM buffer registered for this launch, counts the
// bytes, or faults naming the address, the size and the nearest buffer.
void GmAccess(const char* api, const void* p, uint64_t bytes, bool write);

// Message formatting without iostreams: a Python process may hold two copies of libstdc++
// (ours, and the one torch loaded), and their locale registries clash inside std::ostream —
// seen as a crash in operator<<(long) with GCC 13 on the GPU machine.
inline void StrAppend(std::string& s, const std::string& v) { s += v; }
inline void StrAppend(std::string& s, const char* v) { s += v ? v : "(null)"; }
inline void StrAppend(std::string& s, char v) { s += v; }
inline void StrAppend(std::string& s, bool v) { s += v ? "true" : "false"; }
inline void StrAppend(std::string& s, const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  s += buf;
}
template <typename T>
std::enable_if_t<std::is_integral_v<T> || std::is_enum_v<T>> StrAppend(std::string& s, T v) {
  if constexpr (std::is_enum_v<T>) {
    s += std::to_string(static_cast<std::underlying_type_t<T>>(v));
  } else {
    s += std::to_string(v);
  }
}
template <typename T>
std::enable_if_t<std::is_floating_point_v<T>> StrAppend(std::string& s, T v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  s += buf;
}

inline std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

template <typename... Args>
std::string Str(const Args&... args) {
  std::string s;
  (StrAppend(s, args), ...);
  return s;
}

const char* PositionName(AscendC::TPosition p);
Mem PositionMem(AscendC::TPosition p);   // which physical buffer a logical position lives in

// Vector cost weights (repeats of 256 B per instruction), see docs/ascend_sim.md.
inline void CountVector(uint64_t elems, uint32_t widest_elem_bytes, uint32_t weight = 1) {
  CoreContext& c = Cur();
  c.c.vec_instrs += 1;
  c.c.vec_elem_ops += elems;
  c.c.vec_repeats += weight * ((elems * widest_elem_bytes + 255) / 256);
}

}  // namespace ascend_sim

// Core context, fault reporting and GM bounds checks of the simulator.
#include <algorithm>
#include <stdexcept>

#include "ascend_sim/tensor.h"
#include "ascend_sim/vector_ops.h"
#include "launch_state.h"

namespace ascend_sim {

thread_local CoreContext* tls_core = nullptr;

void SetCurrentCore(CoreContext* c) { tls_core = c; }
CoreContext* CurOrNull() { return tls_core; }

CoreContext& Cur() {
  if (tls_core == nullptr) {
    throw std::logic_error("ascend_sim: an AscendC API was called outside a simulator launch");
  }
  return *tls_core;
}

static std::string CoreLabel(const CoreContext& c) {
  if (c.kind == CoreKind::AIC) return Str(c.name, " (cube core of AI core ", c.block, ")");
  return Str(c.name, " (vector core ", c.sub, " of AI core ", c.block, ")");
}

void Fault(const char* api, const std::string& what) {
  const CoreContext& c = Cur();
  const std::string kernel = c.launch ? c.launch->kernel : std::string("?");
  throw SimFault(Str("ascend_sim: kernel '", kernel, "' on ", CoreLabel(c), ": ", api, ": ", what));
}

const char* MemName(Mem m) {
  switch (m) {
    case Mem::UB: return "UB";
    case Mem::L1: return "L1";
    case Mem::L0A: return "L0A";
    case Mem::L0B: return "L0B";
    case Mem::L0C: return "L0C";
    default: return "no buffer";
  }
}

uint32_t MemAlign(Mem m) {
  switch (m) {
    case Mem::L0A:
    case Mem::L0B: return 512;
    case Mem::L0C: return 64;
    default: return 32;
  }
}

const char* PositionName(AscendC::TPosition p) {
  using AscendC::TPosition;
  switch (p) {
    case TPosition::GM: return "GM";
    case TPosition::A1: return "A1";
    case TPosition::A2: return "A2";
    case TPosition::B1: return "B1";
    case TPosition::B2: return "B2";
    case TPosition::C1: return "C1";
    case TPosition::C2: return "C2";
    case TPosition::CO1: return "CO1";
    case TPosition::CO2: return "CO2";
    case TPosition::VECIN: return "VECIN";
    case TPosition::VECOUT: return "VECOUT";
    case TPosition::VECCALC: return "VECCALC";
    case TPosition::TSCM: return "TSCM";
    default: return "?";
  }
}

Mem PositionMem(AscendC::TPosition p) {
  using AscendC::TPosition;
  switch (p) {
    case TPosition::A1:
    case TPosition::B1:
    case TPosition::C1:
    case TPosition::TSCM: return Mem::L1;
    case TPosition::A2: return Mem::L0A;
    case TPosition::B2: return Mem::L0B;
    case TPosition::CO1: return Mem::L0C;
    case TPosition::VECIN:
    case TPosition::VECOUT:
    case TPosition::VECCALC: return Mem::UB;
    default: return Mem::NONE;
  }
}

Rounding ToRounding(AscendC::RoundMode m) {
  using AscendC::RoundMode;
  switch (m) {
    case RoundMode::CAST_FLOOR: return Rounding::kFloor;
    case RoundMode::CAST_CEIL: return Rounding::kCeil;
    case RoundMode::CAST_ROUND: return Rounding::kNearestAway;
    case RoundMode::CAST_TRUNC: return Rounding::kTrunc;
    case RoundMode::CAST_ODD: return Rounding::kOdd;
    default: return Rounding::kNearestEven;   // CAST_NONE (lossy) and CAST_RINT
  }
}

void GmAccess(const char* api, const void* p, uint64_t bytes, bool write) {
  CoreContext& c = Cur();
  const auto& regions = c.launch->regions;
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  // Last region starting at or before a.
  auto it = std::upper_bound(regions.begin(), regions.end(), a,
                             [](uint64_t x, const GmRegion& r) { return x < r.addr; });
  if (it != regions.begin()) {
    const GmRegion& r = *(it - 1);
    if (a >= r.addr && a + bytes <= r.addr + r.bytes) {
      const size_t idx = static_cast<size_t>((it - 1) - regions.begin());
      if (write) {
        c.c.gm_write_bytes += bytes;
        c.region_write[idx] += bytes;
      } else {
        c.c.gm_read_bytes += bytes;
        c.region_read[idx] += bytes;
      }
      return;
    }
    if (a >= r.addr && a < r.addr + r.bytes) {
      Fault(api, Str(write ? "writes" : "reads", " GM bytes [", Hex(a), ", ", Hex(a + bytes), ") running ",
                     a + bytes - (r.addr + r.bytes), " bytes past the end of buffer '", r.name, "' (", r.bytes,
                     " bytes at ", Hex(r.addr), ")"));
    }
  }
  std::string near;
  if (it != regions.end()) near = Str("; the next buffer '", it->name, "' starts at ", Hex(it->addr));
  if (it != regions.begin()) {
    const GmRegion& r = *(it - 1);
    near += Str("; buffer '", r.name, "' ends at ", Hex(r.addr + r.bytes));
  }
  Fault(api, Str(write ? "writes" : "reads", " ", bytes, " GM bytes at ", Hex(a),
                 ", outside every buffer of this launch", near));
}

}  // namespace ascend_sim

// Asynchronous pipes: the ordering model of one AI core's MTE1 / MTE2 / MTE3 / M / V / FIX / S
// pipes and the hazard check built on it (docs/ascend_sim.md "Pipes").
//
// Every instruction is issued in program order onto its pipe and gets a sequence number there.
// Pipes complete independently: an instruction of pipe P is ordered after an earlier one of pipe
// Q only through SetFlag<Q_P> / WaitFlag<Q_P>, PipeBarrier, queue EnQue / DeQue (AllocTensor /
// FreeTensor), a WaitFlag towards PIPE_S (the scalar unit stalls, so everything issued after it
// is ordered), cross-core flags and SyncAll. Same-pipe instructions are in order, except on
// PIPE_V, where a dependent instruction needs PipeBarrier<PIPE_V>. Each pipe keeps a vector
// clock (the last sequence number of every pipe it is known to run after); every on-chip buffer
// keeps an interval map of the last writer and the readers since, per byte range. An access that
// conflicts with one it is not ordered after faults, naming both pipes and both call sites. The
// check is order-independent: it fires whenever *some* legal completion order would race, so a
// missing sync fails deterministically, whatever order the threads happen to run in.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "base_types.h"

namespace ascend_sim {

// Where an API was called from (captured with __builtin_FILE / __builtin_LINE default arguments).
struct Loc {
  const char* file = nullptr;
  int line = 0;
  static constexpr Loc Here(const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return Loc{f, l}; }
};

enum PipeIdx : int8_t { kPS = 0, kPV, kPM, kPMte1, kPMte2, kPMte3, kPFix, kNumPipes };
PipeIdx PipeIndex(pipe_t p);
const char* PipeIdxName(int p);

struct Site {
  const char* api = nullptr;
  Loc loc;
};
struct Access {
  uint64_t seq = 0;   // 0: none
  Site site;
};

// Knowledge of one pipe: the last sequence number of each pipe it is ordered after.
struct Snap {
  uint64_t s[kNumPipes] = {};
  void Merge(const Snap& o) {
    for (int i = 0; i < kNumPipes; ++i) s[i] = s[i] > o.s[i] ? s[i] : o.s[i];
  }
};

// One byte range of a buffer: its last writer and the last reader per pipe since.
struct HazSeg {
  uint32_t end = 0;
  int8_t wpipe = -1;
  Access w;
  Access r[kNumPipes];
};

// kOff: program order, no checks. kStrict: program order, hazard checks. kWorst: hazard checks,
// and every data effect deferred to the worst legal order (sim_worst.cpp). kWorstUnchecked: the
// worst order without the checks, so a missing sync shows as a wrong result instead of a fault.
enum class SyncMode : int32_t { kOff = 0, kStrict = 1, kWorst = 2, kWorstUnchecked = 3 };

// A local byte range an instruction touches (bounding range for strided forms).
struct Range {
  int mem;
  uint32_t lo, hi;
};

// One issued instruction whose data effect has not happened yet (worst-order modes).
struct Pending {
  int8_t pipe = 0;
  bool done = false;
  uint64_t seq = 0;              // on its pipe
  uint64_t gidx = 0;             // issue order across the core's pipes
  Snap need;                     // what it is ordered after (its pipe's clock at issue)
  std::vector<uint64_t> vpred;   // PIPE_V: earlier vector instructions it conflicts with WAR / WAW
  std::vector<Range> rd, wr;     // on-chip bytes read / written (bounding ranges)
  std::vector<std::pair<uint64_t, uint64_t>> grd, gwr;   // GM bytes read / written (bounding ranges)
  std::function<void()> body;      // the data effect
  // Drain scratch: the unordered instructions it conflicts with; how many of them, issued
  // earlier / later, are still queued.
  std::vector<Pending*> partners;
  int earlier = 0, later = 0;
};

// Per-core pipe state.
struct PipeState {
  SyncMode mode = SyncMode::kStrict;
  uint64_t issued[kNumPipes] = {};
  Snap seen[kNumPipes];                               // what each pipe is ordered after
  std::map<uint32_t, HazSeg> mem[8];                  // per Mem: start -> segment
  Snap events[64][8];                                 // SetFlag snapshots per (HardEvent, id)
  std::vector<uint64_t> xseen;                        // cross-core knowledge: [core * kNumPipes + pipe]
  std::deque<Pending> pend[kNumPipes];                // worst-order modes: issued, not yet executed
  uint64_t gidx = 0;
  int open = -1;                                      // pipe whose last Pending awaits its body (Exec)
  bool Checks() const { return mode == SyncMode::kStrict || mode == SyncMode::kWorst; }
  bool Deferring() const { return mode == SyncMode::kWorst || mode == SyncMode::kWorstUnchecked; }
};

// Checks then records one instruction on `pipe` reading `reads` and writing `writes`.
void PipeOp(const char* api, const Loc& loc, PipeIdx pipe, std::initializer_list<Range> reads,
            std::initializer_list<Range> writes);
// GM side (cross-core and same-core RAW / WAW through GM): byte range [addr, addr + bytes).
// `count` blocks of `len` bytes, `pitch` bytes apart, starting at addr (exact ranges: strided
// copies of different cores into one tensor do not overlap).
void PipeGm(const char* api, const Loc& loc, PipeIdx pipe, uint64_t addr, uint64_t count, uint64_t len, uint64_t pitch,
            bool write);
Snap SnapOf(PipeIdx p);                  // what an event set on p now carries
void Absorb(PipeIdx p, const Snap& s);   // ordered after s (p == kPS: every pipe)
void BarrierPipe(pipe_t p);              // PipeBarrier<p>
bool PipesOn();
// Cross-core knowledge this core hands over with a flag set on `p` (xseen plus its own pipes).
std::vector<uint64_t> CrossSnap(pipe_t p);
// Takes cross-core knowledge at a wait on `wait_pipe`: GM writes of other cores, and this core's
// own pipes as far as the chain of flags proves them complete.
void CrossAbsorb(const std::vector<uint64_t>& v, pipe_t wait_pipe);
void MergeInto(std::vector<uint64_t>& dst, const std::vector<uint64_t>& src);

// Worst-order modes (sim_worst.cpp). Record: PipeOp's hook, queues the instruction just issued
// (a scalar load runs at once). Drain: executes the pending instructions `req` needs (for each
// pipe, those up to req.s[pipe], and everything they are ordered after), latest-issued first
// wherever the ordering allows. ScalarSync: what a scalar access must see. DrainAll: everything.
void Record(PipeState& ps, PipeIdx pipe, uint64_t seq, std::initializer_list<Range> reads,
            std::initializer_list<Range> writes);
void Drain(PipeState& ps, Snap req);
void ScalarSync();
void DrainFor(pipe_t p);   // before a cross-core set on p: what the set publishes
void DrainAll();

}  // namespace ascend_sim

// The location argument every AscendC call of the simulator takes last (defaulted).
#define ASIM_LOC ::ascend_sim::Loc asim_loc = ::ascend_sim::Loc::Here()

// Worst-order execution (pipe_sync "worst" / "worst_unchecked", docs/ascend_sim.md "Modes").
//
// Every instruction of PIPE_MTE1 / MTE2 / MTE3 / M / V / FIX and every scalar store is queued
// with what it is ordered after (its pipe's vector clock at issue, pipes.h) instead of running.
// Queued work runs only when something needs it: a scalar load or GM scalar access (what
// PIPE_S is ordered after), a cross-core set (what the flag publishes), SyncAll and the end of
// the kernel (everything). A drain runs exactly the instructions needed and those they are
// ordered after, and among the ready ones always the one issued last. So every instruction
// runs as late as the orderings allow, and two conflicting instructions with no ordering between
// them run in reverse program order: a consumer without its sync reads what was there before
// the producer, a producer without its WAR sync overwrites data its reader has not read yet, and
// the earlier of two unordered writes lands last. Everything is a function of the program, so
// the result is deterministic.
#include "ascend_sim/pipes.h"

#include <limits>

#include "launch_state.h"

namespace ascend_sim {

namespace {

bool Overlap(const std::vector<Range>& a, const std::vector<Range>& b) {
  for (const Range& x : a)
    for (const Range& y : b)
      if (x.mem == y.mem && x.lo < y.hi && y.lo < x.hi && x.lo < x.hi && y.lo < y.hi) return true;
  return false;
}

// Fronts of the queues are never done (done fronts are popped), so the first pending sequence
// number of a pipe is its front's.
uint64_t MinPending(const PipeState& ps, int q) {
  return ps.pend[q].empty() ? std::numeric_limits<uint64_t>::max() : ps.pend[q].front().seq;
}

bool VDone(const PipeState& ps, uint64_t seq) {
  const auto& d = ps.pend[kPV];
  if (d.empty() || seq < d.front().seq) return true;
  return d[seq - d.front().seq].done;
}

// Everything `b` is ordered after has run (on an in-order pipe, b is its queue's front).
bool Ready(const PipeState& ps, const Pending& b) {
  for (int q = 0; q < kNumPipes; ++q) {
    if (q == b.pipe && q != kPV) continue;
    if (MinPending(ps, q) <= b.need.s[q]) return false;
  }
  for (uint64_t s : b.vpred)
    if (!VDone(ps, s)) return false;
  return true;
}

void PopDone(std::deque<Pending>& d) {
  while (!d.empty() && d.front().done) d.pop_front();
}

}  // namespace

void Record(PipeState& ps, PipeIdx pipe, uint64_t seq, std::initializer_list<Range> reads,
            std::initializer_list<Range> writes) {
  if (pipe == kPS && writes.size() == 0) return;   // a scalar load: its value is used at once
  Pending e;
  e.pipe = pipe;
  e.seq = seq;
  e.gidx = ++ps.gidx;
  e.need = ps.seen[pipe];
  if (pipe == kPV) {
    e.rd.assign(reads.begin(), reads.end());
    e.wr.assign(writes.begin(), writes.end());
    // Vector instructions retire in order: WAR / WAW with an earlier one not behind a
    // PipeBarrier<PIPE_V> keep their order (only RAW needs the barrier).
    auto& d = ps.pend[kPV];
    for (auto it = d.rbegin(); it != d.rend() && it->seq > e.need.s[kPV]; ++it) {
      if (!it->done && (Overlap(it->wr, e.wr) || Overlap(it->rd, e.wr))) e.vpred.push_back(it->seq);
    }
  }
  ps.pend[pipe].push_back(std::move(e));
  ps.open = pipe;
}

void Drain(PipeState& ps, Snap req) {
  // The closure: what req needs and, transitively, what that is ordered after.
  size_t scanned[kNumPipes] = {};
  for (bool changed = true; changed;) {
    changed = false;
    for (int q = 0; q < kNumPipes; ++q) {
      const auto& d = ps.pend[q];
      while (scanned[q] < d.size() && d[scanned[q]].seq <= req.s[q]) {
        const Pending& e = d[scanned[q]++];
        if (e.done) continue;
        for (int i = 0; i < kNumPipes; ++i) {
          if (e.need.s[i] > req.s[i]) req.s[i] = e.need.s[i], changed = true;
        }
        for (uint64_t s : e.vpred)
          if (s > req.s[kPV]) req.s[kPV] = s, changed = true;
      }
    }
  }
  // Run it, always the latest-issued ready instruction first.
  for (;;) {
    Pending* best = nullptr;
    for (int q = 0; q < kNumPipes; ++q) {
      auto& d = ps.pend[q];
      if (d.empty() || d.front().seq > req.s[q]) continue;
      if (q != kPV) {
        if ((!best || d.front().gidx > best->gidx) && Ready(ps, d.front())) best = &d.front();
        continue;
      }
      // Vector candidates: the instructions since the oldest pending one's barrier epoch.
      const uint64_t front = d.front().seq;
      for (auto& e : d) {
        if (e.seq > req.s[q] || e.need.s[kPV] >= front) break;
        if (!e.done && (!best || e.gidx > best->gidx) && Ready(ps, e)) best = &e;
      }
    }
    if (best == nullptr) break;
    best->done = true;
    std::function<void()> body = std::move(best->body);
    PopDone(ps.pend[best->pipe]);
    if (body) body();
  }
  for (int q = 0; q < kNumPipes; ++q) {
    if (!ps.pend[q].empty() && ps.pend[q].front().seq <= req.s[q]) {
      Fault("ascend_sim", Str("internal: worst-order drain stalled on ", PipeIdxName(q)));
    }
  }
}

void ScalarSync() {
  CoreContext* c = CurOrNull();
  if (c == nullptr || !c->pipes.Deferring()) return;
  Drain(c->pipes, SnapOf(kPS));
}

void DrainFor(pipe_t p) {
  PipeState& ps = Cur().pipes;
  if (!ps.Deferring()) return;
  if (p == PIPE_ALL) {
    DrainAll();
    return;
  }
  Drain(ps, SnapOf(PipeIndex(p)));
}

void DrainAll() {
  PipeState& ps = Cur().pipes;
  if (!ps.Deferring()) return;
  Snap all;
  for (int i = 0; i < kNumPipes; ++i) all.s[i] = ps.issued[i];
  Drain(ps, all);
}

}  // namespace ascend_sim

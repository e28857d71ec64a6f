// Worst-order execution (pipe_sync "worst" / "worst_unchecked", docs/ascend_sim.md "Modes").
//
// Every instruction of PIPE_MTE1 / MTE2 / MTE3 / M / V / FIX and every scalar store is queued
// with what it is ordered after (its pipe's vector clock at issue, pipes.h) instead of running.
// Queued work runs only when something needs it: a scalar load or GM scalar access (what
// PIPE_S is ordered after), a cross-core set (what the flag publishes), SyncAll and the end of
// the kernel (everything). A drain runs exactly the instructions needed and those they are
// ordered after, scheduled backwards: the last to run is, of those nothing left depends on, the
// one issued first. So every instruction runs as late as the orderings allow, earlier-issued
// work later: a consumer without its sync reads what was there before the producer, a producer
// without its WAR sync overwrites data its reader has not read yet, and the earlier of two
// unordered writes lands last. Everything is a function of the program, so the result is
// deterministic.
#include "ascend_sim/pipes.h"

#include <limits>
#include <map>
#include <set>

#include "launch_state.h"

namespace ascend_sim {

namespace {

bool Overlap(const std::vector<Range>& a, const std::vector<Range>& b) {
  for (const Range& x : a)
    for (const Range& y : b)
      if (x.mem == y.mem && x.lo < y.hi && y.lo < x.hi && x.lo < x.hi && y.lo < y.hi) return true;
  return false;
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
  // Schedule it backwards: the last to run is, among the instructions nothing left depends on,
  // the one issued first. Every instruction thus runs as late as the orderings allow.
  std::vector<Pending*> list[kNumPipes];
  std::multiset<uint64_t> needs[kNumPipes];   // need.s[q] of what is left (q's own in-order pipe aside)
  std::map<uint64_t, int> vref;               // PIPE_V seq -> how many left name it in vpred
  size_t left = 0;
  for (int q = 0; q < kNumPipes; ++q) {
    for (Pending& e : ps.pend[q]) {
      if (e.seq > req.s[q]) break;
      if (e.done) continue;
      list[q].push_back(&e);
      ++left;
      for (int i = 0; i < kNumPipes; ++i)
        if (i != q || q == kPV) needs[i].insert(e.need.s[i]);
      for (uint64_t v : e.vpred) ++vref[v];
    }
  }
  std::vector<Pending*> order;
  order.reserve(left);
  std::vector<bool> placed_v(list[kPV].size(), false);
  for (; left > 0; --left) {
    Pending* best = nullptr;
    size_t best_vi = 0;
    for (int q = 0; q < kNumPipes; ++q) {
      const uint64_t most = needs[q].empty() ? 0 : *needs[q].rbegin();
      if (q != kPV) {
        if (list[q].empty()) continue;
        Pending* e = list[q].back();
        if (e->seq > most && (!best || e->gidx < best->gidx)) best = e;
        continue;
      }
      for (size_t k = list[q].size(); k-- > 0;) {
        Pending* e = list[q][k];
        if (e->seq <= most) break;
        if (placed_v[k] || vref[e->seq] > 0) continue;
        if (!best || e->gidx < best->gidx) best = e, best_vi = k;
      }
    }
    if (best == nullptr) Fault("ascend_sim", "internal: worst-order schedule found no instruction to place");
    const int q = best->pipe;
    if (q != kPV) list[q].pop_back();
    else placed_v[best_vi] = true;
    for (int i = 0; i < kNumPipes; ++i)
      if (i != q || q == kPV) needs[i].erase(needs[i].find(best->need.s[i]));
    for (uint64_t v : best->vpred) --vref[v];
    order.push_back(best);
  }
  for (size_t k = order.size(); k-- > 0;) {
    Pending* e = order[k];
    e->done = true;
    std::function<void()> body = std::move(e->body);
    if (body) body();
  }
  for (auto& d : ps.pend) PopDone(d);
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

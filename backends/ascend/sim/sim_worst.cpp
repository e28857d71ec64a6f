// Worst-order execution (pipe_sync "worst" / "worst_unchecked", docs/ascend_sim.md "Modes").
//
// Every instruction of PIPE_MTE1 / MTE2 / MTE3 / M / V / FIX and every scalar store is queued
// with what it is ordered after (its pipe's vector clock at issue, pipes.h) and the bytes it
// reads and writes, instead of running. Queued work runs only when something needs it: a scalar
// load or GM scalar access (what PIPE_S is ordered after), a cross-core set (what the flag
// publishes), SyncAll and the end of the kernel (everything). A drain runs exactly the
// instructions needed and those they are ordered after; everything else stays queued, so it
// runs as late as the orderings allow. Within a drain, two instructions that touch the same
// bytes (one writing) with no ordering between them run in reverse program order whenever the
// orderings allow it: an instruction whose earlier conflicting partner is still queued runs as
// soon as it is ready, one whose later partner is still queued waits as long as anything else
// can run. So a consumer without its sync reads what was there before its producer wrote, a
// producer without its WAR sync overwrites what its reader has not read yet, and the earlier of
// two unordered writes lands last. The schedule is a function of the program alone: the result
// is deterministic.
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

bool GmOverlap(const std::vector<std::pair<uint64_t, uint64_t>>& a, const std::vector<std::pair<uint64_t, uint64_t>>& b) {
  for (auto& x : a)
    for (auto& y : b)
      if (x.first < y.second && y.first < x.second) return true;
  return false;
}

bool Conflict(const Pending& a, const Pending& b) {
  return Overlap(a.wr, b.wr) || Overlap(a.wr, b.rd) || Overlap(a.rd, b.wr) || GmOverlap(a.gwr, b.gwr) ||
         GmOverlap(a.gwr, b.grd) || GmOverlap(a.grd, b.gwr);
}

// During a drain, executed instructions stay queued (done) until it ends, so that pointers to
// them stay valid; head[q] is the first one of pipe q not done.
struct Heads {
  size_t h[kNumPipes] = {};
};

Pending* First(PipeState& ps, Heads& hd, int q) {
  auto& d = ps.pend[q];
  while (hd.h[q] < d.size() && d[hd.h[q]].done) ++hd.h[q];
  return hd.h[q] < d.size() ? &d[hd.h[q]] : nullptr;
}

uint64_t MinPending(PipeState& ps, Heads& hd, int q) {
  const Pending* e = First(ps, hd, q);
  return e ? e->seq : std::numeric_limits<uint64_t>::max();
}

bool VDone(PipeState& ps, uint64_t seq) {
  const auto& d = ps.pend[kPV];
  if (d.empty() || seq < d.front().seq) return true;
  return d[seq - d.front().seq].done;
}

// Everything `b` is ordered after has run (on an in-order pipe, b is its queue's front).
bool Ready(PipeState& ps, Heads& hd, const Pending& b) {
  for (int q = 0; q < kNumPipes; ++q) {
    if (q == b.pipe && q != kPV) continue;
    if (MinPending(ps, hd, q) <= b.need.s[q]) return false;
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
  if (ps.open >= 0) {
    Fault("ascend_sim", Str("internal: the last ", PipeIdxName(ps.open), " instruction queued no data effect (Exec)"));
  }
  Pending e;
  e.pipe = pipe;
  e.seq = seq;
  e.gidx = ++ps.gidx;
  e.need = ps.seen[pipe];
  e.rd.assign(reads.begin(), reads.end());
  e.wr.assign(writes.begin(), writes.end());
  if (pipe == kPV) {
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
  // The closure, and its conflicting pairs with no ordering between them: for each instruction
  // b, the instructions a issued before it on another pipe that b is not ordered after (on
  // PIPE_V: those past b's barrier that b does not follow WAR / WAW).
  std::vector<Pending*> list[kNumPipes];
  for (int q = 0; q < kNumPipes; ++q)
    for (Pending& e : ps.pend[q]) {
      if (e.seq > req.s[q]) break;
      if (e.done) continue;
      e.partners.clear();
      e.earlier = e.later = 0;
      list[q].push_back(&e);
    }
  for (int bq = 0; bq < kNumPipes; ++bq)
    for (Pending* b : list[bq])
      for (int q = 0; q < kNumPipes; ++q) {
        if (q == bq && q != kPV) continue;
        for (Pending* a : list[q]) {
          if (a->gidx >= b->gidx) break;
          if (a->seq <= b->need.s[q]) continue;
          bool follows = false;
          for (uint64_t v : b->vpred) follows = follows || (q == kPV && v == a->seq);
          if (follows || !Conflict(*a, *b)) continue;
          a->partners.push_back(b);
          b->partners.push_back(a);
          ++a->later, ++b->earlier;
        }
      }
  // Run it: first whatever reverses a conflicting pair, then what conflicts with nothing queued
  // (in program order), last what would run a pair in program order (latest first).
  Heads hd;
  for (;;) {
    Pending* best = nullptr;
    int best_cls = 3;
    auto consider = [&](Pending* e) {
      const int cls = e->earlier > 0 ? 0 : (e->later > 0 ? 2 : 1);
      if (cls > best_cls) return;
      if (best && cls == best_cls && (cls == 1 ? e->gidx > best->gidx : e->gidx < best->gidx)) return;
      if (!Ready(ps, hd, *e)) return;
      best = e, best_cls = cls;
    };
    for (int q = 0; q < kNumPipes; ++q) {
      Pending* f = First(ps, hd, q);
      if (f == nullptr || f->seq > req.s[q]) continue;
      if (q != kPV) {
        consider(f);
        continue;
      }
      const uint64_t front = f->seq;   // vector candidates: the oldest pending epoch
      auto& d = ps.pend[q];
      for (size_t k = hd.h[q]; k < d.size(); ++k) {
        Pending& e = d[k];
        if (e.seq > req.s[q] || e.need.s[kPV] >= front) break;
        if (!e.done) consider(&e);
      }
    }
    if (best == nullptr) break;
    best->done = true;
    for (Pending* p : best->partners) {
      if (p->gidx > best->gidx) --p->earlier;
      else --p->later;
    }
    std::function<void()> body = std::move(best->body);
    if (body) body();
  }
  for (auto& d : ps.pend) PopDone(d);
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

// The asynchronous-pipe model (ascend_sim/pipes.h): per-pipe vector clocks, per-buffer
// interval maps of the last writer / readers, the GM write map shared by the cores of a launch,
// and the hazard faults.
#include "ascend_sim/pipes.h"

#include "launch_state.h"

namespace ascend_sim {

PipeIdx PipeIndex(pipe_t p) {
  switch (p) {
    case PIPE_S: return kPS;
    case PIPE_V: return kPV;
    case PIPE_M: return kPM;
    case PIPE_MTE1: return kPMte1;
    case PIPE_MTE2: return kPMte2;
    case PIPE_MTE3: return kPMte3;
    case PIPE_FIX: return kPFix;
    default: return kPS;
  }
}

const char* PipeIdxName(int p) {
  static const char* n[kNumPipes] = {"PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3", "PIPE_FIX"};
  return p >= 0 && p < kNumPipes ? n[p] : "PIPE_?";
}

namespace {

const char* EventFor(int from, int to) {
  static const char* n[kNumPipes] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX"};
  static thread_local std::string s;
  s = Str(n[from], "_", n[to]);
  return s.c_str();
}

std::string Where(const Site& s) {
  std::string f = s.loc.file ? s.loc.file : "?";
  const size_t k = f.find("backends/");
  if (k != std::string::npos) f = f.substr(k);
  return Str(s.api ? s.api : "?", " at ", f, ":", s.loc.line);
}

PipeState& PS() { return Cur().pipes; }

bool Ordered(const PipeState& ps, int p, int q, uint64_t seq) {
  if (seq == 0) return true;
  if (q == p && p != kPV) return true;   // in-order pipes; PIPE_V needs PipeBarrier<PIPE_V>
  return ps.seen[p].s[q] >= seq;
}

[[noreturn]] void Hazard(const char* api, const Loc& loc, int pipe, const char* what, int mem, uint32_t lo, uint32_t hi,
                         int other, const Site& os, const char* other_what) {
  const Site me{api, loc};
  std::string fix = other == pipe ? std::string("PipeBarrier<PIPE_V>() between them")
                                  : Str("SetFlag/WaitFlag<HardEvent::", EventFor(other, pipe), "> (or a queue / barrier) between them");
  Fault(api, Str("unsynchronized pipes: ", PipeIdxName(pipe), " (", Where(me), ") ", what, " ", MemName(static_cast<Mem>(mem)),
                 " bytes [", lo, ", ", hi, ") while ", PipeIdxName(other), " (", Where(os), ") may still be ", other_what,
                 " them; add ", fix));
}

using SegMap = std::map<uint32_t, HazSeg>;

void SplitAt(SegMap& m, uint32_t at) {
  auto it = m.upper_bound(at);
  if (it == m.begin()) return;
  --it;
  if (it->first < at && it->second.end > at) {
    HazSeg right = it->second;
    it->second.end = at;
    m.emplace(at, right);
  }
}

template <typename F>
void ForOverlap(SegMap& m, uint32_t lo, uint32_t hi, F f) {
  auto it = m.upper_bound(lo);
  if (it != m.begin()) {
    auto p = std::prev(it);
    if (p->second.end > lo) it = p;
  }
  for (; it != m.end() && it->first < hi; ++it) f(it->first, it->second);
}

}  // namespace

bool PipesOn() {
  CoreContext* c = CurOrNull();
  return c && c->pipes.mode != SyncMode::kOff;
}

void PipeOp(const char* api, const Loc& loc, PipeIdx pipe, std::initializer_list<Range> reads,
            std::initializer_list<Range> writes) {
  PipeState& ps = PS();
  if (ps.mode == SyncMode::kOff) return;
  if (!ps.Checks()) {   // worst order without checks: ordering only
    Record(ps, pipe, ++ps.issued[pipe], reads, writes);
    return;
  }
  for (const Range& r : reads) {
    if (r.hi <= r.lo) continue;
    ForOverlap(ps.mem[r.mem], r.lo, r.hi, [&](uint32_t s, const HazSeg& g) {
      if (g.wpipe >= 0 && !Ordered(ps, pipe, g.wpipe, g.w.seq))
        Hazard(api, loc, pipe, "reads", r.mem, s > r.lo ? s : r.lo, g.end < r.hi ? g.end : r.hi, g.wpipe, g.w.site, "writing");
    });
  }
  for (const Range& r : writes) {
    if (r.hi <= r.lo) continue;
    ForOverlap(ps.mem[r.mem], r.lo, r.hi, [&](uint32_t s, const HazSeg& g) {
      const uint32_t a = s > r.lo ? s : r.lo, b = g.end < r.hi ? g.end : r.hi;
      // Same-pipe WAW / WAR on PIPE_V retire in order; only RAW needs the barrier there.
      if (g.wpipe >= 0 && g.wpipe != pipe && !Ordered(ps, pipe, g.wpipe, g.w.seq))
        Hazard(api, loc, pipe, "writes", r.mem, a, b, g.wpipe, g.w.site, "writing");
      for (int q = 0; q < kNumPipes; ++q) {
        // The scalar unit's loads complete before it issues anything else (their value is used).
        if (q == pipe || q == kPS || g.r[q].seq == 0) continue;
        if (!Ordered(ps, pipe, q, g.r[q].seq)) Hazard(api, loc, pipe, "writes", r.mem, a, b, q, g.r[q].site, "reading");
      }
    });
  }
  const uint64_t seq = ++ps.issued[pipe];
  const Site site{api, loc};
  for (const Range& r : reads) {
    if (r.hi <= r.lo) continue;
    SegMap& m = ps.mem[r.mem];
    SplitAt(m, r.lo);
    SplitAt(m, r.hi);
    uint32_t cur = r.lo;
    std::vector<std::pair<uint32_t, uint32_t>> gaps;
    ForOverlap(m, r.lo, r.hi, [&](uint32_t s, HazSeg& g) {
      if (s > cur) gaps.emplace_back(cur, s);
      g.r[pipe] = Access{seq, site};
      cur = g.end;
    });
    if (cur < r.hi) gaps.emplace_back(cur, r.hi);
    for (auto& gp : gaps) {
      HazSeg g;
      g.end = gp.second;
      g.r[pipe] = Access{seq, site};
      m.emplace(gp.first, g);
    }
  }
  for (const Range& r : writes) {
    if (r.hi <= r.lo) continue;
    SegMap& m = ps.mem[r.mem];
    SplitAt(m, r.lo);
    SplitAt(m, r.hi);
    auto it = m.lower_bound(r.lo);
    while (it != m.end() && it->first < r.hi) it = m.erase(it);
    HazSeg g;
    g.end = r.hi;
    g.wpipe = pipe;
    g.w = Access{seq, site};
    m.emplace(r.lo, g);
  }
  if (ps.Deferring()) Record(ps, pipe, seq, reads, writes);
}

Snap SnapOf(PipeIdx p) {
  PipeState& ps = PS();
  Snap s = ps.seen[p];
  s.s[p] = ps.issued[p];
  return s;
}

void Absorb(PipeIdx p, const Snap& s) {
  PipeState& ps = PS();
  if (p == kPS) {
    for (auto& v : ps.seen) v.Merge(s);
  } else {
    ps.seen[p].Merge(s);
  }
}

void BarrierPipe(pipe_t p) {
  PipeState& ps = PS();
  if (p == PIPE_ALL) {
    Snap all;
    for (int i = 0; i < kNumPipes; ++i) all.s[i] = ps.issued[i];
    for (auto& v : ps.seen) v.Merge(all);
  } else {
    const PipeIdx i = PipeIndex(p);
    if (ps.seen[i].s[i] < ps.issued[i]) ps.seen[i].s[i] = ps.issued[i];
  }
}

void MergeInto(std::vector<uint64_t>& dst, const std::vector<uint64_t>& src) {
  if (dst.size() < src.size()) dst.resize(src.size(), 0);
  for (size_t i = 0; i < src.size(); ++i) dst[i] = dst[i] > src[i] ? dst[i] : src[i];
}

std::vector<uint64_t> CrossSnap(pipe_t p) {
  CoreContext& c = Cur();
  PipeState& ps = c.pipes;
  std::vector<uint64_t> v = ps.xseen;
  const size_t n = c.launch->cores.size() * kNumPipes;
  if (v.size() < n) v.resize(n, 0);
  Snap s;
  if (p == PIPE_ALL) {
    for (int i = 0; i < kNumPipes; ++i) s.s[i] = ps.issued[i];
  } else {
    s = SnapOf(PipeIndex(p));
  }
  for (int i = 0; i < kNumPipes; ++i) {
    uint64_t& e = v[static_cast<size_t>(c.linear) * kNumPipes + i];
    e = e > s.s[i] ? e : s.s[i];
  }
  return v;
}

void CrossAbsorb(const std::vector<uint64_t>& v, pipe_t wait_pipe) {
  CoreContext& c = Cur();
  PipeState& ps = c.pipes;
  if (ps.mode == SyncMode::kOff) return;
  MergeInto(ps.xseen, v);
  Snap own;
  const size_t base = static_cast<size_t>(c.linear) * kNumPipes;
  for (int i = 0; i < kNumPipes; ++i) own.s[i] = base + i < v.size() ? v[base + i] : 0;
  Absorb(PipeIndex(wait_pipe), own);
}

namespace {

void GmRange(CoreContext& c, LaunchState& L, const char* api, const Loc& loc, PipeIdx pipe, uint64_t lo, uint64_t hi,
             bool write) {
  PipeState& ps = c.pipes;
  auto& m = L.gm;
  auto it = m.upper_bound(lo);
  if (it != m.begin()) {
    auto p = std::prev(it);
    if (p->second.end > lo) it = p;
  }
  for (auto j = it; j != m.end() && j->first < hi; ++j) {
    const GmSeg& g = j->second;
    bool ok;
    if (g.core == c.linear) {
      ok = (write && g.pipe == pipe) || Ordered(ps, pipe, g.pipe, g.seq);
    } else {
      const size_t k = static_cast<size_t>(g.core) * kNumPipes + g.pipe;
      ok = k < ps.xseen.size() && ps.xseen[k] >= g.seq;
    }
    if (!ok) {
      const Site me{api, loc};
      Fault(api, Str("unsynchronized GM access: ", PipeIdxName(pipe), " (", Where(me), ") ", write ? "writes" : "reads",
                     " GM bytes [", Hex(j->first > lo ? j->first : lo), ", ", Hex(g.end < hi ? g.end : hi), ") that ",
                     PipeIdxName(g.pipe), " of ", L.cores[g.core]->ctx.name, " (", Where(g.site),
                     ") may still be writing: ",
                     g.core == c.linear ? Str("add SetFlag/WaitFlag<HardEvent::", EventFor(g.pipe, pipe), ">")
                                        : Str("the cross-core flag / SyncAll that orders them must be set on ",
                                              PipeIdxName(g.pipe), " after the write")));
    }
  }
  if (!write) return;
  // Record: trim the overlapping segments, insert [lo, hi).
  std::vector<std::pair<uint64_t, GmSeg>> keep;
  while (it != m.end() && it->first < hi) {
    if (it->first < lo) {
      GmSeg left = it->second;
      left.end = lo;
      keep.emplace_back(it->first, left);
    }
    if (it->second.end > hi) keep.emplace_back(hi, it->second);
    it = m.erase(it);
  }
  for (auto& k : keep) m.emplace(k.first, k.second);
  GmSeg g;
  g.end = hi;
  g.core = c.linear;
  g.pipe = pipe;
  g.seq = ps.issued[pipe];   // the op was counted by PipeOp already
  g.site = Site{api, loc};
  m.emplace(lo, g);
}

}  // namespace

void PipeGm(const char* api, const Loc& loc, PipeIdx pipe, uint64_t addr, uint64_t count, uint64_t len, uint64_t pitch,
            bool write) {
  CoreContext& c = Cur();
  if (count == 0 || len == 0) return;
  if (c.pipes.Deferring() && !c.pipes.pend[pipe].empty()) {   // the instruction PipeOp just queued
    auto& g = write ? c.pipes.pend[pipe].back().gwr : c.pipes.pend[pipe].back().grd;
    g.emplace_back(addr, addr + (count - 1) * pitch + len);
  }
  if (!c.pipes.Checks()) return;
  LaunchState& L = *c.launch;
  std::lock_guard<std::mutex> lk(L.gm_mu);
  if (pitch == len || count == 1) {
    GmRange(c, L, api, loc, pipe, addr, addr + (count - 1) * pitch + len, write);
    return;
  }
  for (uint64_t i = 0; i < count; ++i) GmRange(c, L, api, loc, pipe, addr + i * pitch, addr + i * pitch + len, write);
}

}  // namespace ascend_sim

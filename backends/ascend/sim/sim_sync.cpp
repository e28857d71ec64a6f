// Core identity, intra-core events, cross-core flags (CrossCoreSetFlag modes 0/1/2), SyncAll,
// and the blocking wait with deadlock detection.
#include <chrono>

#include "ascend_sim/sync.h"
#include "launch_state.h"

namespace ascend_sim {

namespace {

using AscendC::HardEvent;

struct EventPipes {
  pipe_t src, dst;
  const char* name;
};

EventPipes PipesOf(HardEvent e) {
  switch (e) {
    case HardEvent::MTE2_MTE1: return {PIPE_MTE2, PIPE_MTE1, "MTE2_MTE1"};
    case HardEvent::MTE1_MTE2: return {PIPE_MTE1, PIPE_MTE2, "MTE1_MTE2"};
    case HardEvent::MTE1_M: return {PIPE_MTE1, PIPE_M, "MTE1_M"};
    case HardEvent::M_MTE1: return {PIPE_M, PIPE_MTE1, "M_MTE1"};
    case HardEvent::MTE2_V: return {PIPE_MTE2, PIPE_V, "MTE2_V"};
    case HardEvent::V_MTE2: return {PIPE_V, PIPE_MTE2, "V_MTE2"};
    case HardEvent::MTE3_V: return {PIPE_MTE3, PIPE_V, "MTE3_V"};
    case HardEvent::V_MTE3: return {PIPE_V, PIPE_MTE3, "V_MTE3"};
    case HardEvent::M_V: return {PIPE_M, PIPE_V, "M_V"};
    case HardEvent::V_M: return {PIPE_V, PIPE_M, "V_M"};
    case HardEvent::V_V: return {PIPE_V, PIPE_V, "V_V"};
    case HardEvent::MTE3_MTE1: return {PIPE_MTE3, PIPE_MTE1, "MTE3_MTE1"};
    case HardEvent::MTE1_MTE3: return {PIPE_MTE1, PIPE_MTE3, "MTE1_MTE3"};
    case HardEvent::MTE1_V: return {PIPE_MTE1, PIPE_V, "MTE1_V"};
    case HardEvent::MTE2_M: return {PIPE_MTE2, PIPE_M, "MTE2_M"};
    case HardEvent::M_MTE2: return {PIPE_M, PIPE_MTE2, "M_MTE2"};
    case HardEvent::V_MTE1: return {PIPE_V, PIPE_MTE1, "V_MTE1"};
    case HardEvent::M_FIX: return {PIPE_M, PIPE_FIX, "M_FIX"};
    case HardEvent::FIX_M: return {PIPE_FIX, PIPE_M, "FIX_M"};
    case HardEvent::MTE3_MTE2: return {PIPE_MTE3, PIPE_MTE2, "MTE3_MTE2"};
    case HardEvent::MTE2_MTE3: return {PIPE_MTE2, PIPE_MTE3, "MTE2_MTE3"};
    case HardEvent::S_V: return {PIPE_S, PIPE_V, "S_V"};
    case HardEvent::V_S: return {PIPE_V, PIPE_S, "V_S"};
    case HardEvent::S_MTE2: return {PIPE_S, PIPE_MTE2, "S_MTE2"};
    case HardEvent::MTE2_S: return {PIPE_MTE2, PIPE_S, "MTE2_S"};
    case HardEvent::S_MTE3: return {PIPE_S, PIPE_MTE3, "S_MTE3"};
    case HardEvent::MTE3_S: return {PIPE_MTE3, PIPE_S, "MTE3_S"};
    case HardEvent::MTE2_FIX: return {PIPE_MTE2, PIPE_FIX, "MTE2_FIX"};
    case HardEvent::FIX_MTE2: return {PIPE_FIX, PIPE_MTE2, "FIX_MTE2"};
    case HardEvent::FIX_S: return {PIPE_FIX, PIPE_S, "FIX_S"};
    case HardEvent::M_S: return {PIPE_M, PIPE_S, "M_S"};
    case HardEvent::FIX_MTE3: return {PIPE_FIX, PIPE_MTE3, "FIX_MTE3"};
    case HardEvent::MTE1_FIX: return {PIPE_MTE1, PIPE_FIX, "MTE1_FIX"};
    case HardEvent::FIX_MTE1: return {PIPE_FIX, PIPE_MTE1, "FIX_MTE1"};
    case HardEvent::FIX_FIX: return {PIPE_FIX, PIPE_FIX, "FIX_FIX"};
    default: return {PIPE_ALL, PIPE_ALL, "?"};
  }
}

const char* PipeName(pipe_t p) {
  switch (p) {
    case PIPE_S: return "PIPE_S";
    case PIPE_V: return "PIPE_V";
    case PIPE_M: return "PIPE_M";
    case PIPE_MTE1: return "PIPE_MTE1";
    case PIPE_MTE2: return "PIPE_MTE2";
    case PIPE_MTE3: return "PIPE_MTE3";
    case PIPE_FIX: return "PIPE_FIX";
    case PIPE_ALL: return "PIPE_ALL";
    default: return "PIPE_?";
  }
}

// Pipes an A2 core has: AIV {S, V, MTE2, MTE3}; AIC {S, M, MTE1, MTE2, FIX}.
bool CoreHasPipe(CoreKind k, pipe_t p) {
  if (p == PIPE_ALL || p == PIPE_S || p == PIPE_MTE2) return true;
  if (k == CoreKind::AIV) return p == PIPE_V || p == PIPE_MTE3;
  return p == PIPE_M || p == PIPE_MTE1 || p == PIPE_FIX;
}

void RequirePipe(const char* api, pipe_t p) {
  const CoreContext& c = Cur();
  if (!CoreHasPipe(c.kind, p)) {
    Fault(api, Str(PipeName(p), " does not exist on a ", c.kind == CoreKind::AIC ? "cube core (AIC)" : "vector core (AIV)"));
  }
}

}  // namespace

int32_t CurrentCoreType() { return static_cast<int32_t>(Cur().kind); }

void DeclareTaskType(int32_t type) {
  CoreContext& c = Cur();
  if (type != c.kernel_type) {
    Fault("KERNEL_TASK_TYPE_DEFAULT", Str("the kernel declares task type ", type, " but was registered with ",
                                          c.kernel_type, " (ASCEND_SIM_REGISTER_KERNEL)"));
  }
  c.task_type_checked = true;
}

int64_t BlockIdx() {
  const CoreContext& c = Cur();
  if (c.kind == CoreKind::AIC) return c.block;
  return static_cast<int64_t>(c.block) * c.launch->AivPerBlock() + c.sub;
}
int64_t BlockNum() { return Cur().launch->num_blocks; }
int64_t SubBlockIdx() { return Cur().sub; }
int64_t TaskRation() {
  const CoreContext& c = Cur();
  return c.kind == CoreKind::AIV ? c.launch->AivPerBlock() : 1;
}

// The checks SetFlag and WaitFlag share; returns the core's counter of that event and id. The
// "<api><event>" name is only built when a check fails (this runs on every flag).
static uint16_t& EventCounter(const char* api, AscendC::HardEvent evt, int32_t id, EventPipes& ep) {
  Enter();
  ep = PipesOf(evt);
  const CoreContext& c = Cur();
  if (!CoreHasPipe(c.kind, ep.src) || !CoreHasPipe(c.kind, ep.dst)) {
    const std::string name = Str(api, "<", ep.name, ">");
    RequirePipe(name.c_str(), ep.src);
    RequirePipe(name.c_str(), ep.dst);
  }
  if (id < 0 || id > 7) Fault(api, Str("event id ", id, " is outside [0, 7]"));
  return Cur().events[static_cast<int>(evt)][id];
}

void SetEventFlag(const char* api, AscendC::HardEvent evt, int32_t id) {
  EventPipes ep;
  uint16_t& n = EventCounter(api, evt, id, ep);
  if (n >= 1) Fault(Str(api, "<", ep.name, ">").c_str(), Str("event id ", id, " is already set and not waited for"));
  ++n;
  if (PipesOn()) Cur().pipes.events[static_cast<int>(evt)][id] = SnapOf(PipeIndex(ep.src));
}

void WaitEventFlag(const char* api, AscendC::HardEvent evt, int32_t id) {
  EventPipes ep;
  uint16_t& n = EventCounter(api, evt, id, ep);
  if (n == 0) {
    Fault(Str(api, "<", ep.name, ">").c_str(),
          Str("event id ", id, " was never set by SetFlag on this core: the ", PipeName(ep.dst), " pipe would wait forever"));
  }
  --n;
  if (PipesOn()) Absorb(PipeIndex(ep.dst), Cur().pipes.events[static_cast<int>(evt)][id]);
}

void PipeBarrierCheck(const char* api, pipe_t pipe) {
  Enter();
  RequirePipe(api, pipe);
  if (PipesOn()) BarrierPipe(pipe);
}

// ---- blocking waits ------------------------------------------------------------------------

void LaunchState::Abort(const std::string& msg) {
  std::lock_guard<std::mutex> lk(mu);
  if (fault.empty()) fault = msg;
  aborted.store(true);
  cv.notify_all();
}

void LaunchState::WaitUntil(CoreContext& me, std::unique_lock<std::mutex>& lk, const char* api,
                            const std::string& what, const std::function<bool()>& can, bool passive) {
  if (can()) return;
  Waiter w{&me, what, &can};
  waiters_.push_back(&w);
  --running;
  auto leave = [&] {
    for (size_t i = 0; i < waiters_.size(); ++i)
      if (waiters_[i] == &w) {
        waiters_.erase(waiters_.begin() + static_cast<long>(i));
        break;
      }
    ++running;
  };
  const std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(cfg.timeout_s));
  for (;;) {
    if (aborted.load()) {
      leave();
      throw SimAbort{};
    }
    if (can()) {
      leave();
      return;
    }
    if (running == 0 && !passive) {
      bool any = false;
      for (Waiter* o : waiters_) any = any || (*o->can)();
      if (!any) {
        std::string others;
        for (Waiter* o : waiters_)
          if (o != &w) others += Str("; ", o->core->name, " waits in ", o->what);
        int32_t done = 0;
        for (auto& s : cores) done += s->finished ? 1 : 0;
        leave();
        lk.unlock();
        Fault(api, Str(what, " can never be satisfied: every other core has finished (", done, ") or is waiting",
                       others.empty() ? std::string() : others, " (deadlock)"));
      }
    }
    if (!passive && std::chrono::steady_clock::now() >= deadline) {
      leave();
      lk.unlock();
      Fault(api, Str(what, " timed out after ", cfg.timeout_s, " s"));
    }
    const std::chrono::steady_clock::time_point poll =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    cv.wait_until(lk, passive || poll < deadline ? poll : deadline);
  }
}

// ---- cross-core flags ------------------------------------------------------------------------

namespace {

void Bump(LaunchState& L, CoreContext& setter, int32_t linear, int32_t id, const char* api, const XSnap& snap) {
  L.xcounter[linear][id].push_back(snap);
  int32_t& n = L.counter[linear][id];
  if (n >= kCrossFlagLimit) {
    const std::string target = L.cores[linear]->ctx.name;
    Fault(api, Str("flag ", id, " of ", target, " already holds ", kCrossFlagLimit,
                   " unconsumed sets (the hardware counter limit)"));
  }
  ++n;
  (void)setter;
}

}  // namespace

void CrossCoreSet(int32_t mode, pipe_t pipe, int32_t id) {
  const char* api = "CrossCoreSetFlag";
  Enter();
  CoreContext& c = Cur();
  LaunchState& L = *c.launch;
  if (id < 0 || id > kMaxCrossFlagId) Fault(api, Str("flagId ", id, " is outside [0, ", kMaxCrossFlagId, "] (Atlas A2)"));
  if (pipe == PIPE_S) Fault(api, "PIPE_S cannot carry a cross-core flag on Atlas A2");
  RequirePipe(api, pipe);
  DrainFor(pipe);   // worst order: what the flag publishes has landed
  const XSnap snap = CrossSnap(pipe);
  std::unique_lock<std::mutex> lk(L.mu);
  c.c.cross_core_sets += 1;
  // The knowledge of the cores whose sets complete a group (front of each setter's FIFO).
  auto take = [&L, id](std::vector<std::array<std::deque<XSnap>, kNumCrossFlags>>& pend, int32_t g, XSnap& acc) {
    auto& dq = pend[g][id];
    if (!dq.empty()) {
      MergeInto(acc, dq.front());
      dq.pop_front();
    }
  };
  if (mode == 0) {
    // Every core of the setter's kind must set before any of them passes.
    auto& p = L.pend0[c.linear][id];
    if (p >= kCrossFlagLimit) Fault(api, Str("flag ", id, " set more than ", kCrossFlagLimit, " times without a wait"));
    ++p;
    L.xpend0[c.linear][id].push_back(snap);
    std::vector<int32_t> group;
    for (auto& s : L.cores)
      if (s->ctx.kind == c.kind) group.push_back(s->ctx.linear);
    bool all = true;
    for (int32_t g : group) all = all && L.pend0[g][id] > 0;
    if (all) {
      XSnap acc;
      for (int32_t g : group) take(L.xpend0, g, acc);
      for (int32_t g : group) {
        --L.pend0[g][id];
        Bump(L, c, g, id, api, acc);
      }
    }
  } else if (mode == 1) {
    if (c.kind != CoreKind::AIV || L.AivPerBlock() != 2) Fault(api, "mode 1 synchronizes the two vector cores of an AI core (MIX 1:2 AIV only)");
    auto& p = L.pend1[c.linear][id];
    if (p >= kCrossFlagLimit) Fault(api, Str("flag ", id, " set more than ", kCrossFlagLimit, " times without a wait"));
    ++p;
    L.xpend1[c.linear][id].push_back(snap);
    const int32_t a = L.AivLinear(c.block, 0), b = L.AivLinear(c.block, 1);
    if (L.pend1[a][id] > 0 && L.pend1[b][id] > 0) {
      XSnap acc;
      take(L.xpend1, a, acc);
      take(L.xpend1, b, acc);
      --L.pend1[a][id], --L.pend1[b][id];
      Bump(L, c, a, id, api, acc);
      Bump(L, c, b, id, api, acc);
    }
  } else if (mode == 2) {
    if (!L.HasAic() || L.AivPerBlock() == 0) Fault(api, "mode 2 needs a MIX kernel (cube and vector cores)");
    if (c.kind == CoreKind::AIC) {
      // The cube core signals each of its vector cores.
      for (int32_t s = 0; s < L.AivPerBlock(); ++s) Bump(L, c, L.AivLinear(c.block, s), id, api, snap);
    } else {
      // The cube core passes once every vector core of its AI core has set.
      auto& p = L.pend2[c.linear][id];
      if (p >= kCrossFlagLimit) Fault(api, Str("flag ", id, " set more than ", kCrossFlagLimit, " times before the cube core's wait"));
      ++p;
      L.xpend2[c.linear][id].push_back(snap);
      bool all = true;
      for (int32_t s = 0; s < L.AivPerBlock(); ++s) all = all && L.pend2[L.AivLinear(c.block, s)][id] > 0;
      if (all) {
        XSnap acc;
        for (int32_t s = 0; s < L.AivPerBlock(); ++s) {
          take(L.xpend2, L.AivLinear(c.block, s), acc);
          --L.pend2[L.AivLinear(c.block, s)][id];
        }
        Bump(L, c, L.AicLinear(c.block), id, api, acc);
      }
    }
  } else {
    Fault(api, Str("modeId ", mode, " is not an Atlas A2 mode (0, 1, 2)"));
  }
  L.cv.notify_all();
}

void CrossCoreWait(int32_t mode, pipe_t pipe, int32_t id) {
  const char* api = "CrossCoreWaitFlag";
  Enter();
  CoreContext& c = Cur();
  LaunchState& L = *c.launch;
  if (id < 0 || id > kMaxCrossFlagId) Fault(api, Str("flagId ", id, " is outside [0, ", kMaxCrossFlagId, "] (Atlas A2)"));
  (void)mode;
  RequirePipe(api, pipe);
  std::unique_lock<std::mutex> lk(L.mu);
  c.c.cross_core_waits += 1;
  int32_t& n = L.counter[c.linear][id];
  L.WaitUntil(c, lk, api, Str("CrossCoreWaitFlag(", id, ")"), [&n] { return n > 0; });
  --n;
  // The waiting pipe (PIPE_S by default: every later instruction) runs after what the setter
  // had completed. Local pipes still in flight are NOT ordered by a cross-core wait.
  auto& dq = L.xcounter[c.linear][id];
  if (!dq.empty()) {
    CrossAbsorb(dq.front(), pipe);
    dq.pop_front();
  }
}

void SyncAllCores(bool aiv_only) {
  const char* api = "SyncAll";
  Enter();
  CoreContext& c = Cur();
  LaunchState& L = *c.launch;
  if (aiv_only && c.kind != CoreKind::AIV) Fault(api, "SyncAll<true> (vector cores only) called on the cube core");
  if (L.cfg.ai_cores > 0 && L.num_blocks > L.cfg.ai_cores) {
    Fault(api, Str("the launch has ", L.num_blocks, " blocks but ", L.cfg.profile, " has ", L.cfg.ai_cores,
                   " AI cores: SyncAll needs every block resident at once (it would hang on the NPU)"));
  }
  const int32_t b = aiv_only ? 0 : 1;
  const int32_t parties = aiv_only ? L.NumAiv() : L.NumAiv() + L.NumAic();
  DrainFor(PIPE_ALL);
  const XSnap snap = CrossSnap(PIPE_ALL);   // SyncAll waits for every pipe of the core first
  std::unique_lock<std::mutex> lk(L.mu);
  c.c.sync_alls += 1;
  const int64_t gen = L.bar_gen[b];
  MergeInto(L.bar_acc[b], snap);
  auto leave = [&] {
    CrossAbsorb(L.bar_done[b][gen & 1], PIPE_S);
    if (PipesOn()) BarrierPipe(PIPE_ALL);
  };
  if (++L.bar_count[b] == parties) {
    L.bar_count[b] = 0;
    L.bar_done[b][gen & 1] = L.bar_acc[b];
    L.bar_acc[b].clear();
    ++L.bar_gen[b];
    L.cv.notify_all();
    leave();
    return;
  }
  L.WaitUntil(c, lk, api, Str("SyncAll<", aiv_only ? "true" : "false", "> (", parties, " cores)"),
              [&L, b, gen] { return L.bar_gen[b] != gen; });
  leave();
}

}  // namespace ascend_sim

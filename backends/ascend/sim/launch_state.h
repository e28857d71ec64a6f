// Private: the shared state of one simulator launch (cores, GM regions, cross-core flag
// counters, SyncAll barriers) and the blocking-wait machinery with deadlock detection.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ascend_sim/launcher.h"
#include "ascend_sim/runtime.h"

namespace ascend_sim {

constexpr int32_t kNumCrossFlags = 16;   // ids an A2 accepts are 0..10; room for the counters
constexpr int32_t kMaxCrossFlagId = 10;
constexpr int32_t kCrossFlagLimit = 15;  // a flag counter holds at most 15 pending sets

struct CoreSlot {
  CoreContext ctx;
  std::vector<uint8_t> storage[static_cast<int>(Mem::COUNT)];
  bool finished = false;
};

void SetCurrentCore(CoreContext* c);

// A GM byte range written by an asynchronous pipe: who and where (pipes.h).
struct GmSeg {
  uint64_t end = 0;
  int32_t core = 0;
  int8_t pipe = 0;
  uint64_t seq = 0;
  Site site;
};

using XSnap = std::vector<uint64_t>;   // cross-core knowledge carried by a flag (pipes.h)

class LaunchState {
 public:
  std::string kernel;
  int32_t task_type = 0;
  int32_t num_blocks = 0;
  SimConfig cfg;
  std::vector<std::unique_ptr<CoreSlot>> cores;
  std::vector<GmRegion> regions;   // sorted by addr

  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::condition_variable cv;
  std::string fault;               // the first fault's message
  int32_t running = 0;             // cores neither finished nor blocked

  // Cross-core flags, per core linear index: counters a wait consumes, and the sets of a
  // multi-setter mode (mode 0 / 1 / 2 from AIV) waiting for their partners.
  std::vector<std::array<int32_t, kNumCrossFlags>> counter, pend0, pend1, pend2;
  // SyncAll barriers: [0] all vector cores, [1] all cores.
  int32_t bar_count[2] = {0, 0};
  int64_t bar_gen[2] = {0, 0};

  // Asynchronous-pipe model: GM writes of the launch, the knowledge each pending cross-core
  // set carries (FIFO per core and flag, like the counters), the knowledge a SyncAll hands out.
  std::mutex gm_mu;
  std::map<uint64_t, GmSeg> gm;
  std::vector<std::array<std::deque<XSnap>, kNumCrossFlags>> xcounter, xpend0, xpend1, xpend2;
  XSnap bar_acc[2], bar_done[2][2];
  // Worst-order modes: cores that finished issuing, and whose turn it is to drain (last core
  // first: what no flag published lands at the very end, vector cores before cube cores).
  int32_t issue_done = 0;
  int32_t drain_turn = 0;

  bool HasAic() const { return task_type != KERNEL_TYPE_AIV_ONLY && task_type != KERNEL_TYPE_MIX_AIV_1_0; }
  bool HasAiv() const { return task_type != KERNEL_TYPE_AIC_ONLY && task_type != KERNEL_TYPE_MIX_AIC_1_0; }
  int32_t AivPerBlock() const {
    return task_type == KERNEL_TYPE_MIX_AIC_1_2 ? 2 : (HasAiv() ? 1 : 0);
  }
  int32_t NumAic() const { return HasAic() ? num_blocks : 0; }
  int32_t NumAiv() const { return num_blocks * AivPerBlock(); }
  int32_t AicLinear(int32_t block) const { return block; }
  int32_t AivLinear(int32_t block, int32_t sub) const { return NumAic() + block * AivPerBlock() + sub; }

  // Blocks the calling core (lock held) until can() holds. Fails fast when every live core is
  // blocked with nothing satisfiable (deadlock), after cfg.timeout_s otherwise. A passive wait
  // (the end-of-kernel wait of the worst-order modes) never times out and leaves the deadlock
  // report to a core blocked in the kernel itself.
  void WaitUntil(CoreContext& me, std::unique_lock<std::mutex>& lk, const char* api, const std::string& what,
                 const std::function<bool()>& can, bool passive = false);
  void Abort(const std::string& msg);   // lock NOT held

 private:
  struct Waiter {
    const CoreContext* core;
    std::string what;
    const std::function<bool()>* can;
  };
  std::vector<Waiter*> waiters_;
};

}  // namespace ascend_sim

// Kernel registry and launcher: one thread per simulated core, each with its own on-chip
// memories (filled with 0xFF so uninitialized reads show up as NaN), joined at the end; the
// first fault wins, the other cores are stopped at their next API call or wait.
#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "ascend_sim/launcher.h"
#include "ascend_sim/registry.h"
#include "launch_state.h"

namespace ascend_sim {

namespace {

std::map<std::string, KernelInfo>& Registry() {
  static std::map<std::string, KernelInfo> r;
  return r;
}

const char* TaskTypeName(int32_t t) {
  switch (t) {
    case KERNEL_TYPE_AIV_ONLY: return "KERNEL_TYPE_AIV_ONLY";
    case KERNEL_TYPE_AIC_ONLY: return "KERNEL_TYPE_AIC_ONLY";
    case KERNEL_TYPE_MIX_AIV_1_0: return "KERNEL_TYPE_MIX_AIV_1_0";
    case KERNEL_TYPE_MIX_AIC_1_0: return "KERNEL_TYPE_MIX_AIC_1_0";
    case KERNEL_TYPE_MIX_AIC_1_1: return "KERNEL_TYPE_MIX_AIC_1_1";
    case KERNEL_TYPE_MIX_AIC_1_2: return "KERNEL_TYPE_MIX_AIC_1_2";
  }
  return "?";
}

// Worst-order modes: the work still queued when the kernel returns runs once every core has
// issued everything, one core after the other from the last one, so a GM write no cross-core
// flag published lands after every other core's reads, whatever the thread timing.
void FinalDrain(LaunchState* L, CoreContext& c) {
  {
    std::unique_lock<std::mutex> lk(L->mu);
    ++L->issue_done;
    L->cv.notify_all();
    const int32_t n = static_cast<int32_t>(L->cores.size());
    L->WaitUntil(c, lk, "end of kernel", "the end of the kernel (worst order: every core finishes issuing before the final drain)",
                 [L, n, &c] { return L->issue_done == n && L->drain_turn == c.linear; }, true);
  }
  DrainAll();
  std::lock_guard<std::mutex> lk(L->mu);
  --L->drain_turn;
  L->cv.notify_all();
}

void RunCore(LaunchState* L, CoreSlot* slot, const KernelInfo* k, const KernelArgs* args) {
  SetCurrentCore(&slot->ctx);
  try {
    k->entry(*args);
    if (slot->ctx.pipes.Deferring()) FinalDrain(L, slot->ctx);
  } catch (const SimFault& f) {
    L->Abort(f.what());
  } catch (const SimAbort&) {
  } catch (const std::exception& e) {
    L->Abort(Str("ascend_sim: kernel '", L->kernel, "' on ", slot->ctx.name, ": unexpected C++ exception: ", e.what()));
  } catch (...) {
    L->Abort(Str("ascend_sim: kernel '", L->kernel, "' on ", slot->ctx.name, ": unknown C++ exception"));
  }
  SetCurrentCore(nullptr);
  std::lock_guard<std::mutex> lk(L->mu);
  slot->finished = true;
  --L->running;
  L->cv.notify_all();
}

}  // namespace

bool RegisterKernel(KernelInfo info) {
  auto& r = Registry();
  const std::string name = info.name;
  if (r.count(name)) throw std::logic_error("ascend_sim: kernel '" + name + "' registered twice");
  r.emplace(name, std::move(info));
  return true;
}

const KernelInfo* FindKernel(const std::string& name) {
  auto& r = Registry();
  auto it = r.find(name);
  return it == r.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelNames() {
  std::vector<std::string> v;
  for (auto& kv : Registry()) v.push_back(kv.first);
  return v;
}

LaunchReport Launch(const std::string& kernel, int32_t num_blocks, const std::vector<uint64_t>& args,
                    const std::vector<GmRegion>& regions, const SimConfig& cfg) {
  const KernelInfo* k = FindKernel(kernel);
  if (k == nullptr) {
    std::string known;
    for (auto& n : KernelNames()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument(Str("ascend_sim: no kernel named '", kernel, "'; registered: ", known));
  }
  if (args.size() != k->num_args) {
    throw std::invalid_argument(Str("ascend_sim: kernel '", kernel, "' takes ", k->num_args, " GM_ADDR arguments, got ",
                                    args.size()));
  }
  if (num_blocks < 1 || num_blocks > cfg.max_blocks) {
    throw std::invalid_argument(Str("ascend_sim: num_blocks must be in [1, ", cfg.max_blocks, "], got ", num_blocks));
  }
  if (!(cfg.timeout_s > 0)) throw std::invalid_argument("ascend_sim: timeout_s must be > 0");

  LaunchState L;
  L.kernel = kernel;
  L.task_type = k->task_type;
  L.num_blocks = num_blocks;
  L.cfg = cfg;
  L.regions = regions;
  std::sort(L.regions.begin(), L.regions.end(), [](const GmRegion& a, const GmRegion& b) { return a.addr < b.addr; });
  for (size_t i = 0; i < L.regions.size(); ++i) {
    if (L.regions[i].bytes == 0) continue;
    if (i + 1 < L.regions.size() && L.regions[i].addr + L.regions[i].bytes > L.regions[i + 1].addr) {
      throw std::invalid_argument(Str("ascend_sim: GM buffers '", L.regions[i].name, "' and '", L.regions[i + 1].name,
                                      "' overlap"));
    }
  }

  // Cores: AIC0..AIC(N-1), then the vector cores, AIV index = block * per_block + sub.
  auto add_core = [&](CoreKind kind, int32_t block, int32_t sub) {
    auto slot = std::make_unique<CoreSlot>();
    CoreContext& c = slot->ctx;
    c.launch = &L;
    c.aborted = &L.aborted;
    c.kind = kind;
    c.block = block;
    c.sub = sub;
    c.linear = static_cast<int32_t>(L.cores.size());
    c.kernel_type = L.task_type;
    c.name = kind == CoreKind::AIC ? Str("AIC", block) : Str("AIV", block * L.AivPerBlock() + sub);
    auto give = [&](Mem m, uint32_t bytes) {
      auto& v = slot->storage[static_cast<int>(m)];
      v.assign(bytes, 0xFF);   // garbage that reads as NaN in fp16 / fp32
      c.mem[static_cast<int>(m)] = v.data();
      c.cap[static_cast<int>(m)] = bytes;
    };
    if (kind == CoreKind::AIV) {
      give(Mem::UB, cfg.ub_bytes);
    } else {
      give(Mem::L1, cfg.l1_bytes);
      give(Mem::L0A, cfg.l0a_bytes);
      give(Mem::L0B, cfg.l0b_bytes);
      give(Mem::L0C, cfg.l0c_bytes);
    }
    c.region_read.assign(L.regions.size(), 0);
    c.region_write.assign(L.regions.size(), 0);
    L.cores.push_back(std::move(slot));
  };
  for (int32_t b = 0; b < L.NumAic(); ++b) add_core(CoreKind::AIC, b, 0);
  for (int32_t b = 0; b < num_blocks; ++b)
    for (int32_t s = 0; s < L.AivPerBlock(); ++s) add_core(CoreKind::AIV, b, s);
  const size_t n = L.cores.size();
  std::array<int32_t, kNumCrossFlags> zero{};
  L.counter.assign(n, zero);
  L.pend0.assign(n, zero);
  L.pend1.assign(n, zero);
  L.pend2.assign(n, zero);
  L.xcounter.resize(n);
  L.xpend0.resize(n);
  L.xpend1.resize(n);
  L.xpend2.resize(n);
  for (auto& s : L.cores) {
    s->ctx.pipes.mode = cfg.pipe_sync;
    s->ctx.pipes.xseen.assign(n * kNumPipes, 0);
    s->ctx.vec_ulp = cfg.vec_ulp;
  }
  L.running = static_cast<int32_t>(n);
  L.drain_turn = static_cast<int32_t>(n) - 1;

  KernelArgs kargs;
  for (uint64_t a : args) kargs.push_back(reinterpret_cast<uint8_t*>(a));

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  threads.reserve(n);
  try {
    for (auto& s : L.cores) threads.emplace_back(RunCore, &L, s.get(), k, &kargs);
  } catch (const std::system_error& e) {
    L.Abort(Str("ascend_sim: could not start ", n, " core threads: ", e.what()));
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (!L.fault.empty()) throw SimFault(L.fault);

  // A flag left set survives into the next kernel on the NPU: report it.
  for (size_t i = 0; i < n; ++i) {
    for (int32_t id = 0; id < kNumCrossFlags; ++id) {
      const int32_t pending = L.counter[i][id] + L.pend0[i][id] + L.pend1[i][id] + L.pend2[i][id];
      if (pending) {
        throw SimFault(Str("ascend_sim: kernel '", kernel, "' finished with cross-core flag ", id, " set ", pending,
                           " time(s) towards ", L.cores[i]->ctx.name, " and never waited for (unmatched CrossCoreSetFlag)"));
      }
    }
  }

  LaunchReport rep;
  rep.kernel = kernel;
  rep.num_blocks = num_blocks;
  rep.task_type = L.task_type;
  rep.regions = L.regions;
  rep.region_read.assign(L.regions.size(), 0);
  rep.region_write.assign(L.regions.size(), 0);
  for (auto& s : L.cores) {
    CoreReport cr;
    cr.name = s->ctx.name;
    cr.kind = static_cast<int32_t>(s->ctx.kind);
    cr.block = s->ctx.block;
    cr.sub = s->ctx.sub;
    cr.counters = s->ctx.c;
    rep.cores.push_back(cr);
    for (size_t r = 0; r < L.regions.size(); ++r) {
      rep.region_read[r] += s->ctx.region_read[r];
      rep.region_write[r] += s->ctx.region_write[r];
    }
  }
  rep.wall_s = wall;
  (void)TaskTypeName;
  return rep;
}

}  // namespace ascend_sim

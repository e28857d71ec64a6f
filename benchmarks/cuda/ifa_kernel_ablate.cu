// Times the real IFA split kernel (backends/cuda/incre_flash_attention) on bf16 caches (int8
// with -DABLATE_KV_INT8=1, fp8 e4m3 with -DABLATE_KV_INT8=2), d 128 (-DABLATE_D=N), bf16 q, the
// CTA shape the launcher picks (the plan's, from the library's planner: plan_launch),
// built with DUALOPS_IFA_ABLATE = N (ifa_measure.cuh): each bit removes one part of the per-chunk
// math, so the time a part costs is the difference to the N = 0 build (results are wrong then;
// only the time is read). run_kernel_ablate.sh builds every N. Method as ifa_stream_read.cu: one run = one call on every input set (sets rotated so a run
// streams >= 3x L2), started behind a ~100 us GPU spin; median of 25 runs after 3 warm-ups.
// Each shape is timed twice: eager launches ("eager") and one CUDA-graph replay of the same
// calls ("graph", as the sweep times them: no host launch cost between calls).
// ABLATE_SHAPES=a,b,... keeps the shapes whose name contains one of the strings.
// ABLATE_PAGE=N > 0 reads the caches as pages of N keys in a randomly permuted pool (a block
// table per request, as the sweep's paged rows) instead of contiguous [b, s, h, d] tensors.
// With -DDUALOPS_IFA_TRACE=1 (token "+t" of run_kernel_ablate.sh) it also prints where the time
// of two consecutive calls goes: per phase of the kernel (ifa_measure.cuh), the median and max
// over CTAs, and when the calls' CTAs start and end.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_common.cuh"
#include "ifa_launch.cuh"

using namespace dualops;
using namespace dualops::cuda::ifa;
using BF = __nv_bfloat16;
#ifndef ABLATE_D  // head dim (token "+xABLATE_D64")
#define ABLATE_D 128
#endif
constexpr int D = ABLATE_D;
#ifndef ABLATE_TAG
#define ABLATE_TAG "?"
#endif
#ifndef ABLATE_KV_INT8
#define ABLATE_KV_INT8 0
#endif
using KV = std::conditional_t<ABLATE_KV_INT8 == 1, int8_t, std::conditional_t<ABLATE_KV_INT8 == 2, __nv_fp8_e4m3, BF>>;
constexpr const char* kKvName = ABLATE_KV_INT8 == 1 ? "int8" : ABLATE_KV_INT8 == 2 ? "fp8" : "bf16";
constexpr int kKvBytes = sizeof(KV);

// Cache words, real data, not zeros (METHOD.md): kFillBf16 (bf16 values of moderate magnitude,
// never NaN / zero), kFillFp8 (e4m3 bytes of moderate magnitude, never NaN), or kFillInt8Tri
// (int8 bytes of a triangular distribution on [-63, 63], like a quantized Gaussian; the bf16
// pattern read as int8 bytes is 60 or -68 in every other byte, 0..127 in the rest).
// ABLATE_INT8_TRI=1 picks the last for int8 caches.
enum FillMode : int { kFillBf16 = 0, kFillFp8 = 1, kFillInt8Tri = 2 };
__global__ void k_fill(uint32_t* p, int64_t n, uint32_t seed, int mode = kFillBf16) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed * 40503u ^ static_cast<uint32_t>(i >> 32);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    if (mode == kFillInt8Tri) {
      uint32_t y = x * 2246822519u ^ (x >> 16), w = 0;
      for (int j = 0; j < 4; ++j) w |= ((((x >> (8 * j)) & 0x3fu) + ((y >> (8 * j)) & 0x3fu) - 63u) & 0xffu) << (8 * j);
      p[i] = w;
    } else {
      p[i] = mode == kFillFp8 ? (x & 0xb7b7b7b7u) | 0x08080808u : (x & 0x807f807fu) | 0x3c003c00u;
    }
  }
}
__global__ void k_fill_f32(float* p, int n, float lo, float hi) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = lo + (hi - lo) * ((i * 2654435761u >> 8) & 0xffff) / 65535.f;
}

struct Shape {
  const char* name;
  int B, HQ, HKV, S, NS;
  int W;  // whole groups ahead of the split ones (plan field whole_groups)
};

// The launch fields of the plan header (variant, q tile, merge, wave, stagger, prefetch, burst) as
// the library's planner makes them for this call on ABLATE_DEVICE (default h100) under the tuning
// overrides in ABLATE_TUNE ("ifa_merge=kernel,..."; run_kernel_ablate.sh builds it): the driver
// asks `python -m dualops info --plan ... --header` (ABLATE_PYTHON, default python3, with the
// package importable) and copies the fields it does not set itself.
void plan_launch(IncreFlashAttentionTiling& t) {
  const char* py = std::getenv("ABLATE_PYTHON");
  const char* dev = std::getenv("ABLATE_DEVICE");
  const char* tune = std::getenv("ABLATE_TUNE");
  char cmd[1024];
  std::snprintf(cmd, sizeof(cmd),
                "%s -m dualops info --device %s --tune '%s' --header --plan batch=%d,s_q=%d,h_q=%d,h_kv=%d,head_dim=%d,"
                "max_kv_len=%d,block_size=%d,kv_dtype=%s,num_splits=%d,split_len=%d,whole_groups=%d",
                py ? py : "python3", dev ? dev : "h100", tune ? tune : "", t.batch, t.s_q, t.h_q, t.h_kv, t.head_dim,
                t.max_kv_len, t.block_size, kKvName, t.num_splits, t.split_len, t.whole_groups);
  FILE* f = popen(cmd, "r");
  int32_t v[64] = {};
  int n = 0;
  while (f && n < 64 && std::fscanf(f, "%d", &v[n]) == 1) ++n;
  if (!f || pclose(f) != 0 || n != static_cast<int>(sizeof(IncreFlashAttentionTiling) / 4)) {
    std::fprintf(stderr, "plan_launch: '%s' failed (%d fields)\n", cmd, n);
    std::exit(1);
  }
  IncreFlashAttentionTiling planned;
  std::memcpy(&planned, v, sizeof(planned));
  t.version = planned.version, t.kv_dtype = planned.kv_dtype, t.cta_m_tile = planned.cta_m_tile;
  t.variant = planned.variant, t.merge = planned.merge, t.merge_fallback = planned.merge_fallback;
  t.pdl = planned.pdl, t.wave_ctas = planned.wave_ctas, t.stagger_ns = planned.stagger_ns;
  t.second_fill_keys = planned.second_fill_keys, t.lockstep_burst = planned.lockstep_burst;
}

bool shape_selected(const char* name) {
  const char* e = std::getenv("ABLATE_SHAPES");
  if (e == nullptr || *e == 0) return true;
  std::string list(e);
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, comma - pos);
    if (!item.empty() && item[0] == '=' && item.substr(1) == name) return true;  // "=name": exactly
    if (!item.empty() && item[0] != '=' && std::strstr(name, item.c_str()) != nullptr) return true;
    pos = comma + 1;
  }
  return false;
}

#if DUALOPS_IFA_TRACE
// Phases of two consecutive calls (sets a and a + 1) from the CTAs' marks.
void print_trace(const Shape& sh, int ctas) {
  static unsigned long long tr[2][kTraceCtas][kTrMarks];
  CK(cudaMemcpyFromSymbol(tr, g_ifa_trace, sizeof(tr)));
  ctas = std::min(ctas, kTraceCtas);
  // clock64 cycles per ns, from the longest CTA of the first call
  double rate = 0;
  long long best = 0;
  for (int c = 0; c < ctas; ++c) {
    const unsigned long long* r = tr[0][c];
    unsigned long long last = 0;
    for (int m = 0; m < kTrGlobalEntry; ++m) last = std::max(last, r[m]);
    const long long ns = static_cast<long long>(r[kTrGlobalExit] - r[kTrGlobalEntry]);
    if (ns > best && last > r[kTrEntry]) best = ns, rate = static_cast<double>(last - r[kTrEntry]) / ns;
  }
  if (rate <= 0) rate = 1.7;
  static const char* names[kTrGlobalEntry] = {"entry", "grid wait", "kv_lens", "first copies out", "q raw",
                                              "q ready", "first chunk", "loop done (w0)", "all warps done",
                                              "alu probe", "stats: max", "stats: sum", "row stats",
                                              "out frags", "stored", "counter", "merged"};
  std::printf("  trace %s: %d CTAs, clock %.2f GHz; phase = time from the previous mark (ns), median / max over CTAs\n",
              sh.name, ctas, rate);
  for (int m = 1; m < kTrGlobalEntry; ++m) {
    std::vector<float> d;
    for (int c = 0; c < ctas; ++c) {
      const unsigned long long* r = tr[0][c];
      if (r[m] == 0) continue;
      int pm = m - 1;
      while (pm > 0 && r[pm] == 0) --pm;
      d.push_back(static_cast<float>((r[m] - r[pm]) / rate));
    }
    if (d.empty()) continue;
    const float mx = *std::max_element(d.begin(), d.end());
    std::printf("    %-18s %7.0f %7.0f  (%zu CTAs)\n", names[m], median_of(d), mx, d.size());
  }
  // Calls on one time line (globaltimer, ns from call A's first entry)
  unsigned long long a_in0 = ~0ull, a_in1 = 0, a_out0 = ~0ull, a_out1 = 0, b_in0 = ~0ull, b_in1 = 0, b_out1 = 0;
  std::vector<float> dur;
  for (int c = 0; c < ctas; ++c) {
    const unsigned long long* a = tr[0][c];
    const unsigned long long* b = tr[1][c];
    a_in0 = std::min(a_in0, a[kTrGlobalEntry]), a_in1 = std::max(a_in1, a[kTrGlobalEntry]);
    a_out0 = std::min(a_out0, a[kTrGlobalExit]), a_out1 = std::max(a_out1, a[kTrGlobalExit]);
    b_in0 = std::min(b_in0, b[kTrGlobalEntry]), b_in1 = std::max(b_in1, b[kTrGlobalEntry]);
    b_out1 = std::max(b_out1, b[kTrGlobalExit]);
    dur.push_back(static_cast<float>(a[kTrGlobalExit] - a[kTrGlobalEntry]));
  }
  auto rel = [&](unsigned long long x) { return static_cast<double>(static_cast<long long>(x - a_in0)); };
  std::printf("    CTA entry->exit (globaltimer) median %.0f max %.0f ns\n", median_of(dur),
              *std::max_element(dur.begin(), dur.end()));
  std::printf("    call A: entries 0..%.0f, exits %.0f..%.0f; call B: entries %.0f..%.0f, last exit %.0f "
              "(period %.0f ns)\n",
              rel(a_in1), rel(a_out0), rel(a_out1), rel(b_in0), rel(b_in1), rel(b_out1), rel(b_out1) - rel(a_out1));
  // The same marks on the global time line (each CTA's clock64 mapped from its globaltimer entry):
  // when the CTAs of call A pass each mark, and when call B's wait returns, as percentiles
  // over CTAs (ns from call A's first entry): the spread of "all warps done" is the tail of the
  // stream, "B grid wait" - "A stored" the merge and the kernel boundaries.
  auto at = [&](const unsigned long long* r, int m) {
    return rel(r[kTrGlobalEntry]) + static_cast<double>(static_cast<long long>(r[m] - r[kTrEntry])) / rate;
  };
  auto line = [&](const char* name, int call, int m) {
    std::vector<float> v;
    for (int c = 0; c < ctas; ++c)
      if (tr[call][c][m] != 0 && tr[call][c][kTrEntry] != 0) v.push_back(static_cast<float>(at(tr[call][c], m)));
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    auto pct = [&](double f) { return v[std::min(v.size() - 1, static_cast<size_t>(f * (v.size() - 1) + 0.5))]; };
    std::printf("    at %-20s min %7.0f p10 %7.0f p50 %7.0f p90 %7.0f max %7.0f\n", name, pct(0), pct(0.1), pct(0.5),
                pct(0.9), pct(1));
  };
  {  // how many of call A's CTAs stream at once (first chunk .. all warps done), in 1 us bins
    std::vector<std::pair<double, int>> ev;
    for (int c = 0; c < ctas; ++c) {
      const unsigned long long* r = tr[0][c];
      if (r[kTrFirstChunk] == 0 || r[kTrAllDone] == 0 || r[kTrEntry] == 0) continue;
      ev.push_back({at(r, kTrFirstChunk), 1});
      ev.push_back({at(r, kTrAllDone), -1});
    }
    std::sort(ev.begin(), ev.end());
    if (!ev.empty()) {
      const double t_end = ev.back().first;
      const int nb = static_cast<int>(t_end / 1000.0) + 1;
      std::vector<double> occ(nb, 0.0);  // CTA-ns streaming per bin
      int cur = 0;
      double tprev = 0;
      for (auto& e : ev) {
        for (double t = tprev; t < e.first;) {
          const int bi = static_cast<int>(t / 1000.0);
          const double nxt = std::min(e.first, (bi + 1) * 1000.0);
          occ[bi] += cur * (nxt - t);
          t = nxt;
        }
        cur += e.second, tprev = e.first;
      }
      int lo[4] = {0, 0, 0, 0};
      double mean = 0;
      const int b0 = static_cast<int>(ev.front().first / 1000.0) + 1;
      for (int bi = b0; bi < nb - 1; ++bi) {
        const double c = occ[bi] / 1000.0;
        mean += c;
        for (int k = 0; k < 4; ++k) lo[k] += c < 33 * (k + 1);
      }
      const int n = std::max(1, nb - 1 - b0);
      std::printf("    streaming CTAs per 1 us bin (call A, inner bins %d): mean %.1f; bins < 33: %d, < 66: %d, < 99: %d, < 132: %d\n",
                  n, mean / n, lo[0], lo[1], lo[2], lo[3]);
      std::printf("    series (mean per 5 us):");
      for (int bi = 0; bi + 5 <= nb; bi += 5) {
        double c = 0;
        for (int k = 0; k < 5; ++k) c += occ[bi + k] / 1000.0;
        std::printf(" %.0f", c / 5);
      }
      std::printf("\n");
    }
  }
  line("A grid wait", 0, kTrWaited);
  line("A first chunk", 0, kTrFirstChunk);
  line("A all warps done", 0, kTrAllDone);
  line("A stored", 0, kTrStored);
  line("A merge counted", 0, kTrCounted);
  line("A merged", 0, kTrMerged);
  line("B entry", 1, kTrEntry);
  line("B grid wait", 1, kTrWaited);
  line("B first chunk", 1, kTrFirstChunk);
  // The combine kernel of call A (if the call ran one): where its CTAs sat and when they passed
  // their marks, on the same time line.
  static unsigned long long ct[2][kTraceCombineCtas][kCtMarks];
  CK(cudaMemcpyFromSymbol(ct, g_ifa_ctrace, sizeof(ct)));
  std::vector<int> per_sm(1024, 0), split_sm(1024, 0);
  for (int c = 0; c < ctas; ++c)
    if (tr[0][c][kTrEntry] != 0) split_sm[tr[0][c][kTrSmid] & 1023] = 1;
  int n = 0, on_split = 0;
  for (int c = 0; c < kTraceCombineCtas; ++c) {
    if (ct[0][c][kCtEntry] == 0) continue;
    ++n;
    const int sm = static_cast<int>(ct[0][c][kCtSmid] & 1023);
    on_split += split_sm[sm];
    ++per_sm[sm];
  }
  if (n == 0) return;
  const int sms = static_cast<int>(std::count_if(per_sm.begin(), per_sm.end(), [](int x) { return x > 0; }));
  std::printf("    combine A: %d CTAs on %d SMs (max %d per SM; %d on SMs that ran a split CTA of A)\n", n, sms,
              *std::max_element(per_sm.begin(), per_sm.end()), on_split);
  static const char* cnames[kCtMarks] = {"", "entry", "grid wait", "merged", "exit"};
  for (int m = kCtEntry; m < kCtMarks; ++m) {
    std::vector<float> v;
    for (int c = 0; c < kTraceCombineCtas; ++c)
      if (ct[0][c][m] != 0) v.push_back(static_cast<float>(rel(ct[0][c][m])));
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    std::printf("    at combine A %-9s min %7.0f p50 %7.0f max %7.0f\n", cnames[m], v.front(), v[v.size() / 2], v.back());
  }
}
#endif

int main() {
  const Shape shapes[] = {
      {"h32/8 b16 s32k", 16, 32, 8, 32768, 1},   {"h8/1 b16 s128k", 16, 8, 1, 131072, 8},
      {"h128/128 b1 s32k", 1, 128, 128, 32768, 1}, {"h32/8 b1 s128k", 1, 32, 8, 131072, 16},
      {"h8/1 b1 s128k", 1, 8, 1, 131072, 128},     {"h32/8 b16 s8k", 16, 32, 8, 8192, 1},
      {"h8/1 b1 s16", 1, 8, 1, 16, 1},              {"h8/1 b1 s1k", 1, 8, 1, 1024, 8},
      {"h32/8 b16 s1k", 16, 32, 8, 1024, 1},       {"h32/8 b128 s1k", 128, 32, 8, 1024, 1},
      {"h128/128 b16 s1k", 16, 128, 128, 1024, 1}, {"h8/1 b16 s1k", 16, 8, 1, 1024, 8},
      {"h8/1 b1 s8k", 1, 8, 1, 8192, 64},          {"h8/1 b1 s32k", 1, 8, 1, 32768, 128},
      {"h32/8 b1 s8k", 1, 32, 8, 8192, 16},         {"h32/8 b1 s32k", 1, 32, 8, 32768, 16},
      {"h8/1 b16 s8k", 16, 8, 1, 8192, 8},          {"h8/1 b16 s32k", 16, 8, 1, 32768, 8},
      {"h64/8 b1 s32k", 1, 64, 8, 32768, 16},
      {"h64/8 b1 s8k", 1, 64, 8, 8192, 16},         {"h32/8 b16 s128k", 16, 32, 8, 131072, 1},
      {"h8/1 b128 s32k", 128, 8, 1, 32768, 1},       {"h64/8 b16 s32k", 16, 64, 8, 32768, 1},
      // other split counts than the plan's (planner checks)
      {"h8/1 b1 s1k ns4", 1, 8, 1, 1024, 4},        {"h8/1 b1 s8k ns32", 1, 8, 1, 8192, 32},
      {"h8/1 b1 s32k ns64", 1, 8, 1, 32768, 64},    {"h8/1 b1 s128k ns64", 1, 8, 1, 131072, 64},
      {"h8/1 b16 s1k ns4", 16, 8, 1, 1024, 4},      {"h32/8 b1 s8k ns8", 1, 32, 8, 8192, 8},
      {"h32/8 b1 s32k ns32", 1, 32, 8, 32768, 32},  {"h64/8 b1 s32k ns32", 1, 64, 8, 32768, 32},
      {"h32/8 b1 s32k ns12", 1, 32, 8, 32768, 12},
      // the read-and-merge floor's best split counts (BENCHMARKS.md items 43 and 45)
      {"h8/1 b1 s8k ns16", 1, 8, 1, 8192, 16},      {"h8/1 b1 s32k ns32", 1, 8, 1, 32768, 32},
      {"h8/1 b1 s128k ns32", 1, 8, 1, 131072, 32},  {"h8/1 b16 s8k ns4", 16, 8, 1, 8192, 4},
      {"h64/8 b1 s8k ns8", 1, 64, 8, 8192, 8},
      {"h8/1 b1 s128k ns256", 1, 8, 1, 131072, 256}, {"h8/1 b1 s128k ns131", 1, 8, 1, 131072, 131},
      {"h8/1 b1 s128k ns120", 1, 8, 1, 131072, 120}, {"h8/1 b1 s128k ns124", 1, 8, 1, 131072, 124},
      {"h64/8 b128 s1k", 128, 64, 8, 1024, 1},     {"h8/1 b128 s1k", 128, 8, 1, 1024, 1},
      {"h128/128 b1 s1k", 1, 128, 128, 1024, 1},   {"h32/8 b128 s8k", 128, 32, 8, 8192, 1},
      // multi-wave grids split finer (shorter CTAs, a shorter tail; each pair merged)
      {"h32/8 b128 s1k ns2", 128, 32, 8, 1024, 2},  {"h32/8 b128 s8k ns2", 128, 32, 8, 8192, 2},
      {"h32/8 b128 s8k ns4", 128, 32, 8, 8192, 4},  {"h128/128 b16 s1k ns2", 16, 128, 128, 1024, 2},
      {"h64/8 b128 s8k", 128, 64, 8, 8192, 1},      {"h64/8 b128 s8k ns2", 128, 64, 8, 8192, 2},
      {"h128/128 b16 s8k", 16, 128, 128, 8192, 1},  {"h128/128 b16 s8k ns2", 16, 128, 128, 8192, 2},
      // multi-wave grids, whole or in two (BENCHMARKS.md v16, item 23: no rule separates the gains)
      {"mw h32/8 b32 s8k", 32, 32, 8, 8192, 1},     {"mw h32/8 b32 s8k ns2", 32, 32, 8, 8192, 2},
      {"mw h32/8 b64 s8k", 64, 32, 8, 8192, 1},     {"mw h32/8 b64 s8k ns2", 64, 32, 8, 8192, 2},
      {"mw h32/8 b128 s2k", 128, 32, 8, 2048, 1},   {"mw h32/8 b128 s2k ns2", 128, 32, 8, 2048, 2},
      {"mw h32/8 b128 s4k", 128, 32, 8, 4096, 1},   {"mw h32/8 b128 s4k ns2", 128, 32, 8, 4096, 2},
      {"mw h32/8 b64 s32k", 64, 32, 8, 32768, 1},   {"mw h32/8 b64 s32k ns2", 64, 32, 8, 32768, 2},
      {"mw h8/1 b256 s8k", 256, 8, 1, 8192, 1},     {"mw h8/1 b256 s8k ns2", 256, 8, 1, 8192, 2},
      {"mw h8/1 b128 s8k", 128, 8, 1, 8192, 1},     {"mw h8/1 b264 s8k", 264, 8, 1, 8192, 1},
      {"mw h8/1 b200 s8k", 200, 8, 1, 8192, 1},     {"mw h8/1 b256 s4k", 256, 8, 1, 4096, 1},
      {"mw h8/1 b256 s16k", 256, 8, 1, 16384, 1},   {"mw h8/1 b512 s8k", 512, 8, 1, 8192, 1},
      {"mw h128/128 b8 s8k", 8, 128, 128, 8192, 1}, {"mw h128/128 b8 s8k ns2", 8, 128, 128, 8192, 2},
      {"mw h64/8 b48 s16k", 48, 64, 8, 16384, 1},   {"mw h64/8 b48 s16k ns2", 48, 64, 8, 16384, 2},
      // multi-wave grids whose last groups alone are split ("tN": N splits after W whole groups;
      // the plan's whole_groups): the last wave's groups, or that plus one more wave
      {"mw h32/8 b128 s8k t2", 128, 32, 8, 8192, 2, 924},     {"mw h32/8 b128 s8k t4", 128, 32, 8, 8192, 4, 924},
      {"mw h32/8 b128 s8k t8", 128, 32, 8, 8192, 8, 924},     {"mw h32/8 b128 s8k T4", 128, 32, 8, 8192, 4, 792},
      {"mw h32/8 b128 s8k T8", 128, 32, 8, 8192, 8, 792},
      {"mw h64/8 b128 s8k t4", 128, 64, 8, 8192, 4, 924},     {"mw h64/8 b128 s8k t8", 128, 64, 8, 8192, 8, 924},
      {"mw h128/128 b16 s8k t4", 16, 128, 128, 8192, 4, 1980}, {"mw h128/128 b16 s8k t8", 16, 128, 128, 8192, 8, 1980},
      {"mw h32/8 b64 s32k t4", 64, 32, 8, 32768, 4, 396},     {"mw h32/8 b64 s32k t8", 64, 32, 8, 32768, 8, 396},
      {"mw h8/1 b256 s8k t4", 256, 8, 1, 8192, 4, 132},       {"mw h64/8 b48 s16k t4", 48, 64, 8, 16384, 4, 264},
      {"mw h32/8 b128 s4k t2", 128, 32, 8, 4096, 2, 924},     {"mw h32/8 b128 s4k t4", 128, 32, 8, 4096, 4, 924},
      {"mw h32/8 b128 s16k", 128, 32, 8, 16384, 1},           {"mw h32/8 b128 s16k t4", 128, 32, 8, 16384, 4, 924},
      {"mw h32/8 b128 s16k t8", 128, 32, 8, 16384, 8, 924},
      {"mw h32/8 b34 s8k", 34, 32, 8, 8192, 1},               {"mw h32/8 b34 s8k t8", 34, 32, 8, 8192, 8, 264},
      // single-wave grids of 128 groups (4 SMs idle), whole or split so that SMs balance the end
      {"sw h32/8 b16 s8k ns2", 16, 32, 8, 8192, 2},           {"sw h32/8 b16 s8k ns4", 16, 32, 8, 8192, 4},
      {"sw h32/8 b16 s32k ns2", 16, 32, 8, 32768, 2},         {"sw h32/8 b16 s32k ns4", 16, 32, 8, 32768, 4},
      {"sw h128/128 b1 s8k", 1, 128, 128, 8192, 1},           {"sw h128/128 b1 s8k ns2", 1, 128, 128, 8192, 2},
      {"sw h128/128 b1 s8k ns4", 1, 128, 128, 8192, 4},       {"sw h8/1 b16 s128k ns16", 16, 8, 1, 131072, 16},
      {"sw h32/8 b16 s8k t4", 16, 32, 8, 8192, 4, 96},        {"sw h32/8 b16 s32k t4", 16, 32, 8, 32768, 4, 96},
      // one wave of 124 / 128 / 132 whole groups: does the time follow the bytes (DRAM-bound) or
      // the bytes per SM (the SMs' consumption)?
      {"sm h8/1 b124 s16k", 124, 8, 1, 16384, 1},             {"sm h8/1 b128 s16k", 128, 8, 1, 16384, 1},
      {"sm h8/1 b132 s16k", 132, 8, 1, 16384, 1},             {"sm h124/31 b4 s16k", 4, 124, 31, 16384, 1},
      {"sm h128/32 b4 s16k", 4, 128, 32, 16384, 1},           {"sm h132/33 b4 s16k", 4, 132, 33, 16384, 1},
  };
  constexpr int kWarm = 3, kRuns = 25;
  // ABLATE_KV_DELTA_MB = N > 0: V N MB after K in one allocation (else separate allocations)
  const char* delta_env = std::getenv("ABLATE_KV_DELTA_MB");
  const int64_t kv_delta = delta_env ? std::atoll(delta_env) << 20 : 0;
  const char* page_env = std::getenv("ABLATE_PAGE");
  const int page = page_env ? std::atoi(page_env) : 0;
  const char* tri_env = std::getenv("ABLATE_INT8_TRI");
  // ABLATE_BHSD=1: contiguous caches as [B, H_kv, S, D] (each head's keys contiguous) instead of
  // the sweep's [B, S, H_kv, D]
  const char* bhsd_env = std::getenv("ABLATE_BHSD");
  const bool bhsd = bhsd_env && std::atoi(bhsd_env) > 0;
  const int fill = ABLATE_KV_INT8 == 2                                        ? kFillFp8
                   : ABLATE_KV_INT8 == 1 && tri_env && std::atoi(tri_env) > 0 ? kFillInt8Tri
                                                                              : kFillBf16;
  constexpr int64_t kL2x3 = 180ll << 20;
  std::printf("ablate=%d cache=%s%s\n", DUALOPS_IFA_ABLATE, kKvName, fill == kFillInt8Tri ? " (triangular bytes)" : "");
  for (const Shape& sh : shapes) {
    if (!shape_selected(sh.name)) continue;
    // paged: per blocks of `page` keys per request, B * per blocks in the pool
    const int per = page > 0 ? (sh.S + page - 1) / page : 0;
    const int s_cap = page > 0 ? per * page : sh.S;
    const int64_t kv_elems = static_cast<int64_t>(sh.B) * s_cap * sh.HKV * D;
    const int64_t kv_bytes = 2 * kv_elems * kKvBytes;
    // (tiny calls: 64 sets at most; they time the fixed cost, not the stream)
    const int sets = static_cast<int>(std::min<int64_t>(64, std::max<int64_t>(1, (kL2x3 + kv_bytes - 1) / kv_bytes)));
    const int q_rows = sh.HQ / sh.HKV;
    IncreFlashAttentionTiling t{};
    t.batch = sh.B, t.s_q = 1, t.h_q = sh.HQ, t.h_kv = sh.HKV, t.group = q_rows;
    const int granule = page > 16 ? page : 16;
    t.head_dim = D, t.max_kv_len = s_cap, t.block_size = page, t.kv_tile = 16, t.num_splits = sh.NS;
    t.split_len = ((sh.S + sh.NS - 1) / sh.NS + granule - 1) / granule * granule;
    t.whole_groups = sh.W, t.num_units = sh.W + (sh.B * sh.HKV - sh.W) * sh.NS;
    t.num_cores = 132, t.q_rows = q_rows, t.q_tile_rows = 16, t.kv_dtype_bytes = kKvBytes;
    plan_launch(t);
    std::vector<IncreFlashAttentionParams> ps(sets);
    DeviceAllocs alloc;  // freed at the end of the case
    std::vector<int> lens(sh.B, sh.S);
    // block table: a random permutation of the pool's blocks (fixed seed)
    std::vector<int> table(static_cast<size_t>(sh.B) * per);
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int>(i);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (size_t i = table.size(); i > 1; --i) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(table[i - 1], table[(rng >> 33) % i]);
    }
    // merge counters as the library keeps them (one zeroed buffer per stream): split calls with
    // few enough partials merge in the kernel, the rest run the combine kernel
    void* counters = alloc(kMaxMergeGroups * 4);
    CK(cudaMemset(counters, 0, kMaxMergeGroups * 4));
    for (int s = 0; s < sets; ++s) {
      IncreFlashAttentionParams& p = ps[s];
      p = IncreFlashAttentionParams{};
      p.q = alloc(static_cast<int64_t>(sh.B) * sh.HQ * D * 2);
      if (kv_delta > 0) {  // K and V in one allocation, V kv_delta bytes after K (placement runs)
        p.k = alloc(std::max(kv_delta, kv_elems * kKvBytes) + kv_elems * kKvBytes);
        p.v = static_cast<char*>(p.k) + std::max(kv_delta, kv_elems * kKvBytes);
      } else {
        p.k = alloc(kv_elems * kKvBytes);
        p.v = alloc(kv_elems * kKvBytes);
      }
      if (ABLATE_KV_INT8) {
        p.k_scale = alloc(sh.HKV * D * 4), p.v_scale = alloc(sh.HKV * D * 4);
        k_fill_f32<<<8, 256>>>(static_cast<float*>(p.k_scale), sh.HKV * D, 0.005f, 0.02f);
        k_fill_f32<<<8, 256>>>(static_cast<float*>(p.v_scale), sh.HKV * D, 0.005f, 0.02f);
        if (ABLATE_KV_INT8 == 1) {  // int8: per-channel offsets too (fp8: scales only)
          p.k_offset = alloc(sh.HKV * D * 4), p.v_offset = alloc(sh.HKV * D * 4);
          k_fill_f32<<<8, 256>>>(static_cast<float*>(p.k_offset), sh.HKV * D, -3.f, 3.f);
          k_fill_f32<<<8, 256>>>(static_cast<float*>(p.v_offset), sh.HKV * D, -3.f, 3.f);
        }
      }
      p.out = alloc(static_cast<int64_t>(sh.B) * sh.HQ * D * 2);
      p.lse = alloc(static_cast<int64_t>(sh.B) * sh.HQ * 4);
      p.kv_lens = alloc(sh.B * 4);
      CK(cudaMemcpy(p.kv_lens, lens.data(), sh.B * 4, cudaMemcpyHostToDevice));
      p.merge_counters = counters;
      if (sh.NS > 1) {
        p.o_accum = alloc(static_cast<int64_t>(sh.B) * sh.HKV * sh.NS * q_rows * D * 4);
        p.lse_accum = alloc(static_cast<int64_t>(sh.B) * sh.HKV * sh.NS * q_rows * 4);
      }
      k_fill<<<1024, 256>>>(static_cast<uint32_t*>(p.q), static_cast<int64_t>(sh.B) * sh.HQ * D / 2, 1 + s);
      k_fill<<<4096, 256>>>(static_cast<uint32_t*>(p.k), kv_elems * kKvBytes / 4, 7 + s, fill);
      k_fill<<<4096, 256>>>(static_cast<uint32_t*>(p.v), kv_elems * kKvBytes / 4, 13 + s, fill);
      CK(cudaGetLastError());
      p.q_stride_b = static_cast<int64_t>(sh.HQ) * D, p.q_stride_s = static_cast<int64_t>(sh.HQ) * D, p.q_stride_h = D;
      p.k_stride_0 = p.v_stride_0 = static_cast<int64_t>(page > 0 ? page : sh.S) * sh.HKV * D;
      if (page > 0) {
        p.block_table = alloc(table.size() * 4);
        CK(cudaMemcpy(p.block_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
        p.block_table_stride = per, p.num_blocks = static_cast<int64_t>(sh.B) * per;
      }
      p.k_stride_1 = p.v_stride_1 = static_cast<int64_t>(sh.HKV) * D;
      p.k_stride_2 = p.v_stride_2 = D;
      if (bhsd && page == 0) {
        p.k_stride_1 = p.v_stride_1 = D;
        p.k_stride_2 = p.v_stride_2 = static_cast<int64_t>(sh.S) * D;
      }
      p.out_stride_b = p.out_stride_s = static_cast<int64_t>(sh.HQ) * D, p.out_stride_h = D;
      p.softmax_scale = 0.08838834764831845f;
      p.q_dtype = static_cast<int>(DType::kBfloat16);
      p.kv_dtype = static_cast<int>(ABLATE_KV_INT8 == 1 ? DType::kInt8 : ABLATE_KV_INT8 == 2 ? DType::kFloat8E4m3fn : DType::kBfloat16);
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    auto call_on = [&](int s, cudaStream_t stream) { CK((launch_m<BF, KV, D, 16>(ps[s], t, stream))); };
    // eager launches, then one graph of the same calls
    const float med = median_us_per_call(st, sets, kWarm, kRuns, [&] {
      for (int s = 0; s < sets; ++s) call_on(s, st);
    });
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int s = 0; s < sets; ++s) call_on(s, st);
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    const float medg = median_us_per_call(st, sets, kWarm, kRuns, [&] { CK(cudaGraphLaunch(exec, st)); });
    // the CTA shape (the plan's) and merge (the plan's, as this GPU could run it) of this call
    const int variant = t.variant;
    const int merge = with_variant<BF, KV, D, 16>(
        variant, [&](auto shape) { return merge_mode<BF, KV, D, 16, decltype(shape)::value>(ps[0], t); });
    static const char* kVariantNames[] = {"narrow", "wide", "wide1", "lockstep", "narrow-pf", "wide-pf"};
    static const char* kMergeNames[] = {"kernel", "counter", "cluster"};
    std::printf("%-18s %s ablate=%-3d %-10s %9.1f us eager %9.1f us graph %7.0f GB/s  (sets %d, splits %d, %s, %s%s%s%s%s%s)\n",
                sh.name, kKvName, DUALOPS_IFA_ABLATE, ABLATE_TAG, med, medg,
                kv_bytes / (medg * 1e3), sets, sh.NS, kVariantNames[variant], sh.NS > 1 ? kMergeNames[merge] : "-",
                kv_delta > 0 ? ", V-K MB " : "", kv_delta > 0 ? delta_env : "", page > 0 ? ", page " : "",
                page > 0 ? page_env : "", bhsd && page == 0 ? ", BHSD" : "");
#if DUALOPS_IFA_TRACE
    {
      const int a = sets / 2, bset = sets > 1 ? a + 1 : a;
      const void* outs[2] = {ps[a].out, ps[bset].out};
      static unsigned long long zero[2][kTraceCtas][kTrMarks];
      CK(cudaMemcpyToSymbol(g_ifa_trace, zero, sizeof(zero)));
      static unsigned long long czero[2][kTraceCombineCtas][kCtMarks];
      CK(cudaMemcpyToSymbol(g_ifa_ctrace, czero, sizeof(czero)));
      CK(cudaMemcpyToSymbol(g_ifa_trace_out, outs, sizeof(outs)));
      k_spin<<<1, 1, 0, st>>>(200000);
      CK(cudaGraphLaunch(exec, st));
      CK(cudaStreamSynchronize(st));
      print_trace(sh, t.num_units * ((q_rows + 15) / 16));
      const void* none[2] = {nullptr, nullptr};
      CK(cudaMemcpyToSymbol(g_ifa_trace_out, none, sizeof(none)));
    }
#endif
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(st));
  }
  return 0;
}

// The least time a split-KV decode call can take on this GPU for its bytes: CTAs that read the
// cache and do nothing else with it (no q, no scales, no softmax, no p.v: the bytes land in
// shared memory and one word of each 16 KB is kept), write a partial of the attention's size and
// merge the partials as a decode call must. A ratio target such as "8-bit time <= 0.6x the bf16 time" is out of reach on
// a row whose floor for the 8-bit bytes is already above 0.6x the bf16 call there
// (BENCHMARKS.md item 43), and for any pair of calls built alike where the two floors' ratio is
// above 0.6: an 8-bit call spends at least as much above its floor as its bf16 peer (item 45).
//
// A row is G groups (batch x KV heads) of `bytes` cache bytes each (K and V together, laid out
// one group after another); a group's bytes are split over S CTAs, whose partials (q rows x D
// fp32 each) are merged per group
//   - counter: the group's last CTA to finish (atomic ticket) sums its partials, one kernel;
//   - kernel: a second kernel, launched as a programmatic dependent, sums them (a CTA per 32
//     floats, its warps over the splits);
//   - none (S = 1 only): the one CTA writes its group's result.
// Every kernel is a programmatic dependent launch whose CTAs prefetch the first bytes of their
// range into L2 before the grid-dependency wait, as the split kernel does. Timing as the
// ablation driver: a CUDA graph of one call per input set (sets >= 3x L2, at most 64), median
// of 25 replays over the calls. Every (S, merge) pair is timed; the floor is the row's minimum.
//
// Build and run: benchmarks/cuda/run_read_floor.sh (needs an sm_90 GPU).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_common.cuh"

constexpr int kThreads = 256;
// Each CTA streams its range through a ring of kBufs shared-memory buffers of kBuf bytes, filled
// by bulk copies (cp.async.bulk, the TMA's 1-D form) that one thread issues: 128 KB in flight per
// CTA and no instruction per 16 B, the cheapest read an SM has.
constexpr int kBuf = 16 << 10, kBufs = 8;
constexpr int kSmem = kBuf * kBufs;
enum Merge : int { kNone = 0, kCounter = 1, kKernel = 2 };

struct Call {
  const uint4* src;     // [G][words]
  float* partials;      // [G][S][part_floats]
  float* out;           // [G][part_floats]
  unsigned* counters;   // [G], zero between calls
  int64_t words;        // 16-B words per group
  int splits, part_floats;
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void wait_parity(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n"
      "W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra W;\n}" ::"r"(bar), "r"(parity) : "memory");
}

// One CTA per (group, split): its range of the group's bytes, read into shared memory; one word
// of every buffer is XORed into the partial, so nothing can be dropped.
template <int kMerge>
__global__ void __launch_bounds__(kThreads) k_read(Call c) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t bars[kBufs];
  __shared__ uint32_t acc_s;
  const int g = blockIdx.x / c.splits, s = blockIdx.x % c.splits, tid = threadIdx.x;
  const int64_t per = (c.words + c.splits - 1) / c.splits;
  const int64_t w0 = min(s * per, c.words), w1 = min(w0 + per, c.words);
  const char* base = reinterpret_cast<const char*>(c.src + g * c.words + w0);
  const int64_t bytes = (w1 - w0) * 16;
  // L2 prefetch hints (data not used) of the first ring fill, before the wait
  for (int64_t o = int64_t(tid) * 128; o < min(bytes, int64_t(kSmem)); o += kThreads * 128)
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(base + o));
  if (tid == 0) {
    for (int i = 0; i < kBufs; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bars[i])));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (tid == 0) {
    const int64_t n = (bytes + kBuf - 1) / kBuf;
    auto issue = [&](int64_t i) {
      const uint32_t len = static_cast<uint32_t>(min(int64_t(kBuf), bytes - i * kBuf));
      bulk_load(smem_u32(ring + (i % kBufs) * kBuf), base + i * kBuf, len, smem_u32(&bars[i % kBufs]));
    };
    for (int64_t i = 0; i < min(n, int64_t(kBufs)); ++i) issue(i);
    uint32_t acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      wait_parity(smem_u32(&bars[i % kBufs]), static_cast<uint32_t>((i / kBufs) & 1));
      acc ^= *reinterpret_cast<const volatile uint32_t*>(ring + (i % kBufs) * kBuf);
      if (i + kBufs < n) issue(i + kBufs);
    }
    acc_s = acc;
  }
  __syncthreads();
  // a partial of the attention's size: q rows x D floats
  const float val = static_cast<float>(acc_s & 0xffu);
  float* dst = kMerge == kNone ? c.out + g * c.part_floats : c.partials + (int64_t(g) * c.splits + s) * c.part_floats;
  for (int j = tid; j < c.part_floats; j += kThreads) dst[j] = val + j;
  if constexpr (kMerge == kCounter) {
    __shared__ unsigned ticket;
    __threadfence();
    __syncthreads();
    if (tid == 0) ticket = atomicAdd(c.counters + g, 1u);
    __syncthreads();
    if (ticket != static_cast<unsigned>(c.splits) - 1) return;
    __threadfence();
    const float* p = c.partials + int64_t(g) * c.splits * c.part_floats;
    for (int j = tid; j < c.part_floats; j += kThreads) {
      float sum = 0.f;
      for (int k = 0; k < c.splits; ++k) sum += __ldcg(p + int64_t(k) * c.part_floats + j);
      c.out[g * c.part_floats + j] = sum;
    }
    if (tid == 0) c.counters[g] = 0;
  }
}

// The merge kernel: a CTA per 32 output floats of a group; its 8 warps each sum every 8th
// split's values of those floats (all loads of a thread independent), then one shared sum.
constexpr int kMergeCols = 32, kMergeSlices = 8;
__global__ void __launch_bounds__(kMergeCols * kMergeSlices) k_merge(Call c) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  __shared__ float part[kMergeSlices][kMergeCols];
  const int tiles = c.part_floats / kMergeCols;
  const int g = blockIdx.x / tiles, j = (blockIdx.x % tiles) * kMergeCols + threadIdx.x % kMergeCols;
  const int slice = threadIdx.x / kMergeCols;
  const float* p = c.partials + int64_t(g) * c.splits * c.part_floats + j;
  float sum = 0.f;
#pragma unroll 16
  for (int k = slice; k < c.splits; k += kMergeSlices) sum += p[int64_t(k) * c.part_floats];
  part[slice][threadIdx.x % kMergeCols] = sum;
  __syncthreads();
  if (slice == 0) {
    for (int i = 1; i < kMergeSlices; ++i) sum += part[i][threadIdx.x];
    c.out[int64_t(g) * c.part_floats + j] = sum;
  }
}

__global__ void k_fill(uint32_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint32_t>(i) * 2654435761u ^ seed;
}

template <typename K>
void launch_pdl(K kernel, int grid, int block, int smem, cudaStream_t st, const Call& c) {
  cudaLaunchAttribute a[1];
  a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid), cfg.blockDim = dim3(block), cfg.dynamicSmemBytes = smem, cfg.stream = st, cfg.attrs = a, cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, kernel, c));
}

void call(const Call& c, int groups, int merge, cudaStream_t st) {
  const int grid = groups * c.splits;
  if (merge == kNone) launch_pdl(k_read<kNone>, grid, kThreads, kSmem, st, c);
  if (merge == kCounter) launch_pdl(k_read<kCounter>, grid, kThreads, kSmem, st, c);
  if (merge == kKernel) {
    launch_pdl(k_read<kKernel>, grid, kThreads, kSmem, st, c);
    launch_pdl(k_merge, groups * c.part_floats / kMergeCols, kMergeCols * kMergeSlices, 0, st, c);
  }
}

struct Row {
  const char* name;
  int groups;
  int64_t bytes;  // per group, K and V
  int q_rows;     // partial = q_rows x 128 fp32
};

int main() {
  const Row rows[] = {
      // 8-bit caches of the rows the 0.6x target misses (K + V = 2 x S x 128 bytes per group)
      {"8-bit h8/1 b1 s8k", 1, 2ll << 20, 8},      {"8-bit h8/1 b1 s32k", 1, 8ll << 20, 8},
      {"8-bit h8/1 b1 s128k", 1, 32ll << 20, 8},   {"8-bit h8/1 b16 s8k", 16, 2ll << 20, 8},
      {"8-bit h32/8 b1 s8k", 8, 2ll << 20, 4},     {"8-bit h64/8 b1 s8k", 8, 2ll << 20, 8},
      {"8-bit h32/8 b1 s32k", 8, 8ll << 20, 4},    {"8-bit h64/8 b1 s32k", 8, 8ll << 20, 8},
      // the same rows' bf16 bytes: the floor under our bf16 calls
      {"bf16 h8/1 b1 s8k", 1, 4ll << 20, 8},       {"bf16 h8/1 b1 s32k", 1, 16ll << 20, 8},
      {"bf16 h8/1 b1 s128k", 1, 64ll << 20, 8},    {"bf16 h8/1 b16 s8k", 16, 4ll << 20, 8},
      {"bf16 h32/8 b1 s8k", 8, 4ll << 20, 4},      {"bf16 h64/8 b1 s8k", 8, 4ll << 20, 8},
      {"bf16 h32/8 b1 s32k", 8, 16ll << 20, 4},    {"bf16 h64/8 b1 s32k", 8, 16ll << 20, 8},
      // next to nothing to read (16 KB per group): the cost of the call itself -- launches, grid
      // boundaries, partials and merge -- which no split-KV call of that grid goes below
      {"16 KB h8/1 b1", 1, 16ll << 10, 8},         {"16 KB h8/1 b16", 16, 16ll << 10, 8},
      {"16 KB h32/8 b1", 8, 16ll << 10, 4},
  };
  const char* only = std::getenv("FLOOR_ROWS");  // substrings, comma-separated
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaFuncSetAttribute(k_read<kNone>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(k_read<kCounter>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(k_read<kKernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  constexpr int kWarm = 3, kRuns = 25, kMaxSplits = 256;
  constexpr int64_t kL2x3 = 180ll << 20;
  static const char* kMergeNames[] = {"none", "counter", "kernel"};
  for (const Row& r : rows) {
    if (only && *only && std::strstr(only, r.name) == nullptr) continue;
    const int64_t set_bytes = r.groups * r.bytes;
    const int sets = static_cast<int>(std::min<int64_t>(64, std::max<int64_t>(1, (kL2x3 + set_bytes - 1) / set_bytes)));
    const int part_floats = r.q_rows * 128;
    std::vector<Call> calls(sets);
    DeviceAllocs alloc;  // freed at the end of the case
    unsigned* counters = static_cast<unsigned*>(alloc(r.groups * 4));
    CK(cudaMemset(counters, 0, r.groups * 4));
    for (int s = 0; s < sets; ++s) {
      Call& c = calls[s];
      void* src = alloc(set_bytes);
      k_fill<<<1024, 256>>>(static_cast<uint32_t*>(src), set_bytes / 4, 17u + s);
      c.src = static_cast<const uint4*>(src);
      c.partials = static_cast<float*>(alloc(int64_t(r.groups) * kMaxSplits * part_floats * 4));
      c.out = static_cast<float*>(alloc(int64_t(r.groups) * part_floats * 4));
      c.counters = counters, c.words = r.bytes / 16, c.part_floats = part_floats;
    }
    CK(cudaDeviceSynchronize());
    float best = 1e30f;
    char best_cfg[64] = "";
    std::printf("%-22s %3d x %6.2f MB, %2d sets:", r.name, r.groups, r.bytes / 1048576.0, sets);
    for (int splits = 1; splits <= kMaxSplits; splits *= 2) {
      if (r.groups * splits > sms) break;  // one CTA per SM (128 KB of shared memory each)
      for (int merge = kNone; merge <= kKernel; ++merge) {
        if ((merge == kNone) != (splits == 1)) continue;  // one split needs no merge; more do
        for (Call& c : calls) c.splits = splits;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (const Call& c : calls) call(c, r.groups, merge, st);
        CK(cudaStreamEndCapture(st, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        const float med = median_us_per_call(st, sets, kWarm, kRuns, [&] { CK(cudaGraphLaunch(exec, st)); });
        std::printf(" %d/%s %.2f", splits, kMergeNames[merge], med);
        if (med < best) best = med, std::snprintf(best_cfg, sizeof best_cfg, "%d splits, %s", splits, kMergeNames[merge]);
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
      }
    }
    std::printf("\n%-22s floor %.2f us (%s), %.0f GB/s\n", r.name, best, best_cfg, set_bytes / (best * 1e3));
  }
  return 0;
}

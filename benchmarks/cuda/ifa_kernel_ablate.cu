// Times the real IFA split kernel (backends/cuda/incre_flash_attention) on bf16 caches (int8
// with -DABLATE_KV_INT8=1), d 128, bf16 q,
// built with DUALOPS_IFA_ABLATE = N (see ifa_config.cuh): each bit removes one part of the
// per-chunk math, so the time a part costs is the difference to the N = 0 build. Results are
// wrong in the ablated builds; only the time is read. run_kernel_ablate.sh builds every N.
//
// Method as ifa_stream_read.cu: one run = one call on every input set (sets rotated so a run
// streams >= 3x L2), started behind a ~100 us GPU spin; median of 25 runs after 3 warm-ups.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ifa_launch.cuh"

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

using namespace dualops;
using namespace dualops::cuda::ifa;
using BF = __nv_bfloat16;
constexpr int D = 128;
#ifndef ABLATE_TAG
#define ABLATE_TAG "?"
#endif
#ifndef ABLATE_KV_INT8
#define ABLATE_KV_INT8 0
#endif
using KV = std::conditional_t<ABLATE_KV_INT8 != 0, int8_t, BF>;
constexpr int kKvBytes = sizeof(KV);

__global__ void k_spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}
// bf16 values of moderate magnitude (never NaN / zero): real data, not zeros (METHOD.md)
__global__ void k_fill(uint32_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed * 40503u ^ static_cast<uint32_t>(i >> 32);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = (x & 0x807f807fu) | 0x3c003c00u;
  }
}
__global__ void k_fill_f32(float* p, int n, float lo, float hi) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = lo + (hi - lo) * ((i * 2654435761u >> 8) & 0xffff) / 65535.f;
}

struct Shape {
  const char* name;
  int B, HQ, HKV, S, NS;
};

int main() {
  const Shape shapes[] = {
      {"h32/8 b16 s32k", 16, 32, 8, 32768, 1},   {"h8/1 b16 s128k", 16, 8, 1, 131072, 8},
      {"h128/128 b1 s32k", 1, 128, 128, 32768, 1}, {"h32/8 b1 s128k", 1, 32, 8, 131072, 16},
      {"h8/1 b1 s128k", 1, 8, 1, 131072, 128},     {"h32/8 b16 s8k", 16, 32, 8, 8192, 1},
      {"h8/1 b1 s16", 1, 8, 1, 16, 1},              {"h8/1 b1 s1k", 1, 8, 1, 1024, 8},
      {"h32/8 b16 s1k", 16, 32, 8, 1024, 1},       {"h32/8 b128 s1k", 128, 32, 8, 1024, 1},
      {"h128/128 b16 s1k", 16, 128, 128, 1024, 1}, {"h8/1 b16 s1k", 16, 8, 1, 1024, 8},
  };
  constexpr int kWarm = 3, kRuns = 25;
  constexpr int64_t kL2x3 = 180ll << 20;
  std::printf("ablate=%d cache=%s\n", DUALOPS_IFA_ABLATE, ABLATE_KV_INT8 ? "int8" : "bf16");
  for (const Shape& sh : shapes) {
    const int64_t kv_elems = static_cast<int64_t>(sh.B) * sh.S * sh.HKV * D;
    const int64_t kv_bytes = 2 * kv_elems * kKvBytes;
    // (tiny calls: 64 sets at most; they time the fixed cost, not the stream)
    const int sets = static_cast<int>(std::min<int64_t>(64, std::max<int64_t>(1, (kL2x3 + kv_bytes - 1) / kv_bytes)));
    const int q_rows = sh.HQ / sh.HKV;
    IncreFlashAttentionTiling t{};
    t.version = 1, t.batch = sh.B, t.s_q = 1, t.h_q = sh.HQ, t.h_kv = sh.HKV, t.group = q_rows;
    t.head_dim = D, t.max_kv_len = sh.S, t.block_size = 0, t.kv_tile = 16, t.num_splits = sh.NS;
    t.split_len = ((sh.S + sh.NS - 1) / sh.NS + 15) / 16 * 16, t.num_units = sh.B * sh.HKV * sh.NS;
    t.num_cores = 132, t.q_rows = q_rows, t.q_tile_rows = 16, t.kv_dtype_bytes = kKvBytes;
    std::vector<IncreFlashAttentionParams> ps(sets);
    std::vector<void*> allocs;
    auto alloc = [&](int64_t bytes) {
      void* ptr = nullptr;
      CK(cudaMalloc(&ptr, bytes));
      allocs.push_back(ptr);
      return ptr;
    };
    std::vector<int> lens(sh.B, sh.S);
    for (int s = 0; s < sets; ++s) {
      IncreFlashAttentionParams& p = ps[s];
      p = IncreFlashAttentionParams{};
      p.q = alloc(static_cast<int64_t>(sh.B) * sh.HQ * D * 2);
      p.k = alloc(kv_elems * kKvBytes);
      p.v = alloc(kv_elems * kKvBytes);
      if (ABLATE_KV_INT8) {
        p.k_scale = alloc(sh.HKV * D * 4), p.v_scale = alloc(sh.HKV * D * 4);
        p.k_offset = alloc(sh.HKV * D * 4), p.v_offset = alloc(sh.HKV * D * 4);
        k_fill_f32<<<8, 256>>>(static_cast<float*>(p.k_scale), sh.HKV * D, 0.005f, 0.02f);
        k_fill_f32<<<8, 256>>>(static_cast<float*>(p.v_scale), sh.HKV * D, 0.005f, 0.02f);
        k_fill_f32<<<8, 256>>>(static_cast<float*>(p.k_offset), sh.HKV * D, -3.f, 3.f);
        k_fill_f32<<<8, 256>>>(static_cast<float*>(p.v_offset), sh.HKV * D, -3.f, 3.f);
      }
      p.out = alloc(static_cast<int64_t>(sh.B) * sh.HQ * D * 2);
      p.lse = alloc(static_cast<int64_t>(sh.B) * sh.HQ * 4);
      p.kv_lens = alloc(sh.B * 4);
      CK(cudaMemcpy(p.kv_lens, lens.data(), sh.B * 4, cudaMemcpyHostToDevice));
      if (sh.NS > 1) {
        p.o_accum = alloc(static_cast<int64_t>(t.num_units) * q_rows * D * 4);
        p.lse_accum = alloc(static_cast<int64_t>(t.num_units) * q_rows * 4);
      }
      k_fill<<<1024, 256>>>(static_cast<uint32_t*>(p.q), static_cast<int64_t>(sh.B) * sh.HQ * D / 2, 1 + s);
      k_fill<<<4096, 256>>>(static_cast<uint32_t*>(p.k), kv_elems * kKvBytes / 4, 7 + s);
      k_fill<<<4096, 256>>>(static_cast<uint32_t*>(p.v), kv_elems * kKvBytes / 4, 13 + s);
      CK(cudaGetLastError());
      p.q_stride_b = static_cast<int64_t>(sh.HQ) * D, p.q_stride_s = static_cast<int64_t>(sh.HQ) * D, p.q_stride_h = D;
      p.k_stride_0 = p.v_stride_0 = static_cast<int64_t>(sh.S) * sh.HKV * D;
      p.k_stride_1 = p.v_stride_1 = static_cast<int64_t>(sh.HKV) * D;
      p.k_stride_2 = p.v_stride_2 = D;
      p.out_stride_b = p.out_stride_s = static_cast<int64_t>(sh.HQ) * D, p.out_stride_h = D;
      p.softmax_scale = 0.08838834764831845f;
      p.q_dtype = static_cast<int>(DType::kBfloat16);
      p.kv_dtype = static_cast<int>(ABLATE_KV_INT8 ? DType::kInt8 : DType::kBfloat16);
    }
    auto call = [&](int s) {
      const cudaError_t e = launch_variant<BF, KV, D, 16, kWide>(ps[s], t, 0);
      CK(e);
    };
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int r = 0; r < kWarm + kRuns; ++r) {
      k_spin<<<1, 1>>>(200000);
      CK(cudaEventRecord(e0));
      for (int s = 0; s < sets; ++s) call(s);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= kWarm) ts.push_back(ms * 1000.f / sets);
    }
    std::sort(ts.begin(), ts.end());
    const float med = ts[ts.size() / 2];
    std::printf("%-18s %s ablate=%-3d %-10s %9.1f us %7.0f GB/s  (sets %d, splits %d)\n", sh.name,
                ABLATE_KV_INT8 ? "int8" : "bf16", DUALOPS_IFA_ABLATE, ABLATE_TAG, med, kv_bytes / (med * 1e3), sets,
                sh.NS);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    for (void* a : allocs) CK(cudaFree(a));
  }
  return 0;
}

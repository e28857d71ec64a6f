// K/V stream-read microbenchmark for the IFA split kernel's cache layout (BENCHMARKS.md, IFA
// CUDA section, "K/V load strategies"). Question: which load strategy reads a contiguous
// [B, S, H_kv, 128] bf16 K and V cache, one CTA per (batch, KV head, key range), as fast as
// cuDNN's SDPA kernel does (~4.6-4.7 TB/s on an H200 against our 4.2-4.3)?
//
// Every kernel does what the split kernel's loads do and nothing else: each CTA streams the K
// and V rows (256 B each, H_kv * 256 B apart) of its unit through shared memory (or registers
// for the plain-load variants) and XORs every 32-bit word it read into one word per call, so
// no load can be dropped; the XOR over the whole call must equal the XOR of the set's K and V
// words (checked once per variant and shape: it fails if any tile was skipped).
//
// Strategies: (a) per-warp cp.async over 16-key chunks (what the kernel does now), (b) per-CTA
// cp.async over 64/128-key tiles in a multi-stage ring (cuDNN's sm80 shape), (c) TMA tiles
// (cp.async.bulk.tensor.2d) on an mbarrier ring fed by one producer thread, (d) plain 16-B
// ld.global.nc loads, several in flight per thread, with optional L2 hints. Ceilings: a
// device-to-device cudaMemcpy and a grid-stride read of one contiguous buffer.
//
// Build and run: benchmarks/cuda/run_stream_read.sh (nvcc -O3 -std=c++17 -arch=sm_90a).
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "ifa_stream_read_kernels.cuh"

// ---- host -----------------------------------------------------------------------------------
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeTiled g_encode = nullptr;

constexpr int kWarm = 3, kRuns = 25;
// One run = one call on every set (sets rotate so a run streams >= 3x L2); returns the median
// time of one call in microseconds.
static float time_calls(int n_sets, const std::function<void(int)>& call) {
  return median_us_per_call(0, n_sets, kWarm, kRuns, [&] {
    for (int s = 0; s < n_sets; ++s) call(s);
  });
}

struct Shape {
  const char* name;
  int B, S, H;
  int plan_splits;  // the split count our planner picks for this shape
};

struct Variant {
  std::string name;
  int threads;
  int smem;
  bool tma;
  int tile_keys;  // split_len must be a multiple of this
  void* fn;
};

template <typename K>
static void set_smem(K kern, int smem) {
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
}

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;  // --only A,B,...: run the variants whose name contains one of them
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") quick = true;
    if (std::string(argv[i]) == "--only" && i + 1 < argc) only = argv[++i];
  }
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const int sms = prop.multiProcessorCount;
  const int64_t l2 = prop.l2CacheSize;
  printf("device: %s, %d SMs, L2 %lld MB, smem/block opt-in %zu KB\n", prop.name, sms,
         static_cast<long long>(l2 >> 20), prop.sharedMemPerBlockOptin >> 10);

  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&g_encode), 12000,
                                      cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !g_encode) {
    fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    return 1;
  }

  std::vector<Shape> shapes = {
      {"h8/1 b1 s128k", 1, 131072, 1, 128},   {"h8/1 b16 s128k", 16, 131072, 1, 8},
      {"h32/8 b1 s32k", 1, 32768, 8, 16},     {"h32/8 b1 s128k", 1, 131072, 8, 16},
      {"h32/8 b16 s32k", 16, 32768, 8, 1},    {"h32/8 b16 s128k", 16, 131072, 8, 1},
      {"h128/128 b1 s32k", 1, 32768, 128, 1},
      // the BHSD layout (each head's keys contiguous) of h32/8 b16 s128k: B*H runs of S rows
      {"bhsd h32/8 b16 s128k", 128, 131072, 1, 1},
  };
  if (quick) shapes = {{"h32/8 b1 s128k", 1, 131072, 8, 16}};

  // Pool: the largest rotation of any shape (sets of [K | V], >= 3x L2 per run).
  const int64_t rot_bytes = 3 * l2;
  int64_t pool_bytes = 0;
  for (auto& s : shapes) {
    const int64_t set = 2LL * s.B * s.S * s.H * kRowBytes;
    const int64_t n_sets = std::max<int64_t>(1, (rot_bytes + set - 1) / set);
    pool_bytes = std::max(pool_bytes, n_sets * set);
  }
  char* pool;
  CK(cudaMalloc(&pool, pool_bytes));
  k_fill<<<sms * 8, 256>>>(reinterpret_cast<uint32_t*>(pool), pool_bytes / 4);
  CK(cudaGetLastError());
  unsigned* d_out;
  CK(cudaMalloc(&d_out, 64 * sizeof(unsigned)));
  CK(cudaDeviceSynchronize());
  printf("pool %.2f GB\n", pool_bytes / 1e9);

  // ---- ceilings ----
  {
    const int64_t half = std::min<int64_t>(pool_bytes / 2, 1LL << 30);
    const float us = time_calls(1, [&](int) { CK(cudaMemcpyAsync(pool + half, pool, half, cudaMemcpyDeviceToDevice)); });
    printf("CEIL  cudaMemcpy D2D %.0f MB: %.1f us, %.0f GB/s (read+write)\n", half / 1e6, us, 2.0 * half / us / 1e3);
    k_fill<<<sms * 8, 256>>>(reinterpret_cast<uint32_t*>(pool), pool_bytes / 4);  // restore the pattern
    CK(cudaDeviceSynchronize());
    for (int ctas : {sms, 2 * sms, 4 * sms}) {
      const int64_t bytes = std::min<int64_t>(pool_bytes, 2LL << 30);
      const float us2 = time_calls(1, [&](int) {
        k_read_flat<8><<<ctas, 512>>>(reinterpret_cast<const uint4*>(pool), bytes / 16, d_out);
      });
      printf("CEIL  flat read %.0f MB grid %d x 512 thr: %.1f us, %.0f GB/s\n", bytes / 1e6, ctas, us2, bytes / us2 / 1e3);
    }
  }

  // ---- variants ----
  std::vector<Variant> vars;
#define ADD(name, thr, smem, tma, tk, kern) \
  do {                                      \
    set_smem(kern, (smem));                 \
    vars.push_back({name, thr, smem, tma, tk, reinterpret_cast<void*>(kern)}); \
  } while (0)
  // (a) ours: wide = 8 warps x 3 stages (1 CTA/SM), narrow = 4 warps x 3 stages (2 CTAs/SM)
  ADD("a warp-cp 8w x3 ef (ours wide)", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1>));
  ADD("a warp-cp 8w x3 nohint", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 0>));
  ADD("a warp-cp 4w x3 ef (ours narrow)", 128, 4 * 3 * 8192, false, 128, (k_warp_cp<4, 3, 1>));
  ADD("a warp-cp 8w x2 ef", 256, 8 * 2 * 8192, false, 128, (k_warp_cp<8, 2, 1>));
  ADD("a warp-cp 8w x3 ef ls1 (kWideLs)", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 0, 1>));
  ADD("a warp-cp 8w x3 ef ls2 (tile order)", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 0, 2>));
  ADD("a warp-cp 8w x3 nohint ls1", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 0, 0, 1>));
  ADD("a+ 8w x3 ef +256 FMA/chunk", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 256>));
  ADD("a+ 8w x3 ef +512 FMA/chunk", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 512>));
  ADD("a+ 8w x3 ef +1024 FMA/chunk", 256, 8 * 3 * 8192, false, 128, (k_warp_cp<8, 3, 1, 1024>));
  ADD("a+ 4w x3 ef +512 FMA/chunk", 128, 4 * 3 * 8192, false, 128, (k_warp_cp<4, 3, 1, 512>));
  // (b) per-CTA tiles
  ADD("b cta-cp 128thr tk128 x2 nohint", 128, 2 * 65536, false, 128, (k_cta_cp<128, 128, 2, 0>));
  ADD("b cta-cp 128thr tk128 x3 nohint", 128, 3 * 65536, false, 128, (k_cta_cp<128, 128, 3, 0>));
  ADD("b cta-cp 256thr tk128 x3 nohint", 256, 3 * 65536, false, 128, (k_cta_cp<256, 128, 3, 0>));
  ADD("b cta-cp 256thr tk128 x3 ef", 256, 3 * 65536, false, 128, (k_cta_cp<256, 128, 3, 1>));
  ADD("b cta-cp 256thr tk128 x2 ef", 256, 2 * 65536, false, 128, (k_cta_cp<256, 128, 2, 1>));
  ADD("b cta-cp 128thr tk128 x2 ef", 128, 2 * 65536, false, 128, (k_cta_cp<128, 128, 2, 1>));
  ADD("b cta-cp 128thr tk64 x3 nohint", 128, 3 * 32768, false, 64, (k_cta_cp<128, 64, 3, 0>));
  ADD("b cta-cp 128thr tk64 x2 nohint", 128, 2 * 32768, false, 64, (k_cta_cp<128, 64, 2, 0>));
  // (c) TMA: 1 producer warp + 4 consumer warps
  ADD("c tma tk128 x3 nohint", 160, 3 * 65536 + 1024, true, 128, (k_tma<128, 3, 4, 0>));
  ADD("c tma tk128 x3 ef", 160, 3 * 65536 + 1024, true, 128, (k_tma<128, 3, 4, 1>));
  ADD("c tma tk64 x4 nohint", 160, 4 * 32768 + 1024, true, 64, (k_tma<64, 4, 4, 0>));
  ADD("c tma tk64 x6 nohint", 160, 6 * 32768 + 1024, true, 64, (k_tma<64, 6, 4, 0>));
  ADD("c tma tk64 x3 nohint", 160, 3 * 32768 + 1024, true, 64, (k_tma<64, 3, 4, 0>));
  ADD("c tma tk128 x2 nohint", 160, 2 * 65536 + 1024, true, 128, (k_tma<128, 2, 4, 0>));
  // (d) plain loads
  ADD("d ldg 256thr u4 nohint", 256, 0, false, 64, (k_ldg<256, 4, 0>));
  ADD("d ldg 256thr u8 nohint", 256, 0, false, 128, (k_ldg<256, 8, 0>));
  ADD("d ldg 256thr u8 ef", 256, 0, false, 128, (k_ldg<256, 8, 1>));
  ADD("d ldg 256thr u8 256B", 256, 0, false, 128, (k_ldg<256, 8, 2>));
  ADD("d ldg 512thr u8 nohint", 512, 0, false, 256, (k_ldg<512, 8, 0>));
#undef ADD

  printf("\n%-20s %-34s %6s %6s %9s %9s %5s %s\n", "shape", "variant", "splits", "ctas", "us", "GB/s", "ok",
         "ctas/SM(occ)");
  for (const auto& sh : shapes) {
    const int64_t tbytes = static_cast<int64_t>(sh.B) * sh.S * sh.H * kRowBytes;  // K (= V) bytes
    const int64_t set = 2 * tbytes;
    const int n_sets = static_cast<int>(std::max<int64_t>(1, (rot_bytes + set - 1) / set));
    // reference XOR of every set's K and V words
    std::vector<unsigned> ref(n_sets);
    for (int s = 0; s < n_sets; ++s) {
      CK(cudaMemset(d_out, 0, sizeof(unsigned)));
      k_read_flat<8><<<sms * 2, 512>>>(reinterpret_cast<const uint4*>(pool + s * set), set / 16, d_out);
      CK(cudaMemcpy(&ref[s], d_out, sizeof(unsigned), cudaMemcpyDeviceToHost));
    }
    // one tensor map per shape over the pool as [rows, H*128] bf16 (K of set s at row 2*s*R,
    // V at (2*s+1)*R with R = B*S rows)
    CUtensorMap maps[2];  // box rows 64 / 128
    const int64_t rows = pool_bytes / (static_cast<int64_t>(sh.H) * kRowBytes);
    for (int m = 0; m < 2; ++m) {
      cuuint64_t gdim[2] = {static_cast<cuuint64_t>(sh.H) * kD, static_cast<cuuint64_t>(rows)};
      cuuint64_t gstride[1] = {static_cast<cuuint64_t>(sh.H) * kRowBytes};
      cuuint32_t box[2] = {kD, m == 0 ? 64u : 128u};
      cuuint32_t estr[2] = {1, 1};
      CUresult r = g_encode(&maps[m], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, pool, gdim, gstride, box, estr,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
        return 1;
      }
    }
    const int64_t R = static_cast<int64_t>(sh.B) * sh.S;
    for (const auto& v : vars) {
      if (!only.empty()) {  // comma-separated substrings
        bool hit = false;
        for (size_t a = 0; a <= only.size();) {
          size_t e = only.find(',', a);
          if (e == std::string::npos) e = only.size();
          if (e > a && v.name.find(only.substr(a, e - a)) != std::string::npos) hit = true;
          a = e + 1;
        }
        if (!hit) continue;
      }
      for (int mult : {1, 2, 4}) {
        const int splits = sh.plan_splits * mult;
        const int split_len = sh.S / splits;
        if (split_len % v.tile_keys != 0 || split_len < v.tile_keys) continue;
        const int ctas = sh.B * sh.H * splits;
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.fn, v.threads, v.smem));
        auto launch = [&](int s) {
          Work w{pool + s * set, pool + s * set + tbytes, sh.B, sh.S, sh.H, splits, split_len, d_out + 1 + s,
                 2 * s * R, (2 * s + 1) * R};
          if (v.tma) {
            const CUtensorMap& mp = maps[v.tile_keys == 64 ? 0 : 1];
            void* args[] = {&w, const_cast<CUtensorMap*>(&mp)};
            CK(cudaLaunchKernel(v.fn, dim3(ctas), dim3(v.threads), args, v.smem, 0));
          } else {
            void* args[] = {&w};
            CK(cudaLaunchKernel(v.fn, dim3(ctas), dim3(v.threads), args, v.smem, 0));
          }
        };
        // correctness: one call per set from zero, XOR must match
        CK(cudaMemset(d_out, 0, 64 * sizeof(unsigned)));
        for (int s = 0; s < n_sets; ++s) launch(s);
        CK(cudaDeviceSynchronize());
        std::vector<unsigned> got(n_sets);
        CK(cudaMemcpy(got.data(), d_out + 1, n_sets * sizeof(unsigned), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int s = 0; s < n_sets; ++s) ok = ok && got[s] == ref[s];
        const float us = time_calls(n_sets, launch);
        printf("%-20s %-34s %6d %6d %9.1f %9.0f %5s %d\n", sh.name, v.name.c_str(), splits, ctas, us,
               set / us / 1e3, ok ? "ok" : "BAD", occ);
        fflush(stdout);
      }
    }
  }
  CK(cudaFree(pool));
  CK(cudaFree(d_out));
  return 0;
}

// MLA latent-cache stream-read microbenchmark. Question: how fast can one CTA per SM stream
// 64-token tiles of a paged bf16 MLA cache (576 values = 1152 B per token, pages of 64 tokens
// in a permuted order) into shared memory, with the copy patterns the wgmma_t kernel could use
// and no attention math? The wgmma_t kernel streams b64 h_q16 s_k4096 at ~84 % of the copy
// bandwidth; this separates the copy pattern's own ceiling from the kernel's schedule.
//
// Every kernel reads each of the call's tiles once into shared memory and XORs every 32-bit word
// it read into one word per call (checked against the XOR of the whole pool: every page is read
// exactly once per call). Variants:
//   tile ring: whole 72 KiB tiles in STAGES slots, one producer thread, 8 consumer warps;
//     box64  - 9 TMA boxes of 64 values x 64 tokens (the wgmma_t kernel's box), block-major
//     box8   - 72 TMA boxes of 64 values x 8 tokens, token-group-major (each token group's
//              1152-B rows are requested together: contiguous 9 KiB spans)
//     bulk   - 9 contiguous 8 KiB 1-D bulk copies (the contiguous-read ceiling; wrong layout)
//   chains: the wgmma_t kernel's copy schedule: two warpgroups, each with a ring of SLOTS 8 KiB
//     block slots and its own issuing thread, taking alternate tiles; per tile: wait for its 9
//     blocks, read them (plus `spin` clocks of stand-in work), barrier, then issue the blocks
//     that fit (the rest of the next tile, the start of the one after).
//   producer static / claim: the same two chains fed by a producer warp each, which issues a
//     tile's blocks as soon as their slots are free; static: the CTA's own tiles; claim: every
//     chain takes its next tile from one counter of the whole call (dynamic balancing).
// Ceilings: a device-to-device cudaMemcpy (read + write) and a grid-stride read of the pool.
//
// Build and run: benchmarks/cuda/run_mla_stream_read.sh (nvcc -O3 -std=c++17 -arch=sm_90a).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../../backends/cuda/common/cp_async.cuh"
#include "../../backends/cuda/common/tma.cuh"
#include "bench_common.cuh"

namespace cm = dualops::cuda::common;

constexpr int kTok = 64;                   // tokens per tile (= page)
constexpr int kDim = 576;                  // bf16 values per token
constexpr int kRow = kDim * 2;             // bytes per token
constexpr int kNb = kDim / 64;             // 8 KiB blocks per tile
constexpr int kBlock = kTok * 128;         // 8 KiB
constexpr int kTileBytes = kNb * kBlock;   // 72 KiB

struct Work {
  const char* pool;
  const int* ids;       // page of each tile of the call
  int ntiles, per_cta;  // tiles of the call, tiles per CTA
  unsigned* out;
  int* ctr;             // k_claim: [0] tiles claimed, [1] CTAs done (both 0 between calls)
};

__device__ __forceinline__ uint32_t saddr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void vxor(unsigned& acc, uint4 a) {
  asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n lop3.b32 %0, %0, %3, %4, 0x96;\n"
               : "+r"(acc)
               : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w));
}
// Reads BYTES of shared memory from `base` by NTHR threads (thread `t`), all loads in flight.
template <int BYTES, int NTHR>
__device__ __forceinline__ void read_xor(unsigned& acc, uint32_t base, int t) {
  static_assert(BYTES % (NTHR * 16) == 0, "whole 16-B loads per thread");
  constexpr int kN = BYTES / (NTHR * 16);
  uint4 r[kN];
#pragma unroll
  for (int i = 0; i < kN; ++i)
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[i].x), "=r"(r[i].y), "=r"(r[i].z), "=r"(r[i].w)
                 : "r"(base + (i * NTHR + t) * 16));
#pragma unroll
  for (int i = 0; i < kN; ++i) vxor(acc, r[i]);
}
__device__ __forceinline__ void finish(unsigned* out, unsigned acc) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicXor(out, acc);
}
__device__ __forceinline__ void bulk_1d(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(pol)
      : "memory");
}
__device__ __forceinline__ void named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// Issues tile `t` of the call (page ids[t]) into `dst` (72 KiB), completing on `bar`.
template <int MODE>  // 0 box64, 1 box8, 2 bulk
__device__ __forceinline__ void issue_tile(const Work& w, const CUtensorMap* m64, const CUtensorMap* m8, int t,
                                           uint32_t dst, uint32_t bar) {
  const uint64_t pol = cm::evict_first_policy();
  const int page = w.ids[t];
  cm::mbar_expect_tx(bar, kTileBytes);
  if constexpr (MODE == 0) {
    for (int j = 0; j < kNb; ++j) cm::tma_load_2d_hint(dst + j * kBlock, m64, 64 * j, page * kTok, bar, pol);
  } else if constexpr (MODE == 1) {
    for (int g = 0; g < kTok / 8; ++g)
      for (int j = 0; j < kNb; ++j)
        cm::tma_load_2d_hint(dst + j * kBlock + g * 1024, m8, 64 * j, page * kTok + 8 * g, bar, pol);
  } else {
    const char* src = w.pool + static_cast<int64_t>(page) * kTileBytes;
    for (int j = 0; j < kNb; ++j) bulk_1d(dst + j * kBlock, src + j * kBlock, kBlock, bar, pol);
  }
}

// Tile ring: warp 8 lane 0 produces, warps 0-7 consume.
template <int STAGES, int MODE>
__global__ void __launch_bounds__(288, 1) k_tile_ring(Work w, const __grid_constant__ CUtensorMap m64,
                                                      const __grid_constant__ CUtensorMap m8) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  const int t0 = blockIdx.x * w.per_cta, n = max(min(w.per_cta, w.ntiles - t0), 0);
  const uint32_t base = (saddr(smem) + 1023) & ~1023u;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) cm::mbar_init(saddr(&full[s])), cm::mbar_init(saddr(&empty[s]), 8);
    cm::mbar_init_fence();
  }
  __syncthreads();
  unsigned acc = 0;
  if (threadIdx.x == 256) {
    for (int t = 0; t < n; ++t) {
      const int s = t % STAGES;
      if (t >= STAGES) cm::mbar_wait(saddr(&empty[s]), ((t / STAGES) - 1) & 1);
      issue_tile<MODE>(w, &m64, &m8, t0 + t, base + s * kTileBytes, saddr(&full[s]));
    }
  } else if (threadIdx.x < 256) {
    for (int t = 0; t < n; ++t) {
      const int s = t % STAGES;
      cm::mbar_wait(saddr(&full[s]), (t / STAGES) & 1);
      read_xor<kTileBytes, 256>(acc, base + s * kTileBytes, threadIdx.x);
      __syncwarp();
      if ((threadIdx.x & 31) == 0) cm::mbar_arrive(saddr(&empty[s]));
    }
  }
  if (threadIdx.x < 256) finish(w.out, acc);
}

// The wgmma_t kernel's copy schedule (two chains of alternate tiles, SLOTS block slots each).
template <int SLOTS>
__global__ void __launch_bounds__(256, 1) k_chains(Work w, const __grid_constant__ CUtensorMap m64, int spin) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[2][SLOTS];
  const int t0 = blockIdx.x * w.per_cta, n = max(min(w.per_cta, w.ntiles - t0), 0);
  const int c = threadIdx.x >> 7, tid = threadIdx.x & 127;
  const uint32_t ring = ((saddr(smem) + 1023) & ~1023u) + c * SLOTS * kBlock;
  const uint32_t bar0 = saddr(&bars[c][0]);
  if (tid == 0) {
    for (int s = 0; s < SLOTS; ++s) cm::mbar_init(bar0 + 8 * s);
    cm::mbar_init_fence();
  }
  __syncthreads();
  const int nt = n > c ? (n - c + 1) / 2 : 0;  // this chain's tiles: c, c + 2, ...
  const int total = nt * kNb;
  int g_next = 0;
  const uint64_t pol = cm::evict_first_policy();
  auto issue = [&](int g_end) {
    g_end = min(g_end, total);
    if (tid != 0) return;
    for (; g_next < g_end; ++g_next) {
      const int m = g_next / kNb, j = g_next - m * kNb, s = g_next % SLOTS;
      const int page = w.ids[t0 + 2 * m + c];
      cm::mbar_expect_tx(bar0 + 8 * s, kBlock);
      cm::tma_load_2d_hint(ring + s * kBlock, &m64, 64 * j, page * kTok, bar0 + 8 * s, pol);
    }
  };
  issue(SLOTS);
  uint32_t phase = 0;
  unsigned acc = 0;
  for (int j = 0; j < nt; ++j) {
    for (int i = 0; i < kNb; ++i) {
      const int s = (j * kNb + i) % SLOTS;
      cm::mbar_wait(bar0 + 8 * s, (phase >> s) & 1u);
      phase ^= 1u << s;
    }
    for (int i = 0; i < kNb; ++i) read_xor<kBlock, 128>(acc, ring + ((j * kNb + i) % SLOTS) * kBlock, tid);
    if (spin > 0) {
      const long long c0 = clock64();
      while (clock64() - c0 < spin) {
      }
    }
    named_sync(1 + c, 128);  // every reader of tile j's slots is done
    issue((j + 1) * kNb + SLOTS);
  }
  finish(w.out, acc);
}

// Warp-specialized chains (a producer warp per chain), each chain with SLOTS 8 KiB block slots:
// the producer takes the chain's tiles, waits for free slots and issues their boxes; the
// consumer warpgroup waits for a tile's 9 blocks, reads them, spins `spin` clocks and frees the
// slots. DYN false: the CTA's static tiles (t0 + 2m + c, as k_chains); DYN true: every chain
// claims its next tile from one counter of the whole call (atomicAdd), so chains that run faster
// take more tiles. The last CTA to finish sets the counter back to 0.
template <int SLOTS, bool DYN>
__global__ void __launch_bounds__(320, 1) k_claim(Work w, const __grid_constant__ CUtensorMap m64, int spin) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[2][SLOTS], empty[2][SLOTS];
  __shared__ int chain_tile[2][8];
  const int t0 = blockIdx.x * w.per_cta, n = max(min(w.per_cta, w.ntiles - t0), 0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c = warp < 8 ? warp >> 2 : warp - 8;
  const uint32_t ring = ((saddr(smem) + 1023) & ~1023u) + c * SLOTS * kBlock;
  if (threadIdx.x == 0) {
    for (int k = 0; k < 2; ++k)
      for (int s = 0; s < SLOTS; ++s) cm::mbar_init(saddr(&full[k][s])), cm::mbar_init(saddr(&empty[k][s]), 4);
    cm::mbar_init_fence();
  }
  __syncthreads();
  unsigned acc = 0;
  if (warp >= 8) {
    if (lane == 0) {
      const uint64_t pol = cm::evict_first_policy();
      for (int m = 0;; ++m) {
        int t;
        if constexpr (DYN) {
          t = atomicAdd(w.ctr, 1);
        } else {
          t = 2 * m + c < n ? t0 + 2 * m + c : w.ntiles;
        }
        const bool valid = t < w.ntiles;
        const int page = valid ? w.ids[t] : 0;
        for (int j = 0; j < (valid ? kNb : 1); ++j) {
          const int g = m * kNb + j, s = g % SLOTS;
          if (g >= SLOTS) cm::mbar_wait(saddr(&empty[c][s]), ((g / SLOTS) - 1) & 1);
          if (j == 0) chain_tile[c][m & 7] = valid ? t : -1;
          if (valid) {
            cm::mbar_expect_tx(saddr(&full[c][s]), kBlock);
            cm::tma_load_2d_hint(ring + s * kBlock, &m64, 64 * j, page * kTok, saddr(&full[c][s]), pol);
          } else {
            cm::mbar_arrive(saddr(&full[c][s]));  // no tile m: the consumers stop there
          }
        }
        if (!valid) break;
      }
    }
  } else {
    const int tid = threadIdx.x & 127;
    for (int m = 0;; ++m) {
      const int g0 = m * kNb;
      cm::mbar_wait(saddr(&full[c][g0 % SLOTS]), (g0 / SLOTS) & 1);
      if (chain_tile[c][m & 7] < 0) break;
      for (int i = 1; i < kNb; ++i) cm::mbar_wait(saddr(&full[c][(g0 + i) % SLOTS]), ((g0 + i) / SLOTS) & 1);
      for (int i = 0; i < kNb; ++i) read_xor<kBlock, 128>(acc, ring + ((g0 + i) % SLOTS) * kBlock, tid);
      if (spin > 0) {
        const long long c0 = clock64();
        while (clock64() - c0 < spin) {
        }
      }
      __syncwarp();
      if (lane == 0)
        for (int i = 0; i < kNb; ++i) cm::mbar_arrive(saddr(&empty[c][(g0 + i) % SLOTS]));
    }
    finish(w.out, acc);
  }
  if constexpr (DYN) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(w.ctr + 1, 1) == static_cast<int>(gridDim.x) - 1) w.ctr[0] = 0, w.ctr[1] = 0;
    }
  }
}

__global__ void k_fill(uint32_t* p, int64_t n) {
  const int64_t stride = gridDim.x * static_cast<int64_t>(blockDim.x);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    p[i] = static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>(i >> 13);
}
__global__ void k_read_flat(const uint4* p, int64_t n16, unsigned* out) {
  unsigned acc = 0;
  const int64_t stride = gridDim.x * static_cast<int64_t>(blockDim.x);
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (; i + 7 * stride < n16; i += 8 * stride) {
    uint4 r[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) r[u] = p[i + u * stride];
#pragma unroll
    for (int u = 0; u < 8; ++u) vxor(acc, r[u]);
  }
  for (; i < n16; i += stride) vxor(acc, p[i]);
  finish(out, acc);
}

int main(int argc, char** argv) {
  int pages = 4096;  // b64 s_k4096: 64 requests x 64 pages of 64 tokens
  if (argc > 1) pages = std::atoi(argv[1]);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const int64_t bytes = static_cast<int64_t>(pages) * kTileBytes;
  printf("device: %s, %d SMs; %d pages of 64 tokens x 1152 B = %.1f MB per call\n", prop.name, sms, pages, bytes / 1e6);
  DeviceAllocs alloc;
  char* pool = static_cast<char*>(alloc(2 * bytes));  // second half: the copy ceiling's target
  unsigned* out = static_cast<unsigned*>(alloc(64 * sizeof(unsigned)));
  int* ids = static_cast<int*>(alloc(pages * sizeof(int)));
  int* ctr = static_cast<int*>(alloc(2 * sizeof(int)));
  CK(cudaMemset(ctr, 0, 2 * sizeof(int)));
  std::vector<int> h(pages);
  std::iota(h.begin(), h.end(), 0);
  std::shuffle(h.begin(), h.end(), std::mt19937(7));
  CK(cudaMemcpy(ids, h.data(), pages * sizeof(int), cudaMemcpyHostToDevice));
  k_fill<<<sms * 8, 256>>>(reinterpret_cast<uint32_t*>(pool), bytes / 4);
  CK(cudaMemset(out, 0, 64 * sizeof(unsigned)));
  k_read_flat<<<sms * 2, 512>>>(reinterpret_cast<const uint4*>(pool), bytes / 16, out);
  unsigned ref = 0;
  CK(cudaMemcpy(&ref, out, sizeof(unsigned), cudaMemcpyDeviceToHost));

  CUtensorMap m64, m8;
  if (!cm::make_tmap_2d_16bit_sw128(&m64, pool, kDim, static_cast<uint64_t>(pages) * kTok, kRow, 64) ||
      !cm::make_tmap_2d_16bit_sw128(&m8, pool, kDim, static_cast<uint64_t>(pages) * kTok, kRow, 8)) {
    fprintf(stderr, "tensor map encoding failed\n");
    return 1;
  }
  const float cp_us = median_us_per_call(0, 1, 3, 25, [&] {
    CK(cudaMemcpyAsync(pool + bytes, pool, bytes, cudaMemcpyDeviceToDevice));
  });
  const double copy_gbs = 2.0 * bytes / cp_us / 1e3;
  printf("CEIL  cudaMemcpy D2D: %.1f us, %.0f GB/s (read + write)\n", cp_us, copy_gbs);
  for (int ctas : {sms, 2 * sms, 4 * sms}) {
    const float us = median_us_per_call(0, 1, 3, 25, [&] {
      k_read_flat<<<ctas, 512>>>(reinterpret_cast<const uint4*>(pool), bytes / 16, out + 1);
    });
    printf("CEIL  flat read, %d x 512 threads: %.1f us, %.0f GB/s (%.0f %% of copy)\n", ctas, us, bytes / us / 1e3,
           100.0 * bytes / us / 1e3 / copy_gbs);
  }

  struct Var {
    std::string name;
    void* fn;
    int threads, smem, spin;  // spin < 0: a tile-ring kernel (no spin argument)
  };
  std::vector<Var> vars;
  auto add = [&](const std::string& name, auto kern, int threads, int smem, int spin) {
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    vars.push_back({name, reinterpret_cast<void*>(kern), threads, smem, spin});
  };
  add("tile ring x2 box64", k_tile_ring<2, 0>, 288, 2 * kTileBytes + 1024, -1);
  add("tile ring x2 box8 ", k_tile_ring<2, 1>, 288, 2 * kTileBytes + 1024, -1);
  add("tile ring x2 bulk ", k_tile_ring<2, 2>, 288, 2 * kTileBytes + 1024, -1);
  add("tile ring x3 box64", k_tile_ring<3, 0>, 288, 3 * kTileBytes + 1024, -1);
  add("tile ring x3 box8 ", k_tile_ring<3, 1>, 288, 3 * kTileBytes + 1024, -1);
  add("tile ring x3 bulk ", k_tile_ring<3, 2>, 288, 3 * kTileBytes + 1024, -1);
  for (int spin : {0, 3000}) {
    add("chains 13 slots spin " + std::to_string(spin), k_chains<13>, 256, 2 * 13 * kBlock + 1024, spin);
    add("chains 11 slots spin " + std::to_string(spin), k_chains<11>, 256, 2 * 11 * kBlock + 1024, spin);
  }
  for (int spin : {0, 3000, 6000, 9000}) {
    add("producer static spin " + std::to_string(spin), k_claim<13, false>, 320, 2 * 13 * kBlock + 1024, spin);
    add("producer claim  spin " + std::to_string(spin), k_claim<13, true>, 320, 2 * 13 * kBlock + 1024, spin);
  }
  printf("\n%-28s %6s %6s %9s %9s %7s %s\n", "variant", "ctas", "tiles", "us", "GB/s", "% copy", "ok");
  for (const auto& v : vars) {
    for (int ctas : {sms - sms % 8, sms}) {  // H100: 128 CTAs x 32 tiles (the plan's), 132 x 31-32
      const int per = (pages + ctas - 1) / ctas;
      Work w{pool, ids, pages, per, out + 2, ctr};
      auto launch = [&] {
        if (v.spin < 0) {
          void* args[] = {&w, &m64, &m8};
          CK(cudaLaunchKernel(v.fn, dim3(ctas), dim3(v.threads), args, v.smem, 0));
        } else {
          int spin = v.spin;
          void* args[] = {&w, &m64, &spin};
          CK(cudaLaunchKernel(v.fn, dim3(ctas), dim3(v.threads), args, v.smem, 0));
        }
      };
      CK(cudaMemset(out + 2, 0, sizeof(unsigned)));
      launch();
      unsigned got = 0;
      CK(cudaMemcpy(&got, out + 2, sizeof(unsigned), cudaMemcpyDeviceToHost));
      const float us = median_us_per_call(0, 1, 3, 25, launch);
      printf("%-28s %6d %6d %9.1f %9.0f %7.1f %s\n", v.name.c_str(), ctas, per, us, bytes / us / 1e3,
             100.0 * bytes / us / 1e3 / copy_gbs, got == ref ? "ok" : "BAD");
      fflush(stdout);
    }
  }
  return 0;
}

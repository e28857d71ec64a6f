// What compute-sanitizer's racecheck takes as ordering two threads' shared-memory accesses, for
// kernels whose two warpgroups synchronize on their own named barriers (the MLA wgmma_t kernel's
// tile chains, the wgmma kernel's loops) and exchange data across a CTA barrier, a named-barrier
// hand-off or an mbarrier.
//
//   racecheck_barriers even      both warpgroups pass 2 of their own barriers, then exchange
//   racecheck_barriers uneven    warpgroup 0 passes 3, warpgroup 1 passes 2, then the same exchange
//   racecheck_barriers leveled   as uneven, then WgBarrier::level() before the exchange
//   racecheck_barriers handoff   as even, then a hand-off instead of the exchange: warpgroup 1
//                                writes, arrives on a CTA-wide named barrier (bar.arrive), warpgroup
//                                0 waits on it (bar.sync) and reads
//   racecheck_barriers handoff_ahead   the same hand-off with warpgroup 1 (the producer) one
//                                of its own barriers ahead
//   racecheck_barriers handoff_behind  the same hand-off with warpgroup 0 (the consumer) one ahead
//   racecheck_barriers mbar      as even, then two rounds of a hand-off through mbarriers
//                                (common::mbar_arrive / mbar_wait): warpgroup 1 writes and
//                                arrives on `full`, warpgroup 0 waits, reads and arrives on
//                                `empty`, which warpgroup 1 waits for before it writes again
//   racecheck_barriers mbar_ahead / mbar_behind   the same with warpgroup 1 / 0 one of its own
//                                barriers ahead
//
// Every mode is race-free. Under `compute-sanitizer --tool racecheck`, `uneven` and
// `handoff_ahead` report RAW hazards between the writes and the reads, as if the barrier did not
// separate them; the other modes report none. The tool orders two threads' accesses across
// barriers by how many barriers each thread has passed (a write is seen as ordered before a read
// only when the reader has passed more barriers than the writer had at the write; bar.arrive
// does not count), which holds for CTA-wide barriers but not for warpgroups that pass unequal
// numbers of their own barriers; accesses on either side of an mbarrier it orders whatever those
// counts (the MLA wgmma kernel's hand-offs, common::MbarHandoffs).
// run_racecheck_barriers.sh runs every mode.
#include <cstdio>
#include <cstring>

#include "../../backends/cuda/common/tma.cuh"
#include "../../backends/cuda/mla_decode/mla_primitives.cuh"

using dualops::cuda::mla::WgBarrier;
namespace cm = dualops::cuda::common;

__global__ void exchange_kernel(int extra0, int extra1, int kind, float* out) {
  __shared__ float area[256];
  __shared__ float red[2][2][4];  // [warpgroup][step parity][warp]
  __shared__ alignas(8) unsigned long long mb[2];  // kind 3: full, empty
  const int c = threadIdx.x >> 7, tid = threadIdx.x & 127;
  const uint32_t full = cm::smem_addr(&mb[0]), empty = cm::smem_addr(&mb[1]);
  if (threadIdx.x == 0) {
    cm::mbar_init(full, 128);
    cm::mbar_init(empty, 128);
  }
  __syncthreads();
  WgBarrier wb(c);
  float acc = 0.f;
  // The warpgroup's own phase: a reduction through shared memory between its barriers.
  for (int j = 0; j < 2 + (c == 0 ? extra0 : extra1); ++j) {
    if ((tid & 31) == 0) red[c][j & 1][tid >> 5] = acc + j;
    wb.sync();
    acc += red[c][j & 1][(tid >> 5) ^ 1];
  }
  if (kind == 1) {
    wb.level();
  } else {
    __syncthreads();  // the last readers of red are done
  }
  if (kind == 2) {  // hand-off from warpgroup 1 to warpgroup 0 through named barrier 3
    if (c == 1) {
      area[threadIdx.x] = acc;
      asm volatile("bar.arrive 3, 256;" ::: "memory");
    } else {
      asm volatile("bar.sync 3, 256;" ::: "memory");
      acc += area[threadIdx.x ^ 128];
    }
  } else if (kind == 3) {  // two rounds through mbarriers: full (1 -> 0), empty (0 -> 1)
    for (int round = 0; round < 2; ++round) {
      if (c == 1) {
        if (round) cm::mbar_wait(empty, 0);
        area[threadIdx.x] = acc + round;
        cm::mbar_arrive(full);
      } else {
        cm::mbar_wait(full, round);
        acc += area[threadIdx.x ^ 128];
        cm::mbar_arrive(empty);
      }
    }
  } else {
    area[threadIdx.x] = acc;
    __syncthreads();
    acc += area[threadIdx.x ^ 128];
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  // mode: extra barriers of warpgroup 0 and 1, kind (0 exchange, 1 leveled exchange, 2 named-barrier
  // hand-off, 3 mbarrier hand-offs)
  constexpr int kModes = 9;
  const char* names[kModes] = {"even",          "uneven", "leveled",    "handoff",     "handoff_ahead",
                               "handoff_behind", "mbar",   "mbar_ahead", "mbar_behind"};
  const int cfg[kModes][3] = {{0, 0, 0}, {1, 0, 0}, {1, 0, 1}, {0, 0, 2}, {0, 1, 2},
                              {1, 0, 2}, {0, 0, 3}, {0, 1, 3}, {1, 0, 3}};
  int m = 0;
  while (m < kModes && strcmp(mode, names[m])) ++m;
  if (m == kModes) {
    fprintf(stderr,
            "usage: racecheck_barriers even|uneven|leveled|handoff|handoff_ahead|handoff_behind|mbar|mbar_ahead|"
            "mbar_behind\n");
    return 2;
  }
  float* out = nullptr;
  if (cudaMalloc(&out, 4 * 256 * sizeof(float)) != cudaSuccess) return 1;
  exchange_kernel<<<4, 256>>>(cfg[m][0], cfg[m][1], cfg[m][2], out);
  const cudaError_t e = cudaDeviceSynchronize();
  printf("racecheck_barriers %s: %s\n", mode, cudaGetErrorString(e));
  cudaFree(out);
  return e == cudaSuccess ? 0 : 1;
}

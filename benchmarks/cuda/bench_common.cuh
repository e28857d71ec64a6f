// What the CUDA microbenchmarks share: the error check, one case's device allocations, the GPU
// spin that each timed run starts behind (so the host's launches are queued before the clock
// starts), and the median per call of a run of `calls` calls, eager or a CUDA graph replay
// (METHOD.md: warm-ups, then the median of many runs).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// The device buffers of one benchmark case: alloc(bytes) allocates one, all are freed together
// when the case's scope ends.
struct DeviceAllocs {
  std::vector<void*> ptrs;
  void* operator()(int64_t bytes) {
    void* p = nullptr;
    CK(cudaMalloc(&p, bytes));
    ptrs.push_back(p);
    return p;
  }
  ~DeviceAllocs() {
    for (void* p : ptrs) CK(cudaFree(p));
  }
};

__global__ void k_spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

inline float median_of(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over `runs` runs (after `warm` more) of run() -- which enqueues `calls` calls on st --
// in us per call, each run behind a ~100 us spin.
template <typename Run>
float median_us_per_call(cudaStream_t st, int calls, int warm, int runs, Run run) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int r = 0; r < warm + runs; ++r) {
    k_spin<<<1, 1, 0, st>>>(200000);
    CK(cudaEventRecord(e0, st));
    run();
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= warm) ts.push_back(ms * 1000.f / calls);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return median_of(ts);
}

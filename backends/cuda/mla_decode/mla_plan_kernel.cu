// Device-side MLA planner: the schedule of dualops.tiling.plan_mla_decode (same packed layout:
// header, parts, num_splits) computed from a device cache_seqlens, with no host sync, so that a
// whole decode step (plan + every layer's attention) can be captured in a CUDA graph. The
// greedy fill is sequential by nature; one thread runs it over lengths staged in shared memory
// (a few microseconds for hundreds of requests).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "mla_config.cuh"
#include "mla_decode.h"

namespace dualops::cuda::mla {

constexpr int kPlanThreads = 256;
constexpr int kPlanSmemLens = 4096;

__device__ __forceinline__ int req_len(const int* s_len, const int* seqlens, int i) {
  return i < kPlanSmemLens ? s_len[i] : max(seqlens[i], 0);
}

__global__ void __launch_bounds__(kPlanThreads) mla_plan_kernel(const int* __restrict__ seqlens, int* __restrict__ plan,
                                                                 const __grid_constant__ MlaDecodeTiling hdr) {
  __shared__ int s_len[kPlanSmemLens];
  __shared__ int s_sum[kPlanThreads / 32];
  const int B = hdr.batch, P = hdr.num_sm_parts, bt = hdr.block_tokens, ovh = hdr.fixed_overhead;
  int local = 0;
  for (int i = threadIdx.x; i < B; i += kPlanThreads) {
    const int len = max(seqlens[i], 0);
    if (i < kPlanSmemLens) s_len[i] = len;
    local += max((len + bt - 1) / bt, 1) + ovh;
  }
  for (int o = 16; o > 0; o >>= 1) local += __shfl_xor_sync(0xffffffffu, local, o);
  if ((threadIdx.x & 31) == 0) s_sum[threadIdx.x >> 5] = local;
  __syncthreads();
  if (threadIdx.x != 0) return;
  int total = 0;
  for (int w = 0; w < kPlanThreads / 32; ++w) total += s_sum[w];
  const int payload = (total + P - 1) / P + ovh;
  int* parts = plan + kHeaderInts;
  int* ns = parts + P * hdr.part_stride;
  ns[0] = 0;
  int req = 0, blk = 0, split = 0, cum = 0;
  for (int part = 0; part < P; ++part) {
    const int begin_req = req, begin_tok = blk * bt, begin_split = split;
    int room = payload;
    while (req < B) {
      const int left = max((req_len(s_len, seqlens, req) + bt - 1) / bt, 1) - blk;
      if (room >= left + ovh) {
        cum += split + 1;
        ns[req + 1] = cum;
        room -= left + ovh;
        ++req;
        blk = split = 0;
      } else {
        if (room - ovh > 0) {
          blk += room - ovh;
          ++split;
        }
        break;
      }
    }
    int end_req, end_tok;
    if (blk > 0) {
      end_req = req;
      end_tok = blk * bt;
    } else {
      end_req = req - 1;
      end_tok = end_req >= 0 ? req_len(s_len, seqlens, end_req) : 0;
    }
    int* rec = parts + part * hdr.part_stride;
    for (int k = 0; k < hdr.part_stride; ++k) rec[k] = 0;
    if (begin_req > end_req) {
      rec[0] = B;
      rec[1] = B - 1;
    } else {
      rec[0] = begin_req;
      rec[1] = end_req;
      rec[2] = begin_tok;
      rec[3] = min(end_tok, req_len(s_len, seqlens, end_req));
      rec[4] = begin_split;
    }
  }
  for (int part = 0; part < P; ++part) {
    int* rec = parts + part * hdr.part_stride;
    if (rec[0] <= rec[1]) {
      rec[5] = ns[rec[0] + 1] - ns[rec[0]] > 1;
      rec[6] = ns[rec[1] + 1] - ns[rec[1]] > 1;
    }
  }
  MlaDecodeTiling h = hdr;
  h.payload = payload;
  h.total_splits = cum;
  const int* hw = reinterpret_cast<const int*>(&h);
  for (int k = 0; k < kHeaderInts; ++k) plan[k] = hw[k];
}

}  // namespace dualops::cuda::mla

namespace dualops::cuda {

const char* mla_plan_on_device(const int* cache_seqlens, int* plan, const MlaDecodeTiling& header,
                               cudaStream_t stream) {
  static thread_local char msg[256];
  if (!cache_seqlens || !plan) return "mla_plan_on_device: cache_seqlens and plan must be device addresses";
  if (header.batch < 1 || header.num_sm_parts < 1 || header.block_tokens < 1 || header.part_stride < 7)
    return "mla_plan_on_device: the header needs batch >= 1, num_sm_parts >= 1, block_tokens >= 1, part_stride >= 7";
  mla::mla_plan_kernel<<<1, mla::kPlanThreads, 0, stream>>>(cache_seqlens, plan, header);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::snprintf(msg, sizeof msg, "mla_plan_on_device (cuda): CUDA error: %s", cudaGetErrorString(err));
    return msg;
  }
  return nullptr;
}

}  // namespace dualops::cuda

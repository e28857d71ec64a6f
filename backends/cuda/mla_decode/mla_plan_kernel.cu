// Device-side MLA planner: the schedule of dualops.tiling.plan_mla_decode (same packed layout:
// header, parts, num_splits) computed from a device cache_seqlens, with no host sync, so that a
// whole decode step (plan + every layer's attention) can be captured in a CUDA graph. The
// greedy fill is sequential by nature: one thread runs it, on the lengths, block counts, split
// counts and part records staged in shared memory; then the CTA writes them out. Batches too
// large for the staging (or GPUs without that much shared memory per block) run the same fill on
// global memory.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "mla_config.cuh"
#include "mla_decode.h"

namespace dualops::cuda::mla {

constexpr int kPlanThreads = 256;
constexpr int kPlanSmemMax = 200 * 1024;  // dynamic shared memory for the staging

// Ints of shared memory the staging needs: lengths and block counts [B each], num_splits [B + 1],
// part records [P x stride].
__host__ __device__ inline int64_t plan_stage_ints(const MlaDecodeTiling& h) {
  return 3 * static_cast<int64_t>(h.batch) + 1 + static_cast<int64_t>(h.num_sm_parts) * h.part_stride;
}

// The greedy fill of plan_mla_decode over lengths `lens` (negative ones count as 0; blks: their
// scheduler block counts, or nullptr) into `ns` (num_splits) and `parts` (records); returns the
// total split count. One thread.
__device__ int plan_fill(const MlaDecodeTiling& hdr, const int* lens, const int* blks, int* ns, int* parts,
                         int payload) {
  const int B = hdr.batch, P = hdr.num_sm_parts, bt = hdr.block_tokens, ovh = hdr.fixed_overhead;
  auto len = [lens](int i) { return max(lens[i], 0); };
  auto blocks = [&](int i) { return blks != nullptr ? blks[i] : max((len(i) + bt - 1) / bt, 1); };
  ns[0] = 0;
  int req = 0, blk = 0, split = 0, cum = 0;
  for (int part = 0; part < P; ++part) {
    const int begin_req = req, begin_tok = blk * bt, begin_split = split;
    int room = payload;
    while (req < B) {
      const int left = blocks(req) - blk;
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
      end_tok = end_req >= 0 ? len(end_req) : 0;
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
      rec[3] = min(end_tok, len(end_req));
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
  return cum;
}

// staged: the lengths, split counts and records live in dynamic shared memory (plan_stage_ints);
// otherwise the fill reads seqlens and writes the plan in place.
__global__ void __launch_bounds__(kPlanThreads)
    mla_plan_kernel(const int* __restrict__ seqlens, int* __restrict__ plan,
                    const __grid_constant__ MlaDecodeTiling hdr, bool staged) {
  extern __shared__ int smem_plan[];
  __shared__ int s_sum[kPlanThreads / 32];
  const int B = hdr.batch, P = hdr.num_sm_parts, bt = hdr.block_tokens, ovh = hdr.fixed_overhead;
  int* parts_out = plan + kHeaderInts;
  int* ns_out = parts_out + P * hdr.part_stride;
  int* blks = smem_plan + B;
  int* ns = staged ? smem_plan + 2 * B : ns_out;
  int* parts = staged ? smem_plan + 3 * B + 1 : parts_out;
  int local = 0;
  for (int i = threadIdx.x; i < B; i += kPlanThreads) {
    const int l = max(seqlens[i], 0), nb = max((l + bt - 1) / bt, 1);
    if (staged) {
      smem_plan[i] = l;
      blks[i] = nb;
    }
    local += nb + ovh;
  }
  for (int o = 16; o > 0; o >>= 1) local += __shfl_xor_sync(0xffffffffu, local, o);
  if ((threadIdx.x & 31) == 0) s_sum[threadIdx.x >> 5] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int w = 0; w < kPlanThreads / 32; ++w) total += s_sum[w];
    const int payload = (total + P - 1) / P + ovh;
    MlaDecodeTiling h = hdr;
    h.payload = payload;
    h.total_splits = plan_fill(hdr, staged ? smem_plan : seqlens, staged ? blks : nullptr, ns, parts, payload);
    const int* hw = reinterpret_cast<const int*>(&h);
    for (int k = 0; k < kHeaderInts; ++k) plan[k] = hw[k];
  }
  if (!staged) return;
  __syncthreads();
  for (int i = threadIdx.x; i < P * hdr.part_stride; i += kPlanThreads) parts_out[i] = parts[i];
  for (int i = threadIdx.x; i <= B; i += kPlanThreads) ns_out[i] = ns[i];
}

}  // namespace dualops::cuda::mla

namespace dualops::cuda {

const char* mla_plan_on_device(const int* cache_seqlens, int* plan, const MlaDecodeTiling& header,
                               cudaStream_t stream) {
  static thread_local char msg[256];
  if (!cache_seqlens || !plan) return "mla_plan_on_device: cache_seqlens and plan must be device addresses";
  if (header.batch < 1 || header.num_sm_parts < 1 || header.block_tokens < 1 || header.part_stride < 7)
    return "mla_plan_on_device: the header needs batch >= 1, num_sm_parts >= 1, block_tokens >= 1, part_stride >= 7";
  // Staged in shared memory when it fits (the opt-in size is raised once, before any capture);
  // else on global memory.
  // (the most this GPU lets a block opt into, up to kPlanSmemMax; 0 when raising it failed)
  static const int limit = [] {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return 0;
    const int want = optin - 1024 < mla::kPlanSmemMax ? optin - 1024 : mla::kPlanSmemMax;
    return want > 0 && cudaFuncSetAttribute(mla::mla_plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            want) == cudaSuccess
               ? want
               : 0;
  }();
  cudaGetLastError();  // (a failed attribute query or call above leaves the staging off, nothing else)
  const int64_t bytes = 4 * mla::plan_stage_ints(header);
  const bool staged = bytes <= limit;
  mla::mla_plan_kernel<<<1, mla::kPlanThreads, staged ? static_cast<size_t>(bytes) : 0, stream>>>(cache_seqlens, plan,
                                                                                                  header, staged);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::snprintf(msg, sizeof msg, "mla_plan_on_device (cuda): CUDA error: %s", cudaGetErrorString(err));
    return msg;
  }
  return nullptr;
}

}  // namespace dualops::cuda

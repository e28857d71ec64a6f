// Launch of one MLA decode variant: the split kernel (params.kernel: wgmma, its seesaw loop or the
// transposed-tile wgmma kernel), then (when any request may be split) the combine kernel chained
// with programmatic dependent launch, unless the split kernel merges the partials itself
// (`wgmma_t` with arrival counters). Instantiated once per (q dtype, cache format, d_qk) in the
// small mla_<q>_<cache>.cu files so they compile in parallel.
#pragma once
#include <cuda_runtime.h>

#include "mla_decode_kernel.cuh"

namespace dualops::cuda::mla {

// 16-bit caches: the tensor map of the cache for the TMA copies of the wgmma_t and wgmma_seesaw
// kernels (rows of d_qk values, boxes of 64 values x kv_box_rows(page) tokens, 128-byte swizzle),
// encoded per call.
template <class Tw>
bool encode_kv_tmap(const MlaDecodeCudaParams& p, CUtensorMap* tmap) {
  const int pbs = p.page_block_size;
  return common::make_tmap_2d_16bit_sw128(tmap, p.kv_cache, Tw::D, static_cast<uint64_t>(p.num_blocks) * pbs,
                                          Tw::kRowBytes, kv_box_rows(pbs));
}

// The transposed-tile kernel for NQ >= q_rows (NQ 8, 16, 32).
template <class Tw, int NQ>
cudaError_t launch_wt(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, dim3 grid, cudaStream_t stream) {
  constexpr int smem = WtLayout<Tw, NQ>::kSmemBytes;
  static const cudaError_t attr =
      cudaFuncSetAttribute(mla_wt_split_kernel<Tw, NQ>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess) return attr;
  CUtensorMap tmap{};
  if constexpr (Tw::kDirect) {
    if (!encode_kv_tmap<Tw>(p, &tmap)) return cudaErrorInvalidValue;
  }
  mla_wt_split_kernel<Tw, NQ><<<grid, kThreads, smem, stream>>>(p, t, tmap);
  return cudaSuccess;
}

// The transposed-tile kernel for a CTA of `rows` q rows (at most 32).
template <class Tw>
cudaError_t launch_wt_rows(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, int rows, dim3 grid,
                           cudaStream_t stream) {
  return rows <= 8 ? launch_wt<Tw, 8>(p, t, grid, stream)
                   : rows <= 16 ? launch_wt<Tw, 16>(p, t, grid, stream) : launch_wt<Tw, 32>(p, t, grid, stream);
}

// The wgmma kernel (pipelined / serial tile loops, or the seesaw loop whose 16-bit KV copies go
// through the cache's tensor map).
template <class Tw>
cudaError_t launch_wg(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, dim3 grid, cudaStream_t stream) {
  static const cudaError_t attr =
      cudaFuncSetAttribute(mla_wg_split_kernel<Tw>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tw::kSmemBytes);
  if (attr != cudaSuccess) return attr;
  CUtensorMap tmap{};
  if constexpr (Tw::kWgSeesaw) {
    if (!encode_kv_tmap<Tw>(p, &tmap)) return cudaErrorInvalidValue;
  }
  mla_wg_split_kernel<Tw><<<grid, kThreads, Tw::kSmemBytes, stream>>>(p, t, tmap);
  return cudaSuccess;
}

// need_combine: some request of the plan has more than one split (always for device plans,
// whose split count the host does not know).
template <typename MT, int FMT, int D>
cudaError_t launch_variant(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, bool need_combine,
                           cudaStream_t stream) {
  // Sparse decode: a CTA's rows share one query token's key list (mla_row0 in mla_piece.cuh).
  const int row_blocks = p.key_rows != nullptr ? sparse_row_blocks(t) : t.num_m_blocks;
  const dim3 grid(row_blocks, t.h_kv, t.num_sm_parts);
  if (p.kernel == kKernelWgmmaT) {
    // (the traits of its blocked KV tile layout; sparse decode: FP8 caches, whose copies address
    // tokens one by one, the host entry says so)
    cudaError_t e = cudaErrorInvalidValue;
    if (p.key_rows == nullptr) {
      e = launch_wt_rows<Traits<MT, FMT, D, kKernelWgmma>>(p, t, t.q_rows, grid, stream);
    } else if constexpr (FMT != kFmtBf16) {
      e = launch_wt_rows<Traits<MT, FMT, D, kKernelWgmma, true>>(p, t, t.h_q, grid, stream);
    }
    if (e != cudaSuccess) return e;
  } else if (p.kernel == kKernelWgmma) {
    const cudaError_t e = p.key_rows != nullptr ? launch_wg<Traits<MT, FMT, D, kKernelWgmma, true>>(p, t, grid, stream)
                                                : launch_wg<Traits<MT, FMT, D, kKernelWgmma>>(p, t, grid, stream);
    if (e != cudaSuccess) return e;
  } else if (p.kernel == kKernelWgmmaSeesaw) {
    if constexpr (FMT == kFmtBf16) {  // (the host entry takes it for 16-bit caches only)
      const cudaError_t e = launch_wg<Traits<MT, FMT, D, kKernelWgmmaSeesaw>>(p, t, grid, stream);
      if (e != cudaSuccess) return e;
    } else {
      return cudaErrorInvalidValue;
    }
  } else {
    return cudaErrorInvalidValue;  // (the host entry checks the kernel code)
  }
  cudaError_t err = cudaGetLastError();
  // The transposed-tile kernel merges split requests itself when it has arrival counters.
  const bool merged = p.kernel == kKernelWgmmaT && p.merge_counters != nullptr;
  if (err != cudaSuccess || !need_combine || merged) return err;
  cudaLaunchAttribute la[1];
  la[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  la[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((t.q_rows + kCombineWarps - 1) / kCombineWarps, t.batch, 1);
  cfg.blockDim = dim3(kCombineWarps * 32, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = la;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, mla_combine_kernel<MT>, p, t);
}

// heuristics/cuda.py MLA_CUDA_WGMMA_SMEM_BYTES: the largest layout of the split kernels (wgmma_t
// with 16 q rows, 16-bit cache at d_qk 576), and every instantiated layout within it.
constexpr int kMaxSmemBytes = 232224;
static_assert(WtLayout<Traits<__nv_bfloat16, kFmtBf16, 576, kKernelWgmma>, 16>::kSmemBytes == kMaxSmemBytes,
              "MLA_CUDA_WGMMA_SMEM_BYTES");
template <typename MT, int FMT, int D>
constexpr bool fits_max_smem() {
  using Tr = Traits<MT, FMT, D, kKernelWgmma>;
  bool ok = Tr::kSmemBytes <= kMaxSmemBytes && WtLayout<Tr, 8>::kSmemBytes <= kMaxSmemBytes &&
            WtLayout<Tr, 16>::kSmemBytes <= kMaxSmemBytes && WtLayout<Tr, 32>::kSmemBytes <= kMaxSmemBytes;
  if constexpr (FMT == kFmtBf16) ok = ok && Traits<MT, FMT, D, kKernelWgmmaSeesaw>::kSmemBytes <= kMaxSmemBytes;
  return ok;
}

#define DUALOPS_MLA_INSTANTIATE(MT, FMT, D)                                                                  \
  static_assert(fits_max_smem<MT, FMT, D>(), "MLA_CUDA_WGMMA_SMEM_BYTES");                              \
  template cudaError_t launch_variant<MT, FMT, D>(const MlaDecodeCudaParams&, const MlaDecodeTiling&, bool, \
                                                  cudaStream_t);

}  // namespace dualops::cuda::mla

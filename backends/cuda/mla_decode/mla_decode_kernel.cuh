// The kernel entries of CUDA MLA decode (docs/mla_decode_cuda.md): the split kernels the plan
// picks from (MlaDecodeCudaParams::kernel) and the combine kernel that merges split partials.
//   mla_wg_split_kernel  (mla_wg_kernel.cuh)  wgmma, 64 q rows per CTA: serial / pipelined loops,
//                                             and the seesaw loop (wgmma_seesaw, 16-bit caches)
//   mla_wt_split_kernel  (mla_wt_kernel.cuh)  wgmma_t, at most 32 q rows on the MMAs' N side
//   mla_combine_kernel   (mla_combine_kernel.cuh)
#pragma once
#include "mla_combine_kernel.cuh"
#include "mla_wg_kernel.cuh"
#include "mla_wt_kernel.cuh"

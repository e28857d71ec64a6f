// Host entry of the CUDA MLA decode: checks, then the variant's launch (mla_launch.cuh).
#include <cstdint>
#include <cstdio>

#include "mla_decode.h"
#include "mla_sparse_rows.cuh"
#include "mla_variants.h"

namespace dualops::cuda {
namespace {

thread_local char g_msg[512];

template <typename... A>
const char* fail(const char* fmt, A... a) {
  if constexpr (sizeof...(A) == 0) {
    std::snprintf(g_msg, sizeof g_msg, "%s", fmt);
  } else {
    std::snprintf(g_msg, sizeof g_msg, fmt, a...);
  }
  return g_msg;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

using Launch = cudaError_t (*)(const MlaDecodeCudaParams&, const MlaDecodeTiling&, bool, cudaStream_t);

Launch variant_of(const MlaDecodeCudaParams& p) {
  using namespace mla;
  const bool bf = p.q_dtype == static_cast<int>(DType::kBfloat16);
  if (!bf && p.q_dtype != static_cast<int>(DType::kFloat16)) return nullptr;
  switch (p.kv_format) {
    case MlaKvFormat::kBf16:
      if (p.head_dim == 576) return bf ? launch_variant<__nv_bfloat16, MlaKvFormat::kBf16, 576> : launch_variant<__half, MlaKvFormat::kBf16, 576>;
      if (p.head_dim == 512) return bf ? launch_variant<__nv_bfloat16, MlaKvFormat::kBf16, 512> : launch_variant<__half, MlaKvFormat::kBf16, 512>;
      return nullptr;
    case MlaKvFormat::kFp8V32:
      if (p.head_dim != 576) return nullptr;
      return bf ? launch_variant<__nv_bfloat16, MlaKvFormat::kFp8V32, 576> : launch_variant<__half, MlaKvFormat::kFp8V32, 576>;
    case MlaKvFormat::kFp8Model1:
      if (p.head_dim != 512) return nullptr;
      return bf ? launch_variant<__nv_bfloat16, MlaKvFormat::kFp8Model1, 512> : launch_variant<__half, MlaKvFormat::kFp8Model1, 512>;
    case MlaKvFormat::kInt8V32:
      if (p.head_dim != 576) return nullptr;
      return bf ? launch_variant<__nv_bfloat16, MlaKvFormat::kInt8V32, 576> : launch_variant<__half, MlaKvFormat::kInt8V32, 576>;
    default:
      return nullptr;
  }
}

// Sparse decode: the plan and the call agree, the kernel takes index lists (its copies address
// tokens one by one: wgmma, or wgmma_t with an FP8 cache), the pools and the key-list
// workspace are set.
const char* sparse_check(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t) {
  const bool sparse = p.indices != nullptr;
  if (static_cast<bool>(t.sparse) != sparse)
    return fail(sparse ? "mla_decode: the plan was made for dense decode; this call is sparse (indices)"
                       : "mla_decode: the plan was made for sparse decode (topk); this call is dense");
  if (!sparse) {
    if (p.key_rows || p.extra_kv_cache || p.extra_indices || p.sort_keys)
      return fail("mla_decode: key_rows, extra_kv_cache, extra_indices and sort_keys belong to sparse decode (indices)");
    return nullptr;
  }
  if (p.topk < 1 || p.topk != t.topk || p.extra_topk != t.extra_topk)
    return fail("mla_decode: indices hold %d (+%d extra) entries per query token, the plan was made for topk %d (+%d)",
                p.topk, p.extra_topk, t.topk, t.extra_topk);
  if (p.kernel == MlaCudaKernel::kWgmmaSeesaw ||
      (p.kernel == MlaCudaKernel::kWgmmaT && (p.kv_format == MlaKvFormat::kBf16 || t.h_q > mla::kWtMaxRows)))
    return fail("mla_decode (cuda): sparse decode runs on the wgmma (0) kernel, or wgmma_t (1) for FP8 "
                "caches and at most %d heads; got kernel %d (kv_format %d, h_q %d)", mla::kWtMaxRows, p.kernel,
                p.kv_format, t.h_q);
  if (p.causal) return fail("mla_decode: causal applies to dense decode; sparse decode masks through indices");
  if ((p.sort_keys != 0 && p.sort_keys != 1) || (p.sort_keys && p.topk > mla::kSortMaxKeys))
    return fail("mla_decode (cuda): sort_keys is 0 or 1, and 1 only for at most %d indices per query token "
                "(got %d, topk %d)", mla::kSortMaxKeys, p.sort_keys, p.topk);
  if (!p.key_rows || (reinterpret_cast<uintptr_t>(p.key_rows) & 3u))
    return fail("mla_decode (cuda): sparse decode needs a 4-byte aligned key_rows workspace");
  if ((p.extra_topk > 0) != (p.extra_kv_cache != nullptr) || (p.extra_topk > 0) != (p.extra_indices != nullptr))
    return fail("mla_decode: extra_kv_cache and extra_indices come together (extra_topk %d)", p.extra_topk);
  if (p.extra_topk > 0) {
    if (p.extra_num_blocks < 1 || p.extra_page_block_size < 1 || (p.kv_format == MlaKvFormat::kFp8Model1 && p.extra_page_block_size % 2))
      return fail("mla_decode: extra_kv_cache needs num_blocks >= 1 and a page size >= 1 (fp8_model1: even), "
                  "got %lld blocks of %d", static_cast<long long>(p.extra_num_blocks), p.extra_page_block_size);
    if (!aligned16(p.extra_kv_cache)) return fail("mla_decode: extra_kv_cache must start on a 16-byte boundary");
    // (its rows travel as ~id in the key lists, where ~(2^31 - 1) is the end-of-list mark)
    if (p.extra_num_blocks * p.extra_page_block_size >= (int64_t{1} << 31))
      return fail("mla_decode (cuda): extra_kv_cache must hold fewer than 2^31 tokens");
  }
  return nullptr;
}

}  // namespace

const char* mla_decode_check(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t) {
  if (t.version != MlaDecodeTiling::kVersion)
    return fail("mla_decode: plan version must be %d, got %d", MlaDecodeTiling::kVersion, t.version);
  if (t.h_kv != 1) return fail("mla_decode (cuda): one latent KV head, got h_kv %d", t.h_kv);
  if (t.batch < 1 || t.s_q < 1 || t.h_q < 1 || t.q_rows != t.s_q * t.h_q)
    return fail("mla_decode: plan needs batch, s_q, h_q >= 1 and q_rows = s_q * h_q (got %d, %d, %d, %d)", t.batch,
                t.s_q, t.h_q, t.q_rows);
  if (t.num_m_blocks != (t.q_rows + 63) / 64) return fail("mla_decode: plan num_m_blocks must be ceil(q_rows / 64)");
  if (t.num_sm_parts < 1 || t.num_sm_parts > 65535) return fail("mla_decode: plan num_sm_parts %d", t.num_sm_parts);
  if (t.part_stride != 8 || t.block_tokens != 64)
    return fail("mla_decode: plan part_stride must be 8 and block_tokens 64");
  if (p.kernel < 0 || p.kernel >= mla::kNumKernels)
    return fail("mla_decode (cuda): kernel must be 0 (wgmma), 1 (wgmma_t) or 2 (wgmma_seesaw), got %d",
                p.kernel);
  if (p.kernel == MlaCudaKernel::kWgmmaSeesaw && p.kv_format != MlaKvFormat::kBf16)
    return fail("mla_decode (cuda): the wgmma_seesaw kernel takes a 16-bit cache (kv_format 'bf16'), got kv_format %d",
                p.kv_format);
  if (p.kernel == MlaCudaKernel::kWgmmaT && t.q_rows > mla::kWtMaxRows && !t.sparse)
    return fail("mla_decode (cuda): the wgmma_t kernel takes at most %d q rows (s_q * h_q), got %d", mla::kWtMaxRows,
                t.q_rows);
  if ((p.kernel == MlaCudaKernel::kWgmmaT || p.kernel == MlaCudaKernel::kWgmmaSeesaw) && p.kv_format == MlaKvFormat::kBf16 &&
      (p.page_block_size % 16 || p.num_blocks * static_cast<int64_t>(p.page_block_size) >= (int64_t{1} << 31)))
    return fail("mla_decode (cuda): the wgmma_t and wgmma_seesaw kernels copy a 16-bit cache by tensor map: "
                "page_block_size must be "
                "a multiple of 16 and num_blocks * page_block_size below 2^31 (got %d, %lld)",
                p.page_block_size, static_cast<long long>(p.num_blocks));
  if (!variant_of(p))
    return fail("mla_decode (cuda): no kernel for q dtype code %d, kv_format %d, d_qk %d", p.q_dtype, p.kv_format,
                p.head_dim);
  if (!p.q || !p.kv_cache || !p.block_table || !p.cache_seqlens || !p.out || !p.lse || !p.plan)
    return fail("mla_decode: q, kv_cache, block_table, cache_seqlens, out, lse and plan must all be set");
  if (const char* err = sparse_check(p, t)) return err;
  if (p.page_block_size < 1 || (p.kv_format == MlaKvFormat::kFp8Model1 && p.page_block_size % 2))
    return fail("mla_decode: page_block_size %d (fp8_model1 needs an even size)", p.page_block_size);
  if (p.num_blocks < 1) return fail("mla_decode: num_blocks must be >= 1");
  if (!aligned16(p.q) || (p.q_stride_b | p.q_stride_s | p.q_stride_h) % 8)
    return fail("mla_decode: q must start on 16 bytes with strides that are multiples of 8 elements");
  if (!aligned16(p.kv_cache)) return fail("mla_decode: kv_cache must start on a 16-byte boundary");
  const bool need_combine = t.total_splits < 0 || t.total_splits > t.batch;
  if (need_combine && (!p.o_accum || !p.lse_accum || !aligned16(p.o_accum)))
    return fail("mla_decode: split requests need 16-byte aligned o_accum and lse_accum workspaces");
  return nullptr;
}

const char* mla_decode(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, cudaStream_t stream) {
  if (const char* err = mla_decode_check(p, t)) return err;
  return mla_decode_launch(p, t, stream);
}

const char* mla_decode_launch(const MlaDecodeCudaParams& p, const MlaDecodeTiling& t, cudaStream_t stream) {
  const bool need_combine = t.total_splits < 0 || t.total_splits > t.batch;
  cudaError_t err = p.key_rows != nullptr ? mla::launch_sparse_rows(p, t, stream) : cudaSuccess;
  if (err == cudaSuccess) err = variant_of(p)(p, t, need_combine, stream);
  if (err != cudaSuccess) return fail("mla_decode (cuda): CUDA error: %s", cudaGetErrorString(err));
  return nullptr;
}

}  // namespace dualops::cuda

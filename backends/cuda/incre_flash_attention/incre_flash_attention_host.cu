// Host entry: checks the params / plan pair (so a bad call fails with a message instead of
// reading out of bounds) and dispatches to the (q dtype, cache dtype) family.
#include "incre_flash_attention.h"

#include <cstdint>
#include <cstdio>
#include <string>

#include "ifa_launch.cuh"

namespace dualops::cuda {
namespace {

thread_local std::string g_message;

const char* fail(const char* fmt, long long a = 0, long long b = 0) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, a, b);
  g_message = std::string("incre_flash_attention (cuda): ") + buf;
  return g_message.c_str();
}

using Launch = cudaError_t (*)(const IncreFlashAttentionCudaParams&, const IncreFlashAttentionCudaTiling&, cudaStream_t);
using Smem = int (*)(const IncreFlashAttentionCudaTiling&);

struct Family {
  Launch launch;
  Smem smem;
};

Family family_of(int q_dtype, int kv_dtype) {
  using namespace ifa;
  const int bf16 = DType::kBfloat16, f16 = DType::kFloat16;
  const int i8 = DType::kInt8, f8 = DType::kFloat8E4m3fn;
  if (q_dtype == bf16 && kv_dtype == bf16) return {launch_bf16_bf16, smem_bf16_bf16};
  if (q_dtype == f16 && kv_dtype == f16) return {launch_f16_f16, smem_f16_f16};
  if (q_dtype == bf16 && kv_dtype == i8) return {launch_bf16_int8, smem_bf16_int8};
  if (q_dtype == f16 && kv_dtype == i8) return {launch_f16_int8, smem_f16_int8};
  if (q_dtype == bf16 && kv_dtype == f8) return {launch_bf16_fp8, smem_bf16_fp8};
  if (q_dtype == f16 && kv_dtype == f8) return {launch_f16_fp8, smem_f16_fp8};
  return {nullptr, nullptr};
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

const char* incre_flash_attention_check(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t) {
  if (t.version != IncreFlashAttentionTiling::kVersion)
    return fail("plan version %lld, this build reads version %lld", t.version, IncreFlashAttentionTiling::kVersion);
  if (t.head_dim != 64 && t.head_dim != 128 && t.head_dim != 256)
    return fail("head_dim must be 64, 128 or 256, got %lld", t.head_dim);
  if (t.batch < 1 || t.s_q < 1 || t.h_kv < 1 || t.group < 1)
    return fail("plan batch / s_q / h_kv / group must be >= 1, got batch %lld, s_q %lld", t.batch, t.s_q);
  if (static_cast<int64_t>(t.group) * t.h_kv != t.h_q)
    return fail("plan group * h_kv must equal h_q, got h_q %lld, h_kv %lld", t.h_q, t.h_kv);
  if (static_cast<int64_t>(t.group) * t.s_q != t.q_rows)
    return fail("plan q_rows must be group * s_q, got %lld (s_q %lld)", t.q_rows, t.s_q);
  const int64_t groups = static_cast<int64_t>(t.batch) * t.h_kv;
  if (t.whole_groups < 0 || t.whole_groups > groups)
    return fail("plan whole_groups must be in [0, batch * h_kv], got %lld", t.whole_groups);
  if (t.num_splits < 1 || t.whole_groups + (groups - t.whole_groups) * t.num_splits != t.num_units)
    return fail("plan num_units must be whole_groups + (batch * h_kv - whole_groups) * num_splits, got %lld units, "
                "%lld splits",
                t.num_units, t.num_splits);
  if (t.split_len < 16 || t.split_len % 16 != 0)
    return fail("plan split_len must be a positive multiple of 16, got %lld", t.split_len);
  if (static_cast<int64_t>(t.num_splits) * t.split_len < t.max_kv_len)
    return fail("plan splits cover %lld keys, fewer than max_kv_len %lld",
                static_cast<long long>(t.num_splits) * t.split_len, t.max_kv_len);
  if (t.block_size < 0 || t.block_size % 16 != 0)
    return fail("block_size must be 0 (contiguous) or a multiple of 16, got %lld", t.block_size);
  const Family fam = family_of(p.q_dtype, p.kv_dtype);
  if (fam.launch == nullptr)
    return fail("unsupported dtypes: q dtype code %lld with cache dtype code %lld (need fp16/bf16 q with the "
                "same-dtype, int8 or fp8 e4m3 cache)",
                p.q_dtype, p.kv_dtype);
  const int kv_bytes = p.kv_dtype == DType::kInt8 || p.kv_dtype == DType::kFloat8E4m3fn ? 1 : 2;
  if (t.kv_dtype_bytes != kv_bytes)
    return fail("plan kv_dtype_bytes %lld does not match the cache dtype (%lld bytes)", t.kv_dtype_bytes, kv_bytes);
  if (!p.q || !p.k || !p.v || !p.out || !p.lse || !p.kv_lens)
    return fail("q, k, v, out, lse and kv_lens must all be set");
  if (t.block_size > 0 && (!p.block_table || p.num_blocks < 1))
    return fail("a paged cache needs block_table and num_blocks >= 1 (num_blocks %lld)", p.num_blocks);
  if (kv_bytes == 1 && (!p.k_scale || !p.v_scale)) return fail("int8 / fp8 caches need k_scale and v_scale");
  if (t.num_splits > 1 && (!p.o_accum || !p.lse_accum))
    return fail("split-KV (%lld splits) needs the o_accum and lse_accum workspaces", t.num_splits);
  if (!aligned16(p.k) || !aligned16(p.v)) return fail("k and v caches must start on a 16-byte boundary");
  const int64_t strides[6] = {p.k_stride_0, p.k_stride_1, p.k_stride_2, p.v_stride_0, p.v_stride_1, p.v_stride_2};
  for (int i = 0; i < 6; ++i)
    if ((strides[i] * kv_bytes) % 16 != 0)
      return fail("cache strides must be multiples of 16 bytes, got %lld elements (stride #%lld)", strides[i], i);
  if ((p.out_stride_b | p.out_stride_s | p.out_stride_h) % 4 != 0 || (reinterpret_cast<uintptr_t>(p.out) & 7u))
    return fail("out must be 8-byte aligned with strides that are multiples of 4 elements (got stride_h %lld)",
                p.out_stride_h);
  if (kv_bytes == 1 && (!aligned16(p.v_scale) || (p.v_offset && !aligned16(p.v_offset))))
    return fail("v_scale / v_offset must be 16-byte aligned fp32 [H_kv, D]");
  if (t.num_splits > 1 && (!aligned16(p.o_accum)))
    return fail("o_accum must be 16-byte aligned");
  if (t.merge < ifa::kMergeKernel || t.merge > ifa::kMergeCluster || t.merge_fallback < ifa::kMergeKernel ||
      t.merge_fallback > ifa::kMergeCounter || t.wave_ctas < 1 || t.stagger_ns < 0 || t.second_fill_keys < 0)
    return fail("plan launch fields out of range (merge %lld, wave_ctas %lld): make the plan for a CUDA device",
                t.merge, t.wave_ctas);
  if (fam.smem(t) == 0)
    return fail("plan names kernel variant %lld with a %lld-row q tile, which this build does not have for its "
                "head dim and dtypes",
                t.variant, t.cta_m_tile);
  return nullptr;
}

const char* incre_flash_attention(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
                                  cudaStream_t stream) {
  if (const char* err = incre_flash_attention_check(p, t)) return err;
  return incre_flash_attention_launch(p, t, stream);
}

const char* incre_flash_attention_launch(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t,
                                         cudaStream_t stream) {
  const cudaError_t err = family_of(p.q_dtype, p.kv_dtype).launch(p, t, stream);
  if (err != cudaSuccess) {
    g_message = std::string("incre_flash_attention (cuda): CUDA error: ") + cudaGetErrorString(err);
    return g_message.c_str();
  }
  return nullptr;
}

int incre_flash_attention_smem_bytes(const IncreFlashAttentionCudaParams& p, const IncreFlashAttentionCudaTiling& t) {
  if (incre_flash_attention_check(p, t)) return 0;  // (0 too for a variant not built)
  return family_of(p.q_dtype, p.kv_dtype).smem(t);
}

}  // namespace dualops::cuda

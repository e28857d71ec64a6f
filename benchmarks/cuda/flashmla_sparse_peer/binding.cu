// C-ABI entry points over FlashMLA's sm90 sparse FP8 decode (V3.2 cache: 656-byte tokens), for
// benchmarks only. Our code: it fills FlashMLA's parameter structs from raw device pointers, ints,
// floats and a cudaStream_t (no torch), and calls FlashMLA's launchers in the order its own
// sparse decode path runs them on sm90: scheduler metadata (once per decode step), the split-KV
// kernel, then the combine kernel. FlashMLA's headers and kernels are compiled in at build time
// from a FlashMLA source folder (build.sh); none of them is part of this repository.
//
// Every entry point returns 0 on success, else a nonzero code with a message that
// fmla_peer_last_error() returns (FlashMLA's host asserts throw; they are caught here). Sizes
// and strides are in elements, except the KV cache's strides, which are in bytes. Each GPU entry
// point checks its arguments, then makes `device` current in this library's own (static) CUDA
// runtime, which shares the device's primary context, and so torch's pointers and streams.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include <cuda_runtime_api.h>

#include "params.h"
#include "sm90/decode/sparse_fp8/splitkv_mla.h"
#include "smxx/decode/combine/combine.h"
#include "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.h"

#define PEER_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kAbiVersion = 1;
constexpr int kHeadDimQK = 576;  // V3.2: 512 NoPE + 64 RoPE
constexpr int kHeadDimV = 512;
constexpr int kBytesPerToken = 656;  // 512 e4m3 + 4 fp32 scales + 64 bf16
constexpr int kTopkBlock = 64;       // the kernel's key block; also FlashMLA's block_size_topk on sm90
constexpr int kFixedOverheadBlocks = 5;  // FlashMLA's sm90 scheduling constant
constexpr int kMaxSmParts = 160;     // the combine kernel's largest split count
constexpr float kLog2e = 1.44269504f;

thread_local std::string g_error;

int fail(const std::string &msg) {
    g_error = msg;
    return 1;
}

// Makes `device` current and checks that it is an sm_90 GPU (the library holds sm_90a code only).
int use_device(int device) {
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return fail(std::string("cudaSetDevice: ") + cudaGetErrorString(e));
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (major != 9 || minor != 0)
        return fail("FlashMLA's sm90 sparse decode needs an sm_90 GPU, device " + std::to_string(device) +
                    " is sm_" + std::to_string(major) + std::to_string(minor));
    (void)cudaGetLastError();  // a stale error of this runtime must not be blamed on our launch
    return 0;
}

template <typename F>
int guarded(F &&f) {
    try {
        f();
    } catch (const std::exception &ex) {
        return fail(ex.what());
    } catch (...) {
        return fail("unknown C++ exception from FlashMLA");
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return fail(std::string("CUDA: ") + cudaGetErrorString(e));
    g_error.clear();
    return 0;
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT32_MAX; }

int check_shape(int b, int s_q, int h_q, int topk, int num_sm_parts) {
    if (b <= 0 || s_q <= 0) return fail("b and s_q must be positive");
    if (h_q != 64 && h_q != 128) return fail("h_q must be 64 or 128 (FlashMLA's sm90 sparse decode), got " + std::to_string(h_q));
    if (topk <= 0 || topk % kTopkBlock) return fail("topk must be a positive multiple of 64, got " + std::to_string(topk));
    if (num_sm_parts < 1 || num_sm_parts > kMaxSmParts)
        return fail("num_sm_parts must be in [1, 160], got " + std::to_string(num_sm_parts));
    return 0;
}

// Contiguous accumulators [b + num_sm_parts, s_q, h_q(, d_v)] and outputs [b, s_q, h_q(, d_v)].
void fill_accum(SparseAttnDecodeParams &p, float *lse_accum, float *o_accum) {
    p.lse_accum = lse_accum;
    p.o_accum = o_accum;
    p.stride_lse_accum_split = p.s_q * p.h_q;
    p.stride_lse_accum_s_q = p.h_q;
    p.stride_o_accum_split = p.s_q * p.h_q * kHeadDimV;
    p.stride_o_accum_s_q = p.h_q * kHeadDimV;
    p.stride_o_accum_h_q = kHeadDimV;
}

CombineParams combine_params(const SparseAttnDecodeParams &p, float *attn_sink) {
    CombineParams c{};
    c.b = p.b; c.s_q = p.s_q; c.h_q = p.h_q; c.d_v = kHeadDimV;
    c.lse = p.lse; c.out = p.out;
    c.stride_lse_b = p.stride_lse_b; c.stride_lse_s_q = p.stride_lse_s_q;
    c.stride_o_b = p.stride_o_b; c.stride_o_s_q = p.stride_o_s_q; c.stride_o_h_q = p.stride_o_h_q;
    c.lse_accum = p.lse_accum; c.o_accum = p.o_accum;
    c.stride_lse_accum_split = p.stride_lse_accum_split; c.stride_lse_accum_s_q = p.stride_lse_accum_s_q;
    c.stride_o_accum_split = p.stride_o_accum_split; c.stride_o_accum_s_q = p.stride_o_accum_s_q;
    c.stride_o_accum_h_q = p.stride_o_accum_h_q;
    c.tile_scheduler_metadata_ptr = p.tile_scheduler_metadata_ptr;
    c.num_splits_ptr = p.num_splits_ptr;
    c.num_sm_parts = p.num_sm_parts;
    c.attn_sink = attn_sink;
    c.stream = p.stream;
    return c;
}

void run_decode_kernel(const SparseAttnDecodeParams &p) {
    if (p.h_q == 128)
        sm90::decode::sparse_fp8::run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::V32, 128>(p);
    else
        sm90::decode::sparse_fp8::run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::V32, 64>(p);
}

}  // namespace

// ---------------------------------------------------------------- facts (no GPU needed)

PEER_API int fmla_peer_abi_version() { return kAbiVersion; }

PEER_API const char *fmla_peer_last_error() { return g_error.c_str(); }

// int32 words per scheduler-metadata entry: tile_scheduler_metadata is [num_sm_parts, this].
PEER_API int fmla_peer_sched_meta_ints() { return int(sizeof(DecodingSchedMeta) / sizeof(int)); }

// FlashMLA's sm90 sparse decode split count: one CTA (or CTA pair, h_q 128) per SM.
PEER_API int fmla_peer_num_sm_parts(int num_sms, int h_q, int s_q) {
    if (num_sms <= 0 || s_q <= 0 || h_q < 64) return 1;
    int parts = num_sms / s_q / (h_q / 64);
    return parts > 1 ? parts : 1;
}

// ---------------------------------------------------------------- GPU entry points

// tile_scheduler_metadata: int32 [num_sm_parts, fmla_peer_sched_meta_ints()]; num_splits: int32 [b + 1].
PEER_API int fmla_peer_sched_meta(int device, int b, int s_q, int topk, int num_sm_parts,
                                  int *tile_scheduler_metadata, int *num_splits, void *stream) {
    if (check_shape(b, s_q, 64, topk, num_sm_parts)) return 1;
    if (!tile_scheduler_metadata || !num_splits) return fail("null metadata pointer");
    if (use_device(device)) return 1;
    GetDecodeSchedMetaParams m{};
    m.b = b; m.s_q = s_q;
    m.block_size_n = kTopkBlock;
    m.fixed_overhead_num_blocks = kFixedOverheadBlocks;
    m.topk = topk; m.extra_topk = 0;
    m.topk_length = nullptr; m.extra_topk_length = nullptr; m.seqlens_k_ptr = nullptr;
    m.tile_scheduler_metadata_ptr = reinterpret_cast<DecodingSchedMeta *>(tile_scheduler_metadata);
    m.num_splits_ptr = num_splits;
    m.num_sm_parts = num_sm_parts;
    m.stream = static_cast<cudaStream_t>(stream);
    return guarded([&] { smxx::decode::run_get_decoding_sched_meta_kernel(m); });
}

// The split-KV kernel (run_combine = 0), or it and the combine kernel (run_combine = 1), as
// FlashMLA's sparse_decode_fwd does after the metadata. q: bf16 [b, s_q, h_q, 576] (strides given,
// last dim contiguous); kv: [num_blocks, page_block_size, 1, 656] bytes (byte strides; a token's
// row stride must be 656); indices: int32 [b, s_q, topk] (last dim contiguous), token ids
// block * page_block_size + offset; attn_sink: fp32 [h_q] or null; lse_accum / o_accum: fp32,
// contiguous [b + num_sm_parts, s_q, h_q(, 512)]; lse: fp32 contiguous [b, s_q, h_q]; out: bf16
// contiguous [b, s_q, h_q, 512].
PEER_API int fmla_peer_sparse_decode(
    int device, int b, int s_q, int h_q, int topk, float sm_scale,
    const void *q, int64_t stride_q_b, int64_t stride_q_s_q, int64_t stride_q_h_q,
    const void *kv, int num_blocks, int page_block_size, int64_t stride_kv_block, int64_t stride_kv_row,
    const int *indices, int64_t stride_indices_b, int64_t stride_indices_s_q,
    const float *attn_sink,
    const int *tile_scheduler_metadata, const int *num_splits, int num_sm_parts,
    float *lse_accum, float *o_accum, float *lse, void *out,
    int run_combine, void *stream) {
    if (check_shape(b, s_q, h_q, topk, num_sm_parts)) return 1;
    if (!q || !kv || !indices || !tile_scheduler_metadata || !num_splits || !lse_accum || !o_accum || !lse || !out)
        return fail("null pointer argument");
    if (num_blocks <= 0 || page_block_size <= 0) return fail("num_blocks and page_block_size must be positive");
    if (stride_kv_row != kBytesPerToken) return fail("the KV cache's token stride must be 656 bytes");
    for (int64_t s : {stride_q_b, stride_q_s_q, stride_q_h_q, stride_kv_block, stride_kv_row, stride_indices_b,
                      stride_indices_s_q})
        if (!fits_int(s)) return fail("a stride is negative or exceeds int32");
    const int64_t out_b = int64_t(s_q) * h_q * kHeadDimV;
    if (!fits_int(out_b) || !fits_int(int64_t(s_q) * h_q)) return fail("output strides exceed int32");
    if (use_device(device)) return 1;

    SparseAttnDecodeParams p{};
    p.b = b; p.s_q = s_q; p.h_q = h_q; p.h_kv = 1;
    p.d_qk = kHeadDimQK; p.d_v = kHeadDimV;
    p.sm_scale = sm_scale; p.sm_scale_div_log2 = sm_scale * kLog2e;
    p.num_blocks = num_blocks; p.page_block_size = page_block_size; p.topk = topk;
    p.model_type = ModelType::V32;
    p.q = (cutlass::bfloat16_t *)q;
    p.kv = (cutlass::bfloat16_t *)kv;  // FlashMLA passes the byte cache as a bf16 pointer too
    p.indices = (int *)indices;
    p.topk_length = nullptr;
    p.attn_sink = (float *)attn_sink;
    p.lse = lse;
    p.out = (cutlass::bfloat16_t *)out;
    p.extra_num_blocks = 0; p.extra_page_block_size = 0; p.extra_topk = 0;
    p.extra_kv = nullptr; p.extra_indices = nullptr; p.extra_topk_length = nullptr;
    p.stride_q_b = int(stride_q_b); p.stride_q_s_q = int(stride_q_s_q); p.stride_q_h_q = int(stride_q_h_q);
    p.stride_kv_block = int(stride_kv_block); p.stride_kv_row = int(stride_kv_row);
    p.stride_indices_b = int(stride_indices_b); p.stride_indices_s_q = int(stride_indices_s_q);
    p.stride_lse_b = s_q * h_q; p.stride_lse_s_q = h_q;
    p.stride_o_b = int(out_b); p.stride_o_s_q = h_q * kHeadDimV; p.stride_o_h_q = kHeadDimV;
    p.stride_extra_kv_block = p.stride_extra_kv_row = 0;
    p.stride_extra_indices_b = p.stride_extra_indices_s_q = 0;
    p.stream = static_cast<cudaStream_t>(stream);
    fill_accum(p, lse_accum, o_accum);
    p.tile_scheduler_metadata_ptr = (DecodingSchedMeta *)tile_scheduler_metadata;
    p.num_splits_ptr = (int *)num_splits;
    p.num_sm_parts = num_sm_parts;

    return guarded([&] {
        run_decode_kernel(p);
        if (run_combine) {
            CombineParams c = combine_params(p, (float *)attn_sink);
            smxx::decode::run_flash_mla_combine_kernel<cutlass::bfloat16_t>(c);
        }
    });
}

// The combine kernel alone (after fmla_peer_sparse_decode with run_combine = 0): merges the
// splits of lse_accum / o_accum into lse and out (layouts as above).
PEER_API int fmla_peer_combine(int device, int b, int s_q, int h_q, const float *attn_sink,
                               const int *tile_scheduler_metadata, const int *num_splits, int num_sm_parts,
                               float *lse_accum, float *o_accum, float *lse, void *out, void *stream) {
    if (check_shape(b, s_q, h_q, kTopkBlock, num_sm_parts)) return 1;
    if (!tile_scheduler_metadata || !num_splits || !lse_accum || !o_accum || !lse || !out)
        return fail("null pointer argument");
    if (use_device(device)) return 1;
    SparseAttnDecodeParams p{};
    p.b = b; p.s_q = s_q; p.h_q = h_q;
    p.lse = lse; p.out = (cutlass::bfloat16_t *)out;
    p.stride_lse_b = s_q * h_q; p.stride_lse_s_q = h_q;
    p.stride_o_b = s_q * h_q * kHeadDimV; p.stride_o_s_q = h_q * kHeadDimV; p.stride_o_h_q = kHeadDimV;
    p.stream = static_cast<cudaStream_t>(stream);
    fill_accum(p, lse_accum, o_accum);
    p.tile_scheduler_metadata_ptr = (DecodingSchedMeta *)tile_scheduler_metadata;
    p.num_splits_ptr = (int *)num_splits;
    p.num_sm_parts = num_sm_parts;
    CombineParams c = combine_params(p, (float *)attn_sink);
    return guarded([&] { smxx::decode::run_flash_mla_combine_kernel<cutlass::bfloat16_t>(c); });
}

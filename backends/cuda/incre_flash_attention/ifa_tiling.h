// The IFA plan header as the CUDA kernels read it. The generated ops/include/dualops/tiling.h
// (python -m dualops.codegen) is the source of truth; until it exists this mirrors the field list
// of docs/internals.md "IFA plan" (17 int32, in order).
#pragma once
#include <cstdint>

#if __has_include(<dualops/tiling.h>)
#include <dualops/tiling.h>
#else
namespace dualops {
struct IncreFlashAttentionTiling {
  int32_t version;
  int32_t batch;
  int32_t s_q;
  int32_t h_q;
  int32_t h_kv;
  int32_t group;
  int32_t head_dim;
  int32_t max_kv_len;
  int32_t block_size;
  int32_t kv_tile;
  int32_t num_splits;
  int32_t split_len;
  int32_t num_units;
  int32_t num_cores;
  int32_t q_rows;
  int32_t q_tile_rows;
  int32_t kv_dtype_bytes;
};
static_assert(sizeof(IncreFlashAttentionTiling) == 17 * 4, "IFA plan header is 17 int32");
}  // namespace dualops
#endif

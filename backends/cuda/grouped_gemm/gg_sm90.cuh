// The large-group path of the CUDA grouped GEMM: CUTLASS 3.x sm90 grouped GEMM (pointer-array
// TMA + wgmma, warp-specialized cooperative kernel) over per-group problem sizes and pointers
// that a small kernel of ours (gg_sm90_prep) builds on the device from group_offsets / masked_m,
// so a call reads nothing on the host and can be captured in a CUDA graph. The same prep kernel
// writes the zero rows (rows past offsets[G]; masked slots past masked_m[g]).
//
// y[g] = x[g] * w[g]^T: A = x rows (row-major, K contiguous), B = w[g] (N x K, "column-major"
// K x N), D = y rows (row-major). Recipes: bf16 / fp16 (no scales) and fp8 e4m3 per-tensor or
// rowwise, whose epilogue multiplies the fp32 accumulators by a per-row scale (x_scale[row], or
// the one x_scale) and a per-column scale (w_scale[g, n], or w_scale[g]), both read through
// per-group pointer arrays (CUTLASS epilogue visitor tree, broadcast nodes).
// Only compiled with the CUTLASS/CuTe headers (DUALOPS_HAVE_CUTE); gg_sm90_<recipe>.cu
// instantiate one configuration each so they compile in parallel.
#pragma once

// CUTLASS's device-side asserts are calls that make ptxas serialize the wgmma pipeline: the
// path is always built without them.
#ifndef NDEBUG
#define NDEBUG
#endif

#include <cuda_runtime.h>

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "dualops/params.h"
#include "gg_schedule.cuh"
#include "gg_sm90.h"

namespace dualops::cuda::gg::sm90 {

using namespace cute;

// Scaled epilogue: D = x_scale (per row, or one value) * (w_scale (per column, or one value) * acc).
// The bool strides pick vector (true) or scalar (false) broadcast at run time, so per-tensor
// and rowwise share one kernel.
template <class Tile, class Out>
using ScaledEpilogue = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, Out, float, cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90ColBroadcast<0, Tile, float*, float, Stride<bool, _0, _0>>,
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, cutlass::FloatRoundStyle::round_to_nearest>,
        cutlass::epilogue::fusion::Sm90RowBroadcast<0, Tile, float*, float, Stride<_0, bool, _0>>,
        cutlass::epilogue::fusion::Sm90AccFetch>>;

template <class In, class Out, class Tile, class Cluster, bool kScaled>
struct Config {
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignIn = 16 / sizeof(In);
  static constexpr int kAlignOut = 16 / sizeof(Out);
  using Fusion = cute::conditional_t<kScaled, ScaledEpilogue<Tile, Out>,
                                     cutlass::epilogue::fusion::LinearCombination<Out, float, void, float>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
      float, float, void, LayoutD*, kAlignOut, Out, LayoutD*, kAlignOut,
      cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, In, LayoutA*, kAlignIn, In, LayoutB*, kAlignIn, float, Tile,
      Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using Problem = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Problem, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
};

// Per-group arrays the prep kernel writes (in the caller's workspace, before CUTLASS's own).
template <class C, class In, class Out>
struct Arrays {
  typename C::Problem::UnderlyingProblemShape* shape;
  const In** a;
  const In** b;
  Out** d;
  typename C::StrideA* sa;
  typename C::StrideB* sb;
  typename C::StrideD* sd;
  const float** xs;  // scaled recipes: per-group pointer to the rows' (or the one) x scale
  const float** ws;  // ... to the group's w scale row (or value)

  static constexpr size_t align(size_t v) { return (v + 255) & ~size_t(255); }
  // Carves the arrays from `base` (nullptr: sizes only); returns the bytes used.
  size_t carve(uint8_t* base, int G) {
    size_t off = 0;
    auto take = [&](auto*& ptr, size_t elem) {
      ptr = base ? reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(base + off) : nullptr;
      off = align(off + elem * G);
    };
    take(shape, sizeof(*shape));
    take(a, sizeof(*a));
    take(b, sizeof(*b));
    take(d, sizeof(*d));
    take(sa, sizeof(*sa));
    take(sb, sizeof(*sb));
    take(sd, sizeof(*sd));
    take(xs, sizeof(*xs));
    take(ws, sizeof(*ws));
    return off;
  }
};

constexpr int kPrepThreads = 256;

// Block 0 writes the per-group arrays; every block writes its share of the zero rows (16-byte
// stores: the path needs N * sizeof(Out) to be a multiple of 16). Offsets and masked_m are
// clamped as in gg_schedule.cuh, so bad device values never send TMA outside x, w or y.
template <class C, class In, class Out, bool kScaled>
__global__ void __launch_bounds__(kPrepThreads) gg_sm90_prep(const GroupedGemmParams p, Arrays<C, In, Out> arr) {
  const bool masked = p.masked_m != nullptr;
  const int* offs = static_cast<const int*>(p.group_offsets);
  const int* mm = static_cast<const int*>(p.masked_m);
  const int n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  if (blockIdx.x == 0) {
    for (int g = threadIdx.x; g < p.num_groups; g += blockDim.x) {
      int64_t start, rows;
      if (masked) {
        start = static_cast<int64_t>(g) * p.m_max;
        rows = clamp64(__ldg(mm + g), 0, p.m_max);
      } else {
        int64_t e;
        group_span(offs, g, p.m, start, e);
        rows = e - start;
      }
      arr.shape[g] = make_shape(static_cast<int>(rows), n, k);
      arr.a[g] = static_cast<const In*>(p.x) + start * k;
      arr.b[g] = static_cast<const In*>(p.w) + static_cast<int64_t>(g) * n * k;
      arr.d[g] = static_cast<Out*>(p.y) + start * n;
      arr.sa[g] = make_stride(static_cast<int64_t>(k), _1{}, _0{});
      arr.sb[g] = make_stride(static_cast<int64_t>(k), _1{}, _0{});
      arr.sd[g] = make_stride(static_cast<int64_t>(n), _1{}, _0{});
      if constexpr (kScaled) {
        const float* xs = static_cast<const float*>(p.x_scale);
        const float* ws = static_cast<const float*>(p.w_scale);
        const bool rowwise = p.scale_mode == 2;
        arr.xs[g] = xs ? (rowwise ? xs + start : xs) : nullptr;
        arr.ws[g] = rowwise ? ws + static_cast<int64_t>(g) * n : ws + g;
      }
    }
  }
  // Zero rows: one warp per row, 16-byte stores.
  const int chunks = static_cast<int>(p.n * sizeof(Out) / 16);
  const int warps = kPrepThreads / 32, lane = threadIdx.x % 32;
  const int64_t rows_total = masked ? static_cast<int64_t>(p.num_groups) * p.m_max : p.m;
  const int64_t first = masked ? 0 : clamp64(__ldg(offs + p.num_groups), 0, p.m);
  for (int64_t r = first + static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; r < rows_total;
       r += static_cast<int64_t>(gridDim.x) * warps) {
    if (masked) {
      const int64_t g = r / p.m_max;
      if (r - g * p.m_max < clamp64(__ldg(mm + g), 0, p.m_max)) continue;
    }
    uint4* row = reinterpret_cast<uint4*>(static_cast<Out*>(p.y) + r * p.n);
    for (int c = lane; c < chunks; c += 32) row[c] = make_uint4(0, 0, 0, 0);
  }
}

template <class C, class In, class Out, bool kScaled>
typename C::Gemm::Arguments make_args(const GroupedGemmParams& p, const Arrays<C, In, Out>& arr, int sm_count) {
  typename C::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {p.num_groups, arr.shape, nullptr};
  args.mainloop = {arr.a, arr.sa, arr.b, arr.sb};
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = arr.d;
  args.epilogue.dD = arr.sd;
  if constexpr (kScaled) {
    const bool rowwise = p.scale_mode == 2;
    auto& t = args.epilogue.thread;  // {x scale node, {w scale node, acc}, multiply}
    t.op_0.ptr_col = p.x_scale ? arr.xs : nullptr;
    t.op_0.null_default = 1.f;
    t.op_0.dCol = make_stride(rowwise, _0{}, _0{});
    t.op_1.op_0.ptr_row = arr.ws;
    t.op_1.op_0.dRow = make_stride(_0{}, rowwise, _0{});
  } else {
    args.epilogue.thread.alpha = 1.f;
    args.epilogue.thread.beta = 0.f;
  }
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = sm_count;
  return args;
}

// Runs one call; ws: at least workspace() bytes of device memory (256-B aligned).
template <class C, class In, class Out, bool kScaled>
struct Runner {
  static size_t workspace(const GroupedGemmParams& p, int sm_count) {
    Arrays<C, In, Out> arr{};
    const size_t own = arr.carve(nullptr, p.num_groups);
    return own + C::Gemm::get_workspace_size(make_args<C, In, Out, kScaled>(p, arr, sm_count)) + 256;
  }

  static const char* run(const GroupedGemmParams& p, void* ws, size_t ws_bytes, int sm_count, cudaStream_t stream) {
    if (ws_bytes < workspace(p, sm_count)) return "grouped_gemm: the sm90 workspace is too small";
    Arrays<C, In, Out> arr{};
    uint8_t* base = static_cast<uint8_t*>(ws);
    const size_t own = arr.carve(base, p.num_groups);
    const int64_t rows = p.masked_m ? static_cast<int64_t>(p.num_groups) * p.m_max : p.m;
    const int64_t want = (rows + kPrepThreads / 32 - 1) / (kPrepThreads / 32);
    const int grid = static_cast<int>(min64(std::max<int64_t>(1, want), 2 * static_cast<int64_t>(sm_count)));
    gg_sm90_prep<C, In, Out, kScaled><<<grid, kPrepThreads, 0, stream>>>(p, arr);
    if (cudaGetLastError() != cudaSuccess) return "grouped_gemm: the sm90 prep kernel did not launch";
    auto args = make_args<C, In, Out, kScaled>(p, arr, sm_count);
    typename C::Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return "grouped_gemm: CUTLASS cannot run this shape";
    if (gemm.initialize(args, base + own, stream) != cutlass::Status::kSuccess)
      return "grouped_gemm: CUTLASS initialization failed";
    if (gemm.run(stream) != cutlass::Status::kSuccess) return "grouped_gemm: the CUTLASS kernel did not launch";
    return nullptr;
  }
};

}  // namespace dualops::cuda::gg::sm90

namespace dualops::cuda::gg {

// The body of sm90_recipe<R> (gg_sm90.h) for one configuration; gg_sm90_<recipe>.cu
// specialize sm90_recipe with it, one file per recipe.
template <class In, class Out, class Tile, class Cluster, bool kScaled>
const char* sm90_call(const GroupedGemmParams& p, void* ws, size_t* ws_bytes, int sms, cudaStream_t stream) {
  using Run = sm90::Runner<sm90::Config<In, Out, Tile, Cluster, kScaled>, In, Out, kScaled>;
  if (!ws) {
    *ws_bytes = Run::workspace(p, sms);
    return nullptr;
  }
  return Run::run(p, ws, *ws_bytes, sms, stream);
}

}  // namespace dualops::cuda::gg

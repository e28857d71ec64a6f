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
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "../common/pdl.cuh"
#include "dualops/params.h"
#include "gg_schedule.cuh"
#include "gg_sm90.h"

namespace dualops::cuda::gg::sm90 {

using namespace cute;

// Epilogue of the per-tensor / rowwise recipes: D = x_scale (per row, or one value) *
// (w_scale (per column, or one value) * acc). The bool strides pick vector (true) or scalar
// (false) broadcast at run time, so per-tensor and rowwise share one kernel.
template <class Tile, class Out>
using ScaledEpilogue = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, Out, float, cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90ColBroadcast<0, Tile, float*, float, Stride<bool, _0, _0>>,
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, cutlass::FloatRoundStyle::round_to_nearest>,
        cutlass::epilogue::fusion::Sm90RowBroadcast<0, Tile, float*, float, Stride<_0, bool, _0>>,
        cutlass::epilogue::fusion::Sm90AccFetch>>;

enum Mode : int { kPlain = 0, kScaled = 1, kBlockwise = 2 };
// Blockwise scales: one per row and 128 of K (x), one per 128 x 128 block (w), M-major in the
// per-group compact layout the mainloop expects (the prep kernel converts ours to it).
using BlockScale = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128>;

// CUTLASS's pointer-array kernels never wait on a programmatic launch dependency. This one waits
// before anything else, so it can be launched (programmatic stream serialization) while the prep
// kernel ahead of it runs: its launch and CTA setup overlap the prep kernel, and nothing of its
// own runs before the prep kernel's arrays are complete and visible.
template <class K>
struct AfterPrep : K {
  CUTLASS_DEVICE void operator()(typename K::Params const& params, char* smem) {
    common::pdl_wait();
    K::operator()(params, smem);
  }
};

// One kernel configuration. Sched: cutlass::gemm::KernelPtrArrayTmaWarpSpecialized{Cooperative,
// Pingpong}[FP8FastAccum | FP8Blockwise]; the epilogue schedule follows it.
template <class In, class Out, class Tile, class Cluster, class Sched, int kMode>
struct Config {
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  using LayoutSFA = decltype(BlockScale::deduce_layoutSFA());
  using LayoutSFB = decltype(BlockScale::deduce_layoutSFB());
  static constexpr int kAlignIn = 16 / sizeof(In);
  static constexpr int kAlignOut = 16 / sizeof(Out);
  static constexpr bool kPingpong = cute::is_base_of_v<cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong, Sched>;
  using EpiSched = cute::conditional_t<kPingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                       cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
  using Fusion = cute::conditional_t<kMode == kScaled, ScaledEpilogue<Tile, Out>,
                                     cutlass::epilogue::fusion::LinearCombination<Out, float, void, float>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
      float, float, void, LayoutD*, kAlignOut, Out, LayoutD*, kAlignOut, EpiSched, Fusion>::CollectiveOp;
  using GmemA = cute::conditional_t<kMode == kBlockwise, cute::tuple<LayoutA*, LayoutSFA*>, LayoutA*>;
  using GmemB = cute::conditional_t<kMode == kBlockwise, cute::tuple<LayoutB*, LayoutSFB*>, LayoutB*>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, In, GmemA, kAlignIn, In, GmemB, kAlignIn, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      Sched>::CollectiveOp;
  using Problem = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Problem, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<AfterPrep<Kernel>>;
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
  const float** xs;   // scaled: the group's x scales (rows, or the one value); blockwise: SFA
  const float** ws;   // scaled: the group's w scale row (or value); blockwise: SFB
  typename C::LayoutSFA* lsfa;  // blockwise: per-group scale layouts
  typename C::LayoutSFB* lsfb;
  float* xs_t;        // blockwise: x scales per group, M-major ([K/128][rows] per group)
  float* ws_t;        // blockwise: w scales per group, N-major ([K/128][N/128] per group)

  static constexpr size_t align(size_t v) { return (v + 255) & ~size_t(255); }
  // Carves the arrays from `base` (nullptr: sizes only); returns the bytes used.
  size_t carve(uint8_t* base, const GroupedGemmParams& p, int mode) {
    size_t off = 0;
    auto take = [&](auto*& ptr, size_t bytes) {
      ptr = base ? reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(base + off) : nullptr;
      off = align(off + bytes);
    };
    const size_t G = p.num_groups;
    take(shape, sizeof(*shape) * G);
    take(a, sizeof(*a) * G);
    take(b, sizeof(*b) * G);
    take(d, sizeof(*d) * G);
    take(sa, sizeof(*sa) * G);
    take(sb, sizeof(*sb) * G);
    take(sd, sizeof(*sd) * G);
    take(xs, sizeof(*xs) * G);
    take(ws, sizeof(*ws) * G);
    const bool bw = mode == kBlockwise;
    const size_t kb = (p.k + 127) / 128, nb = (p.n + 127) / 128;
    const size_t rows = p.masked_m ? G * p.m_max : p.m;
    take(lsfa, bw ? sizeof(*lsfa) * G : 0);
    take(lsfb, bw ? sizeof(*lsfb) * G : 0);
    take(xs_t, bw ? sizeof(float) * (rows * kb + 256) : 0);   // + a tile of rows read past the end
    take(ws_t, bw ? sizeof(float) * (G * nb * kb + 256) : 0);
    return off;
  }
};

constexpr int kPrepThreads = 256;

// Clamped first row and row count of group g (gg_schedule.cuh's rules).
__device__ __forceinline__ void group_rows(const GroupedGemmParams& p, int g, int64_t& start, int64_t& rows) {
  if (p.masked_m) {
    start = static_cast<int64_t>(g) * p.m_max;
    rows = clamp64(__ldg(static_cast<const int*>(p.masked_m) + g), 0, p.m_max);
  } else {
    int64_t e;
    group_span(static_cast<const int*>(p.group_offsets), g, p.m, start, e);
    rows = e - start;
  }
}

// Grid (x, groups): block (0, g) writes group g's arrays; blocks (x, g) convert group g's
// blockwise scales; every block writes its share of the zero rows (16-byte stores: the path
// needs N * sizeof(Out) to be a multiple of 16). Offsets and masked_m are clamped, so bad
// device values never send TMA outside x, w or y.
template <class C, class In, class Out, int kMode>
__global__ void __launch_bounds__(kPrepThreads) gg_sm90_prep(const GroupedGemmParams p, Arrays<C, In, Out> arr) {
  common::pdl_launch_dependents();  // the GEMM may be scheduled now; it waits for this grid's end
  const int g = blockIdx.y;
  const int n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  const int kb = (k + 127) / 128, nb = (n + 127) / 128;
  int64_t start, rows;
  group_rows(p, g, start, rows);
  const float* xs = static_cast<const float*>(p.x_scale);
  const float* ws = static_cast<const float*>(p.w_scale);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    arr.shape[g] = make_shape(static_cast<int>(rows), n, k);
    arr.a[g] = static_cast<const In*>(p.x) + start * k;
    arr.b[g] = static_cast<const In*>(p.w) + static_cast<int64_t>(g) * n * k;
    arr.d[g] = static_cast<Out*>(p.y) + start * n;
    arr.sa[g] = make_stride(static_cast<int64_t>(k), _1{}, _0{});
    arr.sb[g] = make_stride(static_cast<int64_t>(k), _1{}, _0{});
    arr.sd[g] = make_stride(static_cast<int64_t>(n), _1{}, _0{});
    if constexpr (kMode == kScaled) {
      const bool rowwise = p.scale_mode == 2;
      arr.xs[g] = xs ? (rowwise ? xs + start : xs) : nullptr;
      arr.ws[g] = rowwise ? ws + static_cast<int64_t>(g) * n : ws + g;
    }
    if constexpr (kMode == kBlockwise) {
      arr.xs[g] = arr.xs_t + start * kb;
      arr.ws[g] = arr.ws_t + static_cast<int64_t>(g) * nb * kb;
      arr.lsfa[g] = BlockScale::tile_atom_to_shape_SFA(make_shape(static_cast<int>(rows), n, k, 1));
      arr.lsfb[g] = BlockScale::tile_atom_to_shape_SFB(make_shape(static_cast<int>(rows), n, k, 1));
    }
  }
  if constexpr (kMode == kBlockwise) {  // [rows][kb] -> [kb][rows]; [nb][kb] -> [kb][nb]
    const int64_t per = rows * kb;
    float* xd = arr.xs_t + start * kb;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < per;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t r = i / kb, c = i % kb;
      xd[c * rows + r] = __ldg(xs + (start + r) * kb + c);
    }
    const float* wsg = ws + static_cast<int64_t>(g) * nb * kb;
    float* wd = arr.ws_t + static_cast<int64_t>(g) * nb * kb;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nb * kb; i += gridDim.x * blockDim.x)
      wd[(i % kb) * nb + i / kb] = __ldg(wsg + i);
  }
  // Zero rows, one warp per row: rows past offsets[G] (contiguous), slots past masked_m[g].
  const int chunks = static_cast<int>(p.n * sizeof(Out) / 16);
  const int lane = threadIdx.x % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * (kPrepThreads / 32) + threadIdx.x / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * gridDim.y * (kPrepThreads / 32);
  const int64_t rows_total = p.masked_m ? static_cast<int64_t>(p.num_groups) * p.m_max : p.m;
  const int64_t first = p.masked_m ? 0 : clamp64(__ldg(static_cast<const int*>(p.group_offsets) + p.num_groups), 0, p.m);
  for (int64_t r = first + warp; r < rows_total; r += warps) {
    if (p.masked_m) {
      const int64_t gr = r / p.m_max;
      if (r - gr * p.m_max < clamp64(__ldg(static_cast<const int*>(p.masked_m) + gr), 0, p.m_max)) continue;
    }
    uint4* row = reinterpret_cast<uint4*>(static_cast<Out*>(p.y) + r * p.n);
    for (int c = lane; c < chunks; c += 32) row[c] = make_uint4(0, 0, 0, 0);
  }
}

template <class C, class In, class Out, int kMode>
typename C::Gemm::Arguments make_args(const GroupedGemmParams& p, const Arrays<C, In, Out>& arr, int sm_count,
                                      int along_n) {
  typename C::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {p.num_groups, arr.shape, nullptr};
  if constexpr (kMode == kBlockwise) {
    args.mainloop = {arr.a, arr.sa, arr.b, arr.sb, arr.xs, arr.lsfa, arr.ws, arr.lsfb};
  } else {
    args.mainloop = {arr.a, arr.sa, arr.b, arr.sb};
  }
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = arr.d;
  args.epilogue.dD = arr.sd;
  if constexpr (kMode == kScaled) {
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
  using Raster = decltype(args.scheduler.raster_order);
  args.scheduler.raster_order = along_n ? Raster::AlongN : Raster::AlongM;
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = sm_count;
  return args;
}

// Runs one call; ws: at least workspace() bytes of device memory (256-B aligned).
template <class C, class In, class Out, int kMode>
struct Runner {
  static size_t workspace(const GroupedGemmParams& p, int sm_count, int along_n) {
    Arrays<C, In, Out> arr{};
    const size_t own = arr.carve(nullptr, p, kMode);
    return own + C::Gemm::get_workspace_size(make_args<C, In, Out, kMode>(p, arr, sm_count, along_n)) + 256;
  }

  static const char* run(const GroupedGemmParams& p, void* ws, size_t ws_bytes, int sm_count, int along_n,
                         cudaStream_t stream) {
    if (ws_bytes < workspace(p, sm_count, along_n)) return "grouped_gemm: the sm90 workspace is too small";
    Arrays<C, In, Out> arr{};
    uint8_t* base = static_cast<uint8_t*>(ws);
    const size_t own = arr.carve(base, p, kMode);
    // Enough blocks per group for the zero rows and the scale conversion (grid-stride loops).
    const int64_t rows = p.masked_m ? static_cast<int64_t>(p.num_groups) * p.m_max : p.m;
    const int64_t want = (rows + kPrepThreads / 32 - 1) / (kPrepThreads / 32) / p.num_groups + 1;
    const dim3 grid(static_cast<unsigned>(min64(want, std::max<int64_t>(1, 2 * sm_count / p.num_groups))), p.num_groups);
    gg_sm90_prep<C, In, Out, kMode><<<grid, kPrepThreads, 0, stream>>>(p, arr);
    if (cudaGetLastError() != cudaSuccess) return "grouped_gemm: the sm90 prep kernel did not launch";
    auto args = make_args<C, In, Out, kMode>(p, arr, sm_count, along_n);
    typename C::Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return "grouped_gemm: CUTLASS cannot run this shape";
    if (gemm.initialize(args, base + own, stream) != cutlass::Status::kSuccess)
      return "grouped_gemm: CUTLASS initialization failed";
    if (gemm.run(stream, nullptr, /*launch_with_pdl=*/true) != cutlass::Status::kSuccess)
      return "grouped_gemm: the CUTLASS kernel did not launch";
    return nullptr;
  }
};

}  // namespace dualops::cuda::gg::sm90

namespace dualops::cuda::gg {

// The body of sm90_recipe<R> (gg_sm90.h) for one configuration; gg_sm90_<recipe>.cu
// specialize sm90_recipe with it, one file per recipe.
template <class In, class Out, class Tile, class Cluster, class Sched, int kMode>
const char* sm90_call(const GroupedGemmParams& p, void* ws, size_t* ws_bytes, int sms, int along_n,
                      cudaStream_t stream) {
  using Run = sm90::Runner<sm90::Config<In, Out, Tile, Cluster, Sched, kMode>, In, Out, kMode>;
  if (!ws) {
    *ws_bytes = Run::workspace(p, sms, along_n);
    return nullptr;
  }
  return Run::run(p, ws, *ws_bytes, sms, along_n, stream);
}

}  // namespace dualops::cuda::gg

"""The CUDA launch heuristics, in one place: every choice the CUDA backend makes from the device
profile that is not shape-only (dualops/tiling keeps the shared, shape-only planning). Each is a
pure function of (shapes, device profile, tuning overrides); the C++ launchers read the result from
the plan or the params struct and decide nothing themselves.

- IFA: the launch fields of IncreFlashAttentionCudaTiling (``choose_launch``): split-kernel variant,
  q tile, merge of split-KV partials, prefetches and stagger. The compile-time facts of each kernel
  variant (warps, pipeline stages, chunks per step, whether the cluster merge's buffers fit) mirror
  backends/cuda/incre_flash_attention/ifa_config.cuh and ifa_split_kernel.cuh (``Cfg``,
  ``SmemLayout``, ``ClusterMergeLayout``); the C++ side checks that the plan names a variant it
  builds. Why each rule is as it is: docs/tuning.md.
- MLA decode: the split kernel (``cuda_mla_kernel``, MlaDecodeCudaParams::kernel) and the sparse key
  sort (``cuda_mla_sort_keys``).
- Grouped GEMM: the mma.sync kernel or a CUTLASS sm90 kernel (``cuda_kernel_for``), and the
  mma.sync kernel's tile M (``gg_mma_tile_m``).

Codes come from the plan contract (ops/<op>.yaml ``plan.enums``, generated into
ops/include/dualops/enums.h).
"""
from __future__ import annotations

import dataclasses

from .. import plan_contract, schema, tuning
from ..devices import DeviceProfile

# ============================================================================ IFA

# Kernel variants (IfaCudaVariant) and merges (IfaCudaMerge) of the plan contract.
_VARIANTS = plan_contract.enum("incre_flash_attention", "cuda_variant")
_MERGES = plan_contract.enum("incre_flash_attention", "cuda_merge")
NARROW, WIDE, WIDE1, WIDE_LS, NARROW_PF, WIDE_PF = (_VARIANTS[n] for n in (
    "narrow", "wide", "wide1", "wide_lockstep", "narrow_prefetch", "wide_prefetch"))
VARIANT_NAMES = {v: n.replace("_", "-") for n, v in _VARIANTS.items()}
MERGE_KERNEL, MERGE_COUNTER, MERGE_CLUSTER = (_MERGES[n] for n in ("kernel", "counter", "cluster"))
MERGE_NAMES = {v: ("combine-kernel" if n == "kernel" else n) for n, v in _MERGES.items()}

CHUNK_KEYS = 16                  # keys per warp chunk
MAX_CLUSTER_SPLITS = 8           # portable cluster size
MERGE_IN_KERNEL_BYTES = 128 * 1024  # partials one merging CTA may read
MAX_MERGE_GROUPS = 1 << 16       # arrival counters (ifa_tiling.h kMaxMergeGroups)
STAGGER_NS = 8000                # first-wave spread of narrow 16-bit multi-wave grids
LOCKSTEP_BURST_KEYS = 8192       # contiguous lockstep units of this many keys use the burst order
INT8, FP8 = schema.DTYPE_CODES["int8"], schema.DTYPE_CODES["float8_e4m3fn"]  # DType codes


@dataclasses.dataclass(frozen=True)
class IfaLaunchFields:
    """The launch fields of an IFA plan header (0 where they do not apply)."""

    cta_m_tile: int = 16         # q rows of one CTA (16, 32 or 64)
    variant: int = WIDE          # split-kernel variant
    merge: int = MERGE_KERNEL    # merge of split-KV partials
    merge_fallback: int = MERGE_KERNEL  # when the GPU cannot hold every cluster at once
    pdl: int = 1                 # programmatic dependent launch of the split kernel
    wave_ctas: int = 0           # CTAs of the first wave (SMs x CTAs per SM)
    stagger_ns: int = 0          # spread of the first wave's starts
    second_fill_keys: int = 0    # splits of >= this many keys prefetch their second fill
    lockstep_burst: int = 0      # the lockstep kernel's burst order


def max_m_tile(head_dim: int) -> int:
    return 4096 // head_dim


def pick_m_tile(q_rows: int, head_dim: int) -> int:
    m = 16 if q_rows <= 16 else 32 if q_rows <= 32 else 64
    return min(m, max_m_tile(head_dim))


def cfg(variant: int, head_dim: int, kv_bytes: int) -> dict:
    """Compile-time facts of a variant (ifa_config.cuh Cfg)."""
    quant = kv_bytes == 1
    narrow = variant in (NARROW, NARROW_PF)
    warps = 4 if narrow else (4 if (not quant and head_dim == 256) else 8)
    stage_bytes = 2 * CHUNK_KEYS * head_dim * kv_bytes
    budget = (((96 if quant else 105) if narrow else (200 if quant else 210))) * 1024
    stages = min(max(budget // (warps * stage_bytes), 2), 8)
    sub = 1 if variant == WIDE1 or stages < 6 else 2
    return dict(quant=quant, warps=warps, ctas_per_sm=2 if narrow else 1, stages=stages, sub=sub,
                kv_smem=warps * stages * stage_bytes)


def cluster_merge_fits(variant: int, head_dim: int, kv_bytes: int, m_tile: int) -> bool:
    """ClusterMergeLayout::kFits: the cluster merge's buffers fit the K/V stages."""
    c = cfg(variant, head_dim, kv_bytes)
    pitch = head_dim + 4 if c["quant"] else head_dim  # 8-bit epilogues stage their rows
    lse = c["warps"] * m_tile * head_dim * 4 + m_tile * pitch * 4
    return lse + m_tile * 4 <= c["kv_smem"]


def has_variant(variant: int, head_dim: int, kv_bytes: int, m_tile: int) -> bool:
    """Whether the build has kernel `variant` for this head dim, cache width and q tile."""
    wide = cfg(WIDE, head_dim, kv_bytes)
    if variant == WIDE1:
        return m_tile <= 32 and wide["sub"] > 1
    if variant == WIDE_LS:
        return wide["quant"] or wide["sub"] == 1
    if variant in (NARROW_PF, WIDE_PF):
        return wide["quant"]
    return variant in (NARROW, WIDE)


def unit_keys(p) -> int:
    """Keys of the plan's longest unit (with whole groups: those hold every key)."""
    return p.split_len if p.whole_groups == 0 and p.split_len < p.max_kv_len else p.max_kv_len


def _knob(name, default):
    v = tuning.get(name)
    return default if v is None else v


def _variant(p, rules, sms: int, m: int, kv_dtype: int) -> int:
    d, kvb = p.head_dim, p.kv_dtype_bytes
    quant = kvb == 1
    tiles = -(-p.q_rows // m)
    keys = unit_keys(p)
    forced_shape = tuning.get("ifa_cta_shape")
    if forced_shape is not None:
        shape = NARROW if forced_shape == "narrow" else WIDE
    else:
        # many short units: narrow CTAs, two per SM, out of step
        limit = rules.narrow_max_unit_bytes_8bit if quant else (
            rules.narrow_max_unit_bytes_16bit if d <= 128 else 0)
        many_short = m == 16 and p.num_units * tiles >= 2 * sms and keys * d * 2 * kvb <= limit
        shape = NARROW if many_short else WIDE
    if has_variant(NARROW_PF, d, kvb, m) and shape == NARROW and _knob("ifa_narrow_prefetch", rules.narrow_prefetch):
        return NARROW_PF
    if shape != WIDE:
        return shape
    free = forced_shape is None
    if free and has_variant(WIDE1, d, kvb, m) and keys <= cfg(WIDE, d, kvb)["warps"] * CHUNK_KEYS:
        return WIDE1
    one_wave = p.num_units * tiles <= sms
    if has_variant(WIDE_LS, d, kvb, m):
        lock = tuning.get("ifa_lockstep_keys")
        if lock is None:
            lock = (rules.lockstep_keys if not one_wave else
                    rules.lockstep_keys_one_wave_8bit if quant else rules.lockstep_keys_one_wave)
        if free and lock > 0 and keys >= lock:
            return WIDE_LS
    if has_variant(WIDE_PF, d, kvb, m):
        forced = tuning.get("ifa_wide_prefetch")
        if forced is not None:
            pf = forced
        elif not one_wave or not free:
            pf = False
        else:
            lo = rules.wide_prefetch_min_keys_int8 if kv_dtype == INT8 else rules.wide_prefetch_min_keys_fp8
            hi = rules.wide_prefetch_max_keys
            pf = keys >= lo and (hi == 0 or keys <= hi)
        if pf:
            return WIDE_PF
    return WIDE


def _merge(p, variant: int, m: int) -> tuple[int, int]:
    """(merge, fallback when not every cluster fits the GPU at once)."""
    if p.num_splits == 1:
        return MERGE_KERNEL, MERGE_KERNEL
    forced = tuning.get("ifa_merge")
    if forced == "kernel":
        return MERGE_KERNEL, MERGE_KERNEL
    tiles = -(-p.q_rows // m)
    rows = min(p.q_rows, m)
    counter = (p.batch * p.h_kv * tiles <= MAX_MERGE_GROUPS
               and p.num_splits * rows * p.head_dim * 4 <= MERGE_IN_KERNEL_BYTES)
    fallback = MERGE_COUNTER if counter else MERGE_KERNEL
    # (each CTA of a cluster merges a slice of the rows x head_dim / 4 slots, one per thread)
    slice_ok = -(-rows * (p.head_dim // 4) // p.num_splits) <= 32 * cfg(variant, p.head_dim, p.kv_dtype_bytes)["warps"]
    if (forced != "counter" and cluster_merge_fits(variant, p.head_dim, p.kv_dtype_bytes, m)
            and p.num_splits <= MAX_CLUSTER_SPLITS and p.whole_groups == 0 and slice_ok):
        return MERGE_CLUSTER, fallback
    return fallback, fallback


def choose_launch(p, device, kv_dtype: int) -> IfaLaunchFields:
    """The launch fields of plan `p` (its shape and split fields set) on CUDA `device`, under the
    tuning overrides in force. `kv_dtype`: the cache's DType code (int8 and fp8 differ)."""
    rules = device.ifa_cuda
    if rules is None:
        return IfaLaunchFields()
    sms = device.num_cores
    m = pick_m_tile(p.q_rows, p.head_dim)
    variant = _variant(p, rules, sms, m, kv_dtype)
    merge, fallback = _merge(p, variant, m)
    c = cfg(variant, p.head_dim, p.kv_dtype_bytes)
    wave = sms * c["ctas_per_sm"]
    waves = p.num_units * -(-p.q_rows // m) > wave
    stagger = _knob("ifa_stagger_ns", STAGGER_NS if variant == NARROW and not c["quant"] else 0) if waves else 0
    burst_keys = _knob("ifa_lockstep_burst_keys", LOCKSTEP_BURST_KEYS)
    burst = int(variant == WIDE_LS and p.block_size == 0 and burst_keys > 0 and unit_keys(p) >= burst_keys)
    return IfaLaunchFields(cta_m_tile=m, variant=variant, merge=merge, merge_fallback=fallback,
                     pdl=int(_knob("ifa_pdl", True)), wave_ctas=wave, stagger_ns=stagger,
                     second_fill_keys=_knob("ifa_second_fill_keys", rules.second_fill_keys),
                     lockstep_burst=burst)


def describe_ifa_launch(launch: IfaLaunchFields) -> str:
    if launch.wave_ctas == 0:
        return ""
    merge = MERGE_NAMES[launch.merge] + (f" (else {MERGE_NAMES[launch.merge_fallback]})"
                                         if launch.merge != launch.merge_fallback else "")
    extra = [f"stagger {launch.stagger_ns} ns"] if launch.stagger_ns else []
    if launch.second_fill_keys:
        extra.append(f"second fill from {launch.second_fill_keys} keys")
    if launch.lockstep_burst:
        extra.append("burst order")
    if not launch.pdl:
        extra.append("no PDL")
    return (f"cuda: {VARIANT_NAMES[launch.variant]} kernel, {launch.cta_m_tile}-row q tile, "
            f"merge {merge}, wave {launch.wave_ctas} CTAs" + "".join(", " + e for e in extra))


# ============================================================================ MLA decode

# The CUDA split kernels (MlaDecodeCudaParams.kernel: MlaCudaKernel codes; designs in
# docs/mla_decode_cuda.md). Each needs a block to opt into MLA_CUDA_WGMMA_SMEM_BYTES of shared
# memory (every sm_90 GPU can). The plan's choice, rule by rule, with its reason (the measurements
# behind the bounds: BENCHMARKS.md, benchmarks/cuda/mla_kernel_ab.py):
#   * wgmma_t up to MLA_CUDA_WGMMA_T_MAX_Q_ROWS q rows (s_q * h_q): its MMAs put the q rows on N
#     (8, 16 or 32), so memory-bound calls do a fraction of a 64-row kernel's MMA work per tile,
#     and its two tile chains per CTA keep more copies in flight.
#   * wgmma_seesaw for 16-bit caches above 64 q rows, pages of a multiple of 64 tokens: both
#     warpgroups overlap their softmaxes with MMAs, which pays once a request's m-blocks share its
#     tiles through L2, with one TMA box per block and page.
#   * wgmma otherwise: 64 q rows per MMA, FP8 tiles dequantized while the tensor cores run P V.
#   * Sparse decode (q rows: h_q), kernels whose copies address tokens one by one: wgmma_t for FP8
#     caches up to MLA_CUDA_WGMMA_T_MAX_Q_ROWS heads (its 16-bit path copies pages by TMA), else
#     wgmma.
#   * Sorted key lists (cuda_mla_sort_keys) for 16-bit caches from MLA_CUDA_SORT_MIN_HEADS heads
#     and at most MLA_CUDA_SORT_MAX_KEYS entries (one CTA sorts a list in shared memory):
#     neighbouring keys then share DRAM pages; with fewer heads or an FP8 cache the sort
#     measured no net gain.
#   * Fixed cost per request piece (mla_fixed_overhead): FlashMLA's 5 blocks, 2 on CUDA up to
#     MLA_CUDA_WGMMA_T_ROWS q rows, where a memory-bound piece's fixed cost is about one block's
#     copy time.
MLA_CUDA_KERNELS = plan_contract.enum("mla_decode", "cuda_kernel")   # MlaCudaKernel codes
MLA_CUDA_WGMMA_T_ROWS = 32  # the most q rows (s_q * h_q) the wgmma_t kernel takes
MLA_CUDA_M_BLOCK_ROWS = 64  # q rows of one wgmma CTA (mla_config.cuh kRows; the plan's m block)
# Shared memory of the largest layout of the MLA split kernels: wgmma_t with 16 q rows and a
# 16-bit cache at d_qk 576 (Q, a KV ring filling what is left of 227 KiB; mla_launch.cuh
# static_asserts it; the wgmma kernel's layouts are at most 230536 B, its seesaw loop's).
MLA_CUDA_WGMMA_SMEM_BYTES = 232224
# Per cache format, the most q rows for which the wgmma_t kernel is planned (int8_v32 has fp8_v32's
# token layout and dequant path, int8 in place of e4m3, and takes its choices in these tables).
MLA_CUDA_WGMMA_T_MAX_Q_ROWS = {"bf16": 32, "fp8_v32": 32, "fp8_model1": 32, "int8_v32": 32}
# Sparse decode: per cache format, the heads from which the list kernel sorts each query token's
# main-pool keys by token id (None: never), and the most entries a list may have to be sorted.
MLA_CUDA_SORT_MIN_HEADS = {"bf16": 65, "fp8_v32": None, "fp8_model1": None, "int8_v32": None}
MLA_CUDA_SORT_MAX_KEYS = 4096


def cuda_mla_kernel(device: DeviceProfile, *, kv_format: str, q_rows: int, page_block_size: int = 64,
                    sparse: bool = False) -> str:
    """The CUDA split kernel of a call, by the choice table above MLA_CUDA_KERNELS. Sparse decode
    (q_rows: h_q, the rows that share a query token's key list) runs on the kernels whose copies
    address tokens one by one: with an FP8 cache wgmma_t up to MLA_CUDA_WGMMA_T_MAX_Q_ROWS[kv_format]
    heads, else wgmma. Dense decode: wgmma_t up to MLA_CUDA_WGMMA_T_MAX_Q_ROWS[kv_format] q rows
    (s_q * h_q), else wgmma, which runs its seesaw loop (wgmma_seesaw) for 16-bit caches with pages
    of a multiple of 64 tokens and more than 64 q rows. A GPU whose blocks cannot opt into
    MLA_CUDA_WGMMA_SMEM_BYTES of shared memory has no MLA kernel (ValueError)."""
    if device.kind != "cuda":
        raise ValueError(f"mla_decode (cuda): device {device.name!r} is not a CUDA GPU (pass a CUDA profile, e.g. h100)")
    if device.smem_per_core_bytes < MLA_CUDA_WGMMA_SMEM_BYTES:
        raise ValueError(f"mla_decode (cuda): the kernels need a block to opt into {MLA_CUDA_WGMMA_SMEM_BYTES} bytes "
                         f"of shared memory (every sm_90 GPU can); device {device.name!r} allows "
                         f"{device.smem_per_core_bytes}")
    if q_rows <= MLA_CUDA_WGMMA_T_MAX_Q_ROWS[kv_format] and not (sparse and kv_format == "bf16"):
        return "wgmma_t"
    if not sparse and kv_format == "bf16" and page_block_size % 64 == 0 and q_rows > MLA_CUDA_M_BLOCK_ROWS:
        return "wgmma_seesaw"
    return "wgmma"


def cuda_mla_sort_keys(*, kv_format: str, h_q: int, topk: int) -> bool:
    """Whether the list kernel of a sparse call sorts each query token's main-pool keys by token id
    (from MLA_CUDA_SORT_MIN_HEADS[kv_format] heads, up to MLA_CUDA_SORT_MAX_KEYS entries; the extra
    pool's keys keep their order). Sorting changes only the order in which keys are summed."""
    low = MLA_CUDA_SORT_MIN_HEADS[kv_format]
    return low is not None and h_q >= low and topk <= MLA_CUDA_SORT_MAX_KEYS


# ============================================================================ grouped GEMM

# CUDA kernels (docs/grouped_gemm_cuda.md): "mma" (own mma.sync kernel, every case) and the
# CUTLASS sm90 kernels, each for some (x / w dtype, scale mode, output dtype): "sm90" (large
# tiles, 2 x 1 clusters; blockwise fp8: 1 x 2), "sm90_small" (64-row ping-pong tiles), "sm90_mid"
# (the large tiles in 1 x 2 clusters) and "sm90_fast" (fp8 with tensor-core-only accumulation,
# like torch._scaled_grouped_mm; opt-in, never chosen by the planner). Measured on the H100 and
# the H200 (benchmarks/cuda/gg_kernel_choice.py), the planner picks by average rows per group: up
# to SM90_SMALL_MAX_ROWS (one 64-row tile per group) sm90_small where it exists (it streams the
# weights faster than the own kernel even at 4 rows per group); in the SM90_MID_ROWS ranges
# sm90_mid: at 65-128 rows (one 128-row tile per group) each weight tile is read by one CTA and x
# multicast to the cluster's two column tiles (64-row tiles would read every weight tile twice,
# 2 x 1 clusters would leave half the CTAs without rows); at 257-384 rows a group has three row
# tiles and sm90's 2 x 1 clusters leave half of the last pair idle (sm90_mid 1.3-1.5x faster
# there); fp8 (shorter K steps per byte) also gains from 129 to 256 rows, bf16 does not. sm90
# elsewhere. Recipes without a small kernel take sm90 from this fraction of the weight-streaming
# ridge on (rows per group at which a group's GEMM does as many FLOPs per weight byte as the
# device's peak FLOPs per byte of bandwidth), the own kernel below; blockwise fp8 takes sm90 at
# every size (H100, 32 groups of 4-96 rows: 1.05-3.2x faster than the own kernel, 2.6-2.8 TB/s).
_FP8_SCALED = {("float8_e4m3fn", "per_tensor", "bfloat16"), ("float8_e4m3fn", "rowwise", "bfloat16")}
_BF16 = {("bfloat16", "none", "bfloat16")}
SM90_KERNELS = {
    "sm90": _BF16 | {("float16", "none", "float16"), ("float8_e4m3fn", "blockwise", "bfloat16")} | _FP8_SCALED,
    "sm90_small": _BF16 | _FP8_SCALED,
    "sm90_fast": _FP8_SCALED,
    "sm90_mid": _BF16 | _FP8_SCALED,
}
CUDA_KERNELS = ("mma",) + tuple(SM90_KERNELS)
_SM90 = plan_contract.enum("grouped_gemm", "cuda_sm90_config")   # GgSm90Config: the binding's config codes
SM90_CONFIG = {k: v for k, v in _SM90.items() if k in SM90_KERNELS}
SM90_ALONG_N = _SM90["along_n"]  # config bit: the tile scheduler walks the tiles along N (plan.cuda_raster "n")
SM90_RIDGE_FRACTION = 0.25
SM90_BLOCKWISE_MIN_ROWS = 1   # blockwise fp8: sm90 from one row per group (measured above)
SM90_SMALL_MAX_ROWS = 64      # sm90_small's tile M
SM90_MID_ROWS = {2: ((65, 128), (257, 384)), 1: ((65, 384),)}   # by x / w element bytes: rows per group


def _elem_bytes(dtype: str) -> int:
    return 1 if dtype in ("int8", "float8_e4m3fn") else 2


# The tile Ms the mma.sync kernel is instantiated for (grouped_gemm_host.cu checks the same list).
GG_MMA_TILE_MS = (8, 16, 32, 48, 64)


def gg_mma_tile_m_of(tile_m: int) -> int:
    """The smallest instantiated mma.sync tile M holding `tile_m` rows (64 above that)."""
    return min((c for c in GG_MMA_TILE_MS if c >= tile_m), default=GG_MMA_TILE_MS[-1])


def gg_mma_tile_m(avg_rows: int, device: DeviceProfile) -> int:
    """The mma.sync kernel's tile M for groups of `avg_rows` rows on average: the planner's tile M
    (``tiling.grouped_gemm.tile_m_for``), or a bigger instantiated one that pads the groups no
    more (each m tile re-reads the group's weights: 128 rows per group run as 2 x 64, not 4 x 32)."""
    from ..tiling.grouped_gemm import tile_m_for   # that module imports this one

    avg = max(1, avg_rows)
    t = gg_mma_tile_m_of(tile_m_for(avg, device))
    pad = lambda c: -(-avg // c) * c - avg  # noqa: E731
    return max((c for c in GG_MMA_TILE_MS if c >= t and pad(c) <= pad(t)), default=t)


def sm90_min_rows(dtype: str, device: DeviceProfile, scale_mode: str = "none") -> int:
    """Average rows per group from which the CUDA backend runs a CUTLASS sm90 kernel."""
    if scale_mode == "blockwise":
        return SM90_BLOCKWISE_MIN_ROWS
    elem = _elem_bytes(dtype)
    peak = device.peak_bf16_tflops * (2 if elem == 1 else 1)   # fp8 / int8 tensor cores: 2x
    ridge_rows = peak * 1e12 / (device.bandwidth_gbs * 1e9) * elem / 2
    return max(1, round(ridge_rows * SM90_RIDGE_FRACTION))


def sm90_supports(kernel: str, n: int, dtype: str, scale_mode: str, out_dtype: str) -> bool:
    """Whether CUTLASS kernel `kernel` covers this call (recipe, and 16-byte output rows)."""
    return (dtype, scale_mode, out_dtype) in SM90_KERNELS.get(kernel, ()) and (n * 2) % 16 == 0


def cuda_kernel_for(avg_rows: int, *, n: int, dtype: str, scale_mode: str, out_dtype: str,
                    device: DeviceProfile) -> str:
    """The CUDA kernel the planner picks (module comment at CUDA_KERNELS)."""
    if not device.is_cuda:
        return "mma"
    if avg_rows <= SM90_SMALL_MAX_ROWS and sm90_supports("sm90_small", n, dtype, scale_mode, out_dtype):
        return "sm90_small"
    mid = any(lo <= avg_rows <= hi for lo, hi in SM90_MID_ROWS[_elem_bytes(dtype)])
    if mid and sm90_supports("sm90_mid", n, dtype, scale_mode, out_dtype):
        return "sm90_mid"
    if avg_rows >= sm90_min_rows(dtype, device, scale_mode) and sm90_supports("sm90", n, dtype, scale_mode, out_dtype):
        return "sm90"
    return "mma"

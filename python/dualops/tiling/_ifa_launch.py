"""CUDA IFA launch choices: which split-kernel variant, q tile, merge of split-KV partials,
prefetches and stagger a plan runs with. One pure function of (plan shape, device profile,
tuning overrides); the launcher (backends/cuda/incre_flash_attention/ifa_launch.cuh) reads the
result from the plan header and decides nothing itself.

The compile-time facts of each kernel variant (warps, pipeline stages, chunks per step, whether
the cluster merge's buffers fit) mirror backends/cuda/incre_flash_attention/ifa_config.cuh and
ifa_split_kernel.cuh (``Cfg``, ``SmemLayout``, ``ClusterMergeLayout``); the C++ side checks that
the plan names a variant it builds. Why each rule is as it is: docs/tuning.md.
"""
from __future__ import annotations

import dataclasses

from .. import tuning

# Kernel variants (ifa_config.cuh CtaShape) and merges (ifa_split_kernel.cuh MergeMode).
NARROW, WIDE, WIDE1, WIDE_LS, NARROW_PF, WIDE_PF = range(6)
VARIANT_NAMES = ("narrow", "wide", "wide1", "wide-lockstep", "narrow-prefetch", "wide-prefetch")
MERGE_KERNEL, MERGE_COUNTER, MERGE_CLUSTER = range(3)
MERGE_NAMES = ("combine-kernel", "counter", "cluster")

CHUNK_KEYS = 16                  # keys per warp chunk
MAX_CLUSTER_SPLITS = 8           # portable cluster size
MERGE_IN_KERNEL_BYTES = 128 * 1024  # partials one merging CTA may read
MAX_MERGE_GROUPS = 1 << 16       # arrival counters (ifa_tiling.h kMaxMergeGroups)
STAGGER_NS = 8000                # first-wave spread of narrow 16-bit multi-wave grids
LOCKSTEP_BURST_KEYS = 8192       # contiguous lockstep units of this many keys use the burst order
INT8, FP8 = 3, 4                 # DType codes (ops/include/dualops/params.h)


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


def describe(launch: IfaLaunchFields) -> str:
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

"""Planner for grouped_gemm: tile sizes, pipeline depth and the work list of output tiles.

Tiles (after hpc-ops' Hopper grouped GEMM): tile M (tokens) from the average rows per group
by the table below, tile N 128, tile K = 128 bytes of one input row (64 for fp16/bf16, 128 for
fp8/int8: one 128-B swizzle atom on Hopper, and for fp8 exactly one blockwise-scale K block).
On Ascend (the cube kernel of backends/ascend/grouped_gemm) the tiles come from the device
profile instead (`ascend_tiles`): tile M from the same table rounded up to the cube fractal (16),
or 128 x 256 output tiles when groups average >= 256 rows (so the cube, not the copies of A and B,
bounds a tile; 128 x 128 for blockwise, whose tile N is one N scale block); the K step is the largest of 256,
128, 64, 32 elements whose two L0A and two L0B buffers fit (the K loop is double-buffered: L1
stage and L0 buffer s % 2), and one fp32 accumulator tile must fit L0C. fp8 operands reach the
cube decoded to fp16 (the A2 cube has no fp8), so they count 2 bytes on chip; blockwise keeps
K step 128 (one scale block per step). `describe()` shows the on-chip bytes against capacity.

Work items are output tiles (group, m_tile, n_tile) for every group (an empty group gives
none), ordered group by group, then by n tile, with m tiles innermost, so consecutive items
(which run at the same time on different cores) share one weight tile and hit it in L2.
Dealing rule: core c of num_cores takes items c, c + num_cores, ... (round-robin; items are
uniform except m tails, so cores differ by at most one item).

Item (g, mt, nt) covers output columns [nt * tile_n, min((nt + 1) * tile_n, n)) and rows
  contiguous layout: group_offsets[g] + [mt * tile_m, min((mt + 1) * tile_m, rows(g)))
  masked layout:     row slots [mt * tile_m, min((mt + 1) * tile_m, rows(g))) of group g
where rows(g) is what the plan was made from. A shape-only plan (masked layout without
masked_m values: `plan_grouped_gemm_masked`) has ceil(m_max / tile_m) m tiles per group;
the kernel skips a tile whose first row is at or past masked_m[g] (read on the device) and
clips the last one, so the plan never needs device values and suits CUDA-graph capture.

The CUDA backend takes tile M and the kernel from a plan: its persistent kernel finds the same
items (n tile fastest within an m tile) from group_offsets / masked_m on the device, so a
contiguous call needs no host read of the offsets (docs/grouped_gemm_cuda.md). `cuda_kernel`
(not packed) is "mma" (that kernel, every case) or one of the CUTLASS grouped TMA + wgmma
kernels (compute-bound groups: `dualops.heuristics.cuda.cuda_kernel_for`, CUDA_KERNELS).

Packed layout: header (FIELDS), then items [num_items, 3] = (group, m_tile, n_tile).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import torch

from .. import plan_contract, schema
from ..devices import DeviceProfile
from ..heuristics.cuda import CUDA_KERNELS, SM90_KERNELS, cuda_kernel_for, sm90_supports
from .base import PackedPlan, ceil_div, check_choice, check_device, check_int, int_list, round_up

GG_VERSION = plan_contract.version("grouped_gemm")
LAYOUTS = plan_contract.enum("grouped_gemm", "layout")           # GgLayout codes
SCALE_MODES = plan_contract.enum("grouped_gemm", "scale_mode")   # GgScaleMode codes
# x / w dtypes: (DType code, bytes).
IN_DTYPES = {n: (schema.DTYPE_CODES[n], b) for n, b in (("float16", 2), ("bfloat16", 2), ("int8", 1),
                                                         ("float8_e4m3fn", 1))}

TILE_N = 128
TILE_K_BYTES = 128
CUDA_MAX_STAGES = 8          # hpc-ops runs 8 stages of TMA loads
ASCEND_MAX_STAGES = 2        # the cube kernel double-buffers L1 and L0A/L0B
MIN_STAGES = 2
SMEM_RESERVED = 1024         # barriers and bookkeeping
BLOCKWISE_K = 128            # K width of one blockwise scale

# hpc-ops tile M by average tokens per group: an exact multiple of the tile beats a bigger
# tile with a padded tail, hence 96 -> 48 and 128 -> 32.
TILE_M_TABLE = ((8, 8), (16, 16), (32, 32), (48, 48), (64, 64), (96, 48), (128, 32), (144, 48))
TILE_M_DEFAULT = 64


def tile_m_for(avg_rows: int, device: DeviceProfile) -> int:
    tile = next((t for limit, t in TILE_M_TABLE if avg_rows <= limit), TILE_M_DEFAULT)
    if device.is_ascend:
        tile = round_up(tile, device.cube_fractal)
    return tile


ASCEND_LARGE_M = 256         # average group rows from which Ascend takes 128 x 256 tiles
ASCEND_K_STEPS = (256, 128, 64, 32)
ASCEND_MAX_PARTS = 8         # blockwise: K blocks' partial products kept in L0C per hand-off


def ascend_cube_elem_bytes(dtype: str) -> int:
    """Bytes of one operand element on the Ascend cube: fp8 is decoded to fp16 first."""
    return 1 if dtype == "int8" else 2


def ascend_tiles(avg_rows: int, dtype: str, scale_mode: str, device: DeviceProfile) -> tuple[int, int, int]:
    """(tile_m, tile_n, tile_k) of the Ascend cube kernel (module docstring)."""
    e = ascend_cube_elem_bytes(dtype)
    tile_m, tile_n = tile_m_for(avg_rows, device), TILE_N
    if avg_rows >= ASCEND_LARGE_M:   # blockwise: 128 x 128 (tile N is one scale block)
        tile_m, tile_n = 128, (TILE_N if scale_mode == "blockwise" else 256)
    mp = round_up(tile_m, device.cube_fractal)
    if mp * tile_n * 4 > device.l0c_bytes:
        raise ValueError(f"tile {tile_m}x{tile_n} does not fit {device.name}'s L0C")
    if scale_mode == "blockwise":
        return tile_m, tile_n, BLOCKWISE_K
    for tk in ASCEND_K_STEPS:
        if 2 * mp * tk * e <= device.l0a_bytes and 2 * tile_n * tk * e <= device.l0b_bytes \
                and 2 * (mp + tile_n) * tk * e <= device.l1_bytes:
            return tile_m, tile_n, tk
    raise ValueError(f"tile {tile_m}x{tile_n} leaves no K step in {device.name}'s L0A / L0B")


def gemm_footprint(device: DeviceProfile, *, tile_m: int, tile_n: int, tile_k: int, stages: int,
                   elem_bytes: int, scale_mode: str) -> dict[str, int]:
    """On-chip bytes of one core: CUDA {"smem"}; Ascend {"l1", "l0a", "l0b", "l0c"}.
    A and B tiles in `stages` pipeline stages; CUDA adds an fp32-safe epilogue tile, scale
    buffers and barriers; Ascend (elem_bytes: the cube's, see ascend_cube_elem_bytes)
    double-buffers one K slice of A/B in L0A/L0B and keeps one fp32 accumulator in L0C
    (scales live on the vector cores)."""
    if device.is_ascend:
        mp = round_up(tile_m, 16)
        parts = 1   # blockwise: up to ASCEND_MAX_PARTS K blocks' partials in L0C (gg_layout.h)
        if scale_mode == "blockwise":
            parts = max(1, min(ASCEND_MAX_PARTS, device.l0c_bytes // (mp * tile_n * 4)))
        return {"l1": stages * (mp + tile_n) * tile_k * elem_bytes,
                "l0a": 2 * mp * tile_k * elem_bytes,
                "l0b": 2 * tile_n * tile_k * elem_bytes,
                "l0c": parts * mp * tile_n * 4}
    stage = (tile_m + tile_n) * tile_k * elem_bytes
    if scale_mode == "blockwise":
        stage += tile_m * 4 + ceil_div(tile_n, BLOCKWISE_K) * 4   # one K block's scales
    fixed = (tile_m + tile_n) * 4 if scale_mode == "rowwise" else 0
    epilogue = tile_m * tile_n * 4
    return {"smem": stages * stage + fixed + epilogue + SMEM_RESERVED}


def gemm_capacity(device: DeviceProfile) -> dict[str, int]:
    if device.is_cuda:
        return {"smem": device.smem_per_core_bytes}
    return {"l1": device.l1_bytes, "l0a": device.l0a_bytes, "l0b": device.l0b_bytes,
            "l0c": device.l0c_bytes}


@dataclasses.dataclass(frozen=True)
class GroupedGemmPlan(PackedPlan):
    """Grouped GEMM tile schedule; header, then items [num_items, 3] = (group, m_tile, n_tile)."""

    version: int
    layout: int            # LAYOUTS code
    num_groups: int
    m_total: int           # rows planned: sum of group rows (shape-only: num_groups * m_max)
    m_max: int             # masked layout: row slots per group; contiguous: 0
    n: int
    k: int
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    num_n_tiles: int
    num_k_tiles: int
    num_items: int
    num_cores: int         # cores to launch (>= 1 even with no items)
    in_dtype: int          # DType code of x / w
    scale_mode: int        # SCALE_MODES code
    shape_only: int        # 1: made without device values (masked layout, m_max tiles/group)
    items: tuple[int, ...] = ()   # [num_items, 3] (group, m_tile, n_tile)
    onchip: str = dataclasses.field(default="", compare=False)   # Ascend: on-chip bytes / capacity (not packed)
    cuda_kernel: str = dataclasses.field(default="mma", compare=False)  # CUDA_KERNELS (not packed)
    cuda_raster: str = dataclasses.field(default="m", compare=False)    # sm90 tile order: "m" / "n" (not packed)

    FIELDS: ClassVar[tuple[str, ...]] = plan_contract.header_fields("grouped_gemm")  # GroupedGemmTiling
    ARRAYS: ClassVar[tuple[tuple[str, int], ...]] = (("items", 3),)
    VERSION: ClassVar[int] = GG_VERSION

    def _array_rows(self, name: str) -> int:
        return self.num_items

    def item(self, i: int) -> tuple[int, int, int]:
        if not 0 <= i < self.num_items:
            raise ValueError(f"item must be in [0, {self.num_items}), got {i}")
        return tuple(self.items[3 * i:3 * i + 3])

    def item_list(self) -> list[tuple[int, int, int]]:
        return [tuple(self.items[i:i + 3]) for i in range(0, len(self.items), 3)]

    def items_of_core(self, c: int) -> range:
        if not 0 <= c < self.num_cores:
            raise ValueError(f"core must be in [0, {self.num_cores}), got {c}")
        return range(c, self.num_items, self.num_cores)

    def footprint(self, device: DeviceProfile) -> dict[str, int]:
        mode = {v: k for k, v in SCALE_MODES.items()}[self.scale_mode]
        elem = {c: b for c, b in IN_DTYPES.values()}[self.in_dtype]
        if device.is_ascend:
            elem = ascend_cube_elem_bytes({c: n for n, (c, _) in IN_DTYPES.items()}[self.in_dtype])
        return gemm_footprint(device, tile_m=self.tile_m, tile_n=self.tile_n, tile_k=self.tile_k,
                              stages=self.stages, elem_bytes=elem, scale_mode=mode)

    def describe(self) -> str:
        layout = {v: k for k, v in LAYOUTS.items()}[self.layout]
        mode = {v: k for k, v in SCALE_MODES.items()}[self.scale_mode]
        shape = " shape-only" if self.shape_only else ""
        return (f"grouped GEMM {layout}{shape} G={self.num_groups} M={self.m_total} N={self.n} "
                f"K={self.k} {mode}: tile {self.tile_m}x{self.tile_n}x{self.tile_k}, "
                f"{self.stages} stages, {self.num_items} items on {self.num_cores} cores"
                + (f" ({self.onchip})" if self.onchip else "")
                + (f", CUDA kernel {self.cuda_kernel}" if self.cuda_kernel != "mma" else ""))


def _dtype_name(dtype, arg: str = "dtype") -> str:
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype.removeprefix("torch.")
        name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16",
                "fp8": "float8_e4m3fn", "float8": "float8_e4m3fn"}.get(name, name)
    else:
        raise TypeError(f"{arg} must be a torch.dtype or str, got {type(dtype).__name__}")
    if arg == "out_dtype":
        return check_choice(arg, name, ("float32", "float16", "bfloat16"))
    return check_choice(arg, name, tuple(IN_DTYPES))


def _stages(device, *, tile_m, tile_n, tile_k, elem_bytes, scale_mode) -> int:
    cap = gemm_capacity(device)
    max_stages = CUDA_MAX_STAGES if device.is_cuda else ASCEND_MAX_STAGES
    for stages in range(max_stages, MIN_STAGES - 1, -1):
        need = gemm_footprint(device, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, stages=stages,
                              elem_bytes=elem_bytes, scale_mode=scale_mode)
        if all(need[key] <= cap[key] for key in need):
            return stages
    raise ValueError(f"tile {tile_m}x{tile_n}x{tile_k} does not fit {device.name} with "
                     f"{MIN_STAGES} stages")


def _onchip_text(device, **tiles) -> str:
    if not device.is_ascend:
        return ""
    need, cap = gemm_footprint(device, **tiles), gemm_capacity(device)
    parts = ", ".join(f"{k.upper()} {need[k] // 1024}/{cap[k] // 1024} KB" for k in ("l1", "l0a", "l0b", "l0c"))
    return f"{device.name}: K step {tiles['tile_k']}, L1 and L0A/L0B double-buffered; {parts}"


@functools.lru_cache(maxsize=256)
def _plan(rows: tuple[int, ...], *, layout: str, m_max: int, shape_only: bool, avg_rows: int,
          n: int, k: int, dtype: str, scale_mode: str, device: DeviceProfile, out_dtype: str = "bfloat16",
          kernel: str | None = None) -> GroupedGemmPlan:
    code, elem_bytes = IN_DTYPES[dtype]
    if device.is_ascend:
        tile_m, tile_n, tile_k = ascend_tiles(avg_rows, dtype, scale_mode, device)
        elem_bytes = ascend_cube_elem_bytes(dtype)
    else:
        tile_m, tile_n, tile_k = tile_m_for(avg_rows, device), TILE_N, TILE_K_BYTES // elem_bytes
    stages = _stages(device, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, elem_bytes=elem_bytes,
                     scale_mode=scale_mode)
    n_tiles = ceil_div(n, tile_n)
    items: list[int] = []
    for g, r in enumerate(rows):
        for nt in range(n_tiles):
            for mt in range(ceil_div(r, tile_m)):
                items += (g, mt, nt)
    num_items = len(items) // 3
    plan = GroupedGemmPlan(
        version=GG_VERSION, layout=LAYOUTS[layout], num_groups=len(rows), m_total=sum(rows),
        m_max=m_max, n=n, k=k, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, stages=stages,
        num_n_tiles=n_tiles, num_k_tiles=ceil_div(k, tile_k), num_items=num_items,
        num_cores=max(1, min(device.num_cores, num_items)), in_dtype=code,
        scale_mode=SCALE_MODES[scale_mode], shape_only=int(shape_only), items=tuple(items),
        onchip=_onchip_text(device, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, stages=stages,
                            elem_bytes=elem_bytes, scale_mode=scale_mode),
        cuda_kernel=_cuda_kernel(kernel, avg_rows, n=n, dtype=dtype, scale_mode=scale_mode,
                                 out_dtype=out_dtype, device=device))
    plan.pack()
    return plan


def _cuda_kernel(kernel, avg_rows, *, n, dtype, scale_mode, out_dtype, device) -> str:
    if kernel is None:
        return cuda_kernel_for(avg_rows, n=n, dtype=dtype, scale_mode=scale_mode, out_dtype=out_dtype,
                               device=device)
    check_choice("kernel", kernel, CUDA_KERNELS)
    if kernel != "mma" and not (device.is_cuda and sm90_supports(kernel, n, dtype, scale_mode, out_dtype)):
        raise ValueError(f"kernel {kernel!r} does not cover dtype {dtype}, scale_mode {scale_mode!r}, "
                         f"out_dtype {out_dtype}, N {n} on {device.name}: it takes "
                         f"{sorted(SM90_KERNELS[kernel])} with N * 2 bytes a multiple of 16")
    return kernel


def _common(n, k, dtype, scale_mode, device):
    device = check_device(device)
    n = check_int("n", n, min_value=1)
    k = check_int("k", k, min_value=1)
    dtype = _dtype_name(dtype)
    check_choice("scale_mode", scale_mode, tuple(SCALE_MODES))
    if (scale_mode == "none") != (IN_DTYPES[dtype][1] == 2):
        raise ValueError(f"scale_mode {scale_mode!r} does not go with dtype {dtype}: fp16/bf16 "
                         f"take 'none', fp8/int8 a scale mode")
    if scale_mode == "blockwise" and dtype != "float8_e4m3fn":
        raise ValueError(f"scale_mode 'blockwise' needs dtype float8_e4m3fn, got {dtype}")
    return n, k, dtype, device


def plan_grouped_gemm_masked(num_groups: int, m_max: int, *, n: int, k: int, device: DeviceProfile,
                             dtype="bfloat16", scale_mode: str = "none",
                             expected_m: int | None = None, out_dtype="bfloat16",
                             kernel: str | None = None) -> GroupedGemmPlan:
    """Shape-only masked-layout plan: ceil(m_max / tile_m) m tiles for every group, whatever
    masked_m holds at run time. expected_m (average valid rows per group, default m_max) only
    picks tile M and the CUDA kernel."""
    n, k, dtype, device = _common(n, k, dtype, scale_mode, device)
    num_groups = check_int("num_groups", num_groups, min_value=1)
    m_max = check_int("m_max", m_max, min_value=0)
    avg = m_max if expected_m is None else check_int("expected_m", expected_m, min_value=0)
    return _plan((m_max,) * num_groups, layout="masked", m_max=m_max, shape_only=True,
                 avg_rows=avg, n=n, k=k, dtype=dtype, scale_mode=scale_mode, device=device,
                 out_dtype=_dtype_name(out_dtype, "out_dtype"), kernel=kernel)


def plan_grouped_gemm(group_sizes=None, *, group_offsets=None, masked_m=None, n: int, k: int,
                      device: DeviceProfile, layout: str = "contiguous", m_max: int | None = None,
                      num_groups: int | None = None, dtype="bfloat16", scale_mode: str = "none",
                      expected_m: int | None = None, out_dtype="bfloat16",
                      kernel: str | None = None) -> GroupedGemmPlan:
    """Plan a grouped GEMM.

    contiguous: give group_sizes [G] or group_offsets [G + 1] (offsets[0] = 0, non-decreasing).
    masked: give m_max (x.shape[1]) and either masked_m [G] (tiles only for valid rows) or
    num_groups alone for the shape-only plan (see plan_grouped_gemm_masked).
    Lists, tuples or integer tensors on any device are accepted (device tensors are copied to
    the CPU once). dtype: x / w dtype (torch.dtype or name); out_dtype: y's (it decides with the
    shapes which CUDA kernel runs); kernel: force the CUDA kernel (CUDA_KERNELS; default:
    `cuda_kernel_for`)."""
    out = _dtype_name(out_dtype, "out_dtype")
    check_choice("layout", layout, tuple(LAYOUTS))
    n, k, dtype, device = _common(n, k, dtype, scale_mode, device)
    if layout == "contiguous":
        if masked_m is not None:
            raise ValueError("masked_m is for layout='masked'; the contiguous layout takes "
                             "group_sizes or group_offsets")
        if (group_sizes is None) == (group_offsets is None):
            raise ValueError("contiguous layout needs exactly one of group_sizes and group_offsets")
        if group_offsets is not None:
            offs = int_list("group_offsets", group_offsets)
            if len(offs) < 2:
                raise ValueError(f"group_offsets must hold G + 1 >= 2 values, got {len(offs)}")
            if offs[0] != 0:
                raise ValueError(f"group_offsets[0] must be 0, got {offs[0]}")
            rows = []
            for g in range(len(offs) - 1):
                if offs[g + 1] < offs[g]:
                    raise ValueError(f"group_offsets must be non-decreasing, got group_offsets"
                                     f"[{g}] = {offs[g]} > group_offsets[{g + 1}] = {offs[g + 1]}")
                rows.append(offs[g + 1] - offs[g])
        else:
            rows = int_list("group_sizes", group_sizes)
            for g, r in enumerate(rows):
                if r < 0:
                    raise ValueError(f"group_sizes must be >= 0, got group_sizes[{g}] = {r}")
        if not rows:
            raise ValueError("grouped GEMM needs at least one group")
        if num_groups is not None and check_int("num_groups", num_groups) != len(rows):
            raise ValueError(f"num_groups ({num_groups}) disagrees with the {len(rows)} groups given")
        avg = ceil_div(sum(rows), len(rows)) if expected_m is None else \
            check_int("expected_m", expected_m, min_value=0)
        return _plan(tuple(rows), layout="contiguous", m_max=0, shape_only=False, avg_rows=avg,
                     n=n, k=k, dtype=dtype, scale_mode=scale_mode, device=device, out_dtype=out,
                     kernel=kernel)

    # masked
    if group_sizes is not None or group_offsets is not None:
        raise ValueError("layout='masked' takes masked_m (or num_groups for a shape-only plan), "
                         "not group_sizes / group_offsets")
    if m_max is None:
        raise ValueError("layout='masked' needs m_max (rows per group slot, x.shape[1])")
    m_max = check_int("m_max", m_max, min_value=0)
    if masked_m is None:
        if num_groups is None:
            raise ValueError("layout='masked' without masked_m needs num_groups (shape-only plan)")
        return plan_grouped_gemm_masked(num_groups, m_max, n=n, k=k, device=device, dtype=dtype,
                                        scale_mode=scale_mode, expected_m=expected_m, out_dtype=out,
                                        kernel=kernel)
    rows = int_list("masked_m", masked_m)
    if not rows:
        raise ValueError("masked_m must hold at least one group")
    if num_groups is not None and check_int("num_groups", num_groups) != len(rows):
        raise ValueError(f"num_groups ({num_groups}) disagrees with masked_m's {len(rows)} groups")
    for g, r in enumerate(rows):
        if not 0 <= r <= m_max:
            raise ValueError(f"masked_m must be in [0, m_max={m_max}], got masked_m[{g}] = {r}")
    avg = ceil_div(sum(rows), len(rows)) if expected_m is None else \
        check_int("expected_m", expected_m, min_value=0)
    return _plan(tuple(rows), layout="masked", m_max=m_max, shape_only=False, avg_rows=avg, n=n,
                 k=k, dtype=dtype, scale_mode=scale_mode, device=device, out_dtype=out, kernel=kernel)

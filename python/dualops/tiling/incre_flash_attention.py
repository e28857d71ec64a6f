"""Planner for incre_flash_attention: inner tile sizes and the split-KV ("flash decode") work list.

The header layout and the unit / workspace conventions are the contract of docs/internals.md
("IFA plan"); CUDA and Ascend C kernels read it. The plan depends only on shapes and the device
profile, so it is cached and never needs device values (CUDA-graph safe).

Capacity model (what `ifa_footprint` computes and the planner keeps within the device):
- CUDA, one CTA: a q tile (q_tile_rows padded to 16 x head_dim x 2 B) plus K and V tiles of
  kv_tile x head_dim x kv bytes in `CUDA_STAGES` pipeline stages, in shared memory.
- Ascend, one AI core: L1 holds the q tile, a double-buffered K-or-V tile (fp16 after antiquant,
  the cube only multiplies fp16) and the P tile fed to mm2; L0A/L0B/L0C hold double-buffered
  128 x 128 x 128 cube base blocks (mm1 and mm2 iterate over head_dim / kv_tile in those);
  UB of the vector core holds, for q_tile_rows x kv_tile: fp32 scores (double-buffered), fp16 P
  (double-buffered), an fp32 pse tile and a uint8 mask tile; for q_tile_rows x head_dim: the
  fp32 output accumulator and a double-buffered fp32 mm2 result; row statistics; and a fixed
  staging area for int8/fp8 antiquant. Conservatively, one vector core is assumed to hold a
  whole tile (the kernel may share rows between the two AIVs of the core).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

from .. import plan_contract, schema, tuning
from ..devices import DeviceProfile
from ..heuristics import cuda as _cuda
from .base import PackedPlan, ceil_div, check_device, check_int, round_up

IFA_VERSION = plan_contract.version("incre_flash_attention")  # 4: CUDA launch fields in their own struct

# --- CUDA choices ---------------------------------------------------------------------------
CUDA_STAGES = 2              # K/V tiles in flight in shared memory
CUDA_KV_TILE_MAX = 128
CUDA_KV_TILE_PREF = 64       # below this the per-tile sync overhead dominates
CUDA_Q_TILE_MAX = 64         # rows of one CTA's q tile (mma M granule 16)
CUDA_MIN_SPLIT = 128         # keys per split: while the grid leaves SMs idle, more and shorter splits win
                             # down to one 16-key chunk per warp (H200 b1 h8/1 s1k: 8 splits 9.2 us,
                             # 4 splits 10.5; s8k: 64 splits 10.5 us, 32 splits 12.4)
CUDA_MIN_SPLIT_8BIT = 128    # int8 / fp8 caches: as 16-bit, with the one-chunk kernel ...
CUDA_SHORT_SPLIT_8BIT = 256  # ... but splits shorter than this only while the split grid keeps at
CUDA_SHORT_SPLIT_MAX_UNITS = 64  # most this many units (H200 int8 / fp8 graph us: b1 h8/1 s1k 8 splits
                             # 6.9 / 6.7 vs 4: 7.5 / 7.4; b16 h8/1 s1k, 128 units, 8 splits 10.4 /
                             # 10.2 vs 4: 8.0 / 7.9 -- its clusters do not all fit)
CUDA_UNIT_OVERHEAD = 256     # per-unit fixed cost (launch, q load, pipeline fill), in keys
CUDA_MAX_SPLITS = 64         # 16-bit caches: more splits of short ranges lost or tied (H200 b1 h8/1
                             # s32k 64 splits 10.8 us vs 128: 10.7) ...
CUDA_MAX_SPLITS_LONG = 128   # ... but up to 128 where every split keeps CUDA_LONG_SPLIT keys: its
CUDA_LONG_SPLIT = 1024       # first fill is prefetched into L2 under the kernel ahead and 128 SMs
                             # stream (b1 h8/1 s128k: 64 splits 23.9 us vs 128: 22.2)
# Multi-wave grids of a 16-bit cache split only their last, partial wave's groups (_choose_tail;
# H200 graph us: b128 h32/8 s8k 954 -> 931, s16k 1885 -> 1849; 8-bit caches lost 1-5 %):
CUDA_TAIL_MIN_UNIT_BYTES = 2 << 20  # where a unit streams at least this much K+V
CUDA_TAIL_MIN_WAVES = 2      # and the groups fill at least this many whole waves,
CUDA_TAIL_SPLITS = 4         # in at least this many pieces
CUDA_TAIL_MIN_KEYS = 1024    # of at least this many keys
CUDA_MAX_SPLITS_8BIT = 128   # int8 / fp8: more math per byte, 64 SMs do not saturate HBM (b1 h8/1
                             # s128k: int8 64 splits 24.3 us vs 128: 20.0, fp8 22.9 vs 17.7)

# --- Ascend choices -------------------------------------------------------------------------
ASCEND_KV_TILE_MAX = 2048
ASCEND_KV_TILE_PREF = 256    # cube->vector hand-off through GM + flags per tile: keep tiles long
ASCEND_Q_TILE_MAX = 128      # cube base M (L0A / L0C double-buffered at 128 rows)
ASCEND_MIN_SPLIT = 512       # as CANN's flash decode (CANN also gates on B*N_kv < ~0.4 cores;
                             # we let the cost model decide whenever a core would sit idle)
ASCEND_UNIT_OVERHEAD = 512
ASCEND_CUBE_BASE = 128       # base M/N/K block of mm1/mm2 in L0
ASCEND_ANTIQUANT_STAGING = 32 * 1024   # UB bytes reserved to dequantize int8/fp8 K/V chunks
ASCEND_ROW_STAT_BUFFERS = 4  # running max, running sum, tile max, tile sum; 32 B per row each


def ifa_footprint(device: DeviceProfile, *, q_tile_rows: int, kv_tile: int, head_dim: int,
                  kv_dtype_bytes: int, q_dtype_bytes: int = 2) -> dict[str, int]:
    """On-chip bytes one core needs for the tile sizes, per buffer kind, under the model in the
    module docstring. Keys: CUDA {"smem"}; Ascend {"ub", "l1", "l0a", "l0b", "l0c"}."""
    hd = round_up(head_dim, 16)
    rows16 = round_up(q_tile_rows, 16)
    if device.is_cuda:
        q = rows16 * hd * q_dtype_bytes
        kv = CUDA_STAGES * 2 * kv_tile * hd * kv_dtype_bytes
        return {"smem": round_up(q, device.smem_align_bytes) + round_up(kv, device.smem_align_bytes)}
    ua, la = device.ub_align_bytes, device.l1_align_bytes
    rows = q_tile_rows
    ub = (2 * round_up(rows * kv_tile * 4, ua)        # fp32 scores, double-buffered
          + 2 * round_up(rows * kv_tile * 2, ua)      # fp16 P for mm2, double-buffered
          + round_up(rows * kv_tile * 4, ua)          # pse tile (fp32)
          + round_up(rows * kv_tile * 1, ua)          # mask tile (uint8)
          + 3 * round_up(rows * hd * 4, ua)           # O accumulator + double-buffered mm2 result
          + ASCEND_ROW_STAT_BUFFERS * rows * 32       # row stats, one 32-B block per row
          + (ASCEND_ANTIQUANT_STAGING if kv_dtype_bytes == 1 else 0))
    l1 = (round_up(rows16 * hd * q_dtype_bytes, la)
          + 2 * round_up(kv_tile * hd * 2, la)
          + round_up(rows16 * kv_tile * 2, la))
    base_n = min(ASCEND_CUBE_BASE, kv_tile)
    base_k = ASCEND_CUBE_BASE
    return {"ub": ub, "l1": l1,
            "l0a": 2 * rows16 * base_k * 2,
            "l0b": 2 * base_n * base_k * 2,
            "l0c": 2 * rows16 * ASCEND_CUBE_BASE * 4}


def ifa_capacity(device: DeviceProfile) -> dict[str, int]:
    """The capacities `ifa_footprint` is checked against."""
    if device.is_cuda:
        return {"smem": device.smem_per_core_bytes}
    return {"ub": device.ub_bytes, "l1": device.l1_bytes, "l0a": device.l0a_bytes,
            "l0b": device.l0b_bytes, "l0c": device.l0c_bytes}


def _fits(device, **kw) -> bool:
    need = ifa_footprint(device, **kw)
    cap = ifa_capacity(device)
    return all(need[k] <= cap[k] for k in need)


@dataclasses.dataclass(frozen=True)
class IfaPlan(PackedPlan):
    """Split-KV decode attention plan; fields = header, see docs/internals.md "IFA plan"."""

    version: int
    batch: int
    s_q: int
    h_q: int
    h_kv: int
    group: int
    head_dim: int
    max_kv_len: int
    block_size: int
    kv_tile: int
    num_splits: int
    split_len: int
    num_units: int
    num_cores: int
    q_rows: int
    q_tile_rows: int
    kv_dtype_bytes: int
    whole_groups: int = 0
    # CUDA only (IncreFlashAttentionCudaTiling, packed by pack("cuda") after the shared header):
    # the cache's DType code (int8 and fp8 launch differently) and the CUDA launch choices
    # (heuristics.cuda.IfaLaunchFields; 0 on Ascend), read by the CUDA launcher as they are.
    kv_dtype: int = 0
    cta_m_tile: int = 0
    variant: int = 0
    merge: int = 0
    merge_fallback: int = 0
    pdl: int = 0
    wave_ctas: int = 0
    stagger_ns: int = 0
    second_fill_keys: int = 0
    lockstep_burst: int = 0
    # The profile the plan was made for (not in the header): with_splits re-plans the launch on it.
    device: DeviceProfile | None = dataclasses.field(default=None, compare=False, repr=False)

    FIELDS: ClassVar[tuple[str, ...]] = plan_contract.header_fields("incre_flash_attention")
    BACKEND_FIELDS: ClassVar[dict[str, tuple[str, ...]]] = {
        "cuda": plan_contract.backend_fields("incre_flash_attention", "cuda")}
    LAUNCH_FIELDS: ClassVar[tuple[str, ...]] = tuple(f.name for f in dataclasses.fields(_cuda.IfaLaunchFields))
    VERSION: ClassVar[int] = IFA_VERSION

    # -- work list --------------------------------------------------------------------------
    @property
    def num_groups(self) -> int:
        """(batch, KV head) groups: g = b * h_kv + kvh."""
        return self.batch * self.h_kv

    def group_splits(self, g: int) -> int:
        """Splits of group g: 1 for the first whole_groups groups (run whole, by one unit each),
        num_splits for the others."""
        if not 0 <= g < self.num_groups:
            raise ValueError(f"group must be in [0, {self.num_groups}), got {g}")
        return 1 if g < self.whole_groups else self.num_splits

    def unit_coords(self, u: int) -> tuple[int, int, int]:
        """(b, kvh, split) of unit u; a whole group's unit is split 0 of 1."""
        if not 0 <= u < self.num_units:
            raise ValueError(f"unit must be in [0, {self.num_units}), got {u}")
        wg = self.whole_groups
        g, split = (u, 0) if u < wg else (wg + (u - wg) // self.num_splits, (u - wg) % self.num_splits)
        return g // self.h_kv, g % self.h_kv, split

    def with_splits(self, num_splits: int | None = None, *, split_len: int | None = None, granule: int = 16,
                    whole_groups: int = 0, **fields) -> "IfaPlan":
        """This plan with its KV split another way (tests and measurements force plans so), the
        unit count following (``_num_units``). Give num_splits (split_len then the multiple of
        `granule` that makes about that many, and num_splits what that gives for max_kv_len),
        split_len (num_splits to cover max_kv_len), or both (taken as they are, as long as they
        cover max_kv_len: more splits than keys make empty ones). Other fields (num_cores,
        kv_tile, ...) go through `fields`."""
        if split_len is None:
            if num_splits is None:
                raise ValueError("with_splits: give num_splits, split_len or both")
            split_len = granule * -(-self.max_kv_len // (granule * num_splits))
            num_splits = None
        if num_splits is None:
            num_splits = max(1, -(-self.max_kv_len // split_len))
        if split_len < 1 or num_splits * split_len < self.max_kv_len:
            raise ValueError(f"with_splits: {num_splits} splits of {split_len} keys do not cover max_kv_len "
                             f"{self.max_kv_len}")
        plan = dataclasses.replace(self, num_splits=num_splits, split_len=split_len, whole_groups=whole_groups,
                                   num_units=_num_units(self.batch * self.h_kv, whole_groups, num_splits), **fields)
        return plan.relaunched()

    def relaunched(self, device: DeviceProfile | None = None) -> "IfaPlan":
        """This plan with its CUDA launch fields made again (for `device`, default the profile it
        was made for) under the tuning overrides in force; unchanged when it has no CUDA profile."""
        device = device or self.device
        if device is None or not device.is_cuda:
            return self
        launch = _cuda.choose_launch(self, device, self.kv_dtype)
        return dataclasses.replace(self, device=device, **dataclasses.asdict(launch))

    @property
    def launch(self) -> _cuda.IfaLaunchFields:
        """The CUDA launch choices the plan carries."""
        return _cuda.IfaLaunchFields(**{f: getattr(self, f) for f in self.LAUNCH_FIELDS})

    def units_of_core(self, c: int) -> range:
        """Units core c runs: c, c + num_cores, ..."""
        if not 0 <= c < self.num_cores:
            raise ValueError(f"core must be in [0, {self.num_cores}), got {c}")
        return range(c, self.num_units, self.num_cores)

    def kv_ranges(self, kv_len: int, group: int | None = None) -> list[tuple[int, int, int]]:
        """(split, begin, end) of every split of a group (default: a split group) for a request
        holding kv_len keys; empty splits (begin >= kv_len) come back as (split, begin, begin).
        A whole group has one: (0, 0, kv_len)."""
        kv_len = check_int("kv_len", kv_len, min_value=0, max_value=self.max_kv_len)
        if group is not None and self.group_splits(group) == 1:
            return [(0, 0, kv_len)]
        out = []
        for s in range(self.num_splits):
            begin = s * self.split_len
            end = max(begin, min(begin + self.split_len, kv_len))
            out.append((s, begin, end))
        return out

    def q_tiles(self) -> list[tuple[int, int]]:
        """(row_begin, row_end) of the q tiles one unit walks through."""
        return [(r, min(r + self.q_tile_rows, self.q_rows))
                for r in range(0, self.q_rows, self.q_tile_rows)]

    def workspace_floats(self) -> tuple[int, int]:
        """(o_accum, lse_accum) fp32 element counts; (0, 0) without split-KV. Indexed by
        (group * num_splits + split) whether or not the group runs whole (whole groups' slots
        stay unused)."""
        if self.num_splits == 1:
            return 0, 0
        rows = self.batch * self.h_kv * self.num_splits * self.q_rows
        return rows * self.head_dim, rows

    def footprint(self, device: DeviceProfile, q_dtype_bytes: int = 2) -> dict[str, int]:
        return ifa_footprint(device, q_tile_rows=self.q_tile_rows, kv_tile=self.kv_tile,
                             head_dim=self.head_dim, kv_dtype_bytes=self.kv_dtype_bytes,
                             q_dtype_bytes=q_dtype_bytes)

    def describe(self) -> str:
        paged = f"paged bs={self.block_size}" if self.block_size else "contiguous"
        return (f"IFA b={self.batch} s_q={self.s_q} h_q={self.h_q}/h_kv={self.h_kv} d={self.head_dim} "
                f"kv<={self.max_kv_len} {paged}: kv_tile={self.kv_tile} q_tile={self.q_tile_rows}/"
                f"{self.q_rows} splits={self.num_splits}x{self.split_len}"
                + (f" after {self.whole_groups} whole groups" if self.whole_groups else "")
                + f" units={self.num_units} "
                f"on {self.num_cores} cores"
                + (f"; {_cuda.describe_ifa_launch(self.launch)}" if self.wave_ctas else ""))


def _num_units(groups: int, whole_groups: int, num_splits: int) -> int:
    """Units of a plan: one per whole group, num_splits per later group."""
    return whole_groups + (groups - whole_groups) * num_splits


def _kv_tile_candidates(block_size: int, max_tile: int) -> list[int]:
    """Multiples of 16 that are multiples or divisors of block_size (any when contiguous),
    largest first: powers of two times 16, or block_size times powers of two."""
    if block_size == 0:
        cands = {16 << i for i in range(16) if (16 << i) <= max_tile}
    else:
        cands = {block_size << i for i in range(16) if (block_size << i) <= max_tile}
        cands |= {d for d in range(16, min(block_size, max_tile) + 1, 16) if block_size % d == 0}
    return sorted(cands, reverse=True)


def _choose_tiles(device, *, q_rows, head_dim, max_kv_len, block_size, kv_dtype_bytes,
                  q_dtype_bytes) -> tuple[int, int]:
    if device.is_cuda:
        kv_max, kv_pref, q_max = CUDA_KV_TILE_MAX, CUDA_KV_TILE_PREF, CUDA_Q_TILE_MAX
    else:
        kv_max, kv_pref, q_max = ASCEND_KV_TILE_MAX, ASCEND_KV_TILE_PREF, ASCEND_Q_TILE_MAX
    cands = _kv_tile_candidates(block_size, max(kv_max, 16))
    # A tile longer than the longest request only wastes buffer space.
    covering = [c for c in cands if c >= max(max_kv_len, 1)]
    if covering:
        cands = [c for c in cands if c <= min(covering)]
    pref = min(kv_pref, cands[0])
    q_opts = ([q_rows] if q_rows <= q_max else []) + [
        r for r in (128, 64, 32, 16) if r <= q_max and r < q_rows]
    best = None
    for q_tile in q_opts:
        for kv in cands:
            if _fits(device, q_tile_rows=q_tile, kv_tile=kv, head_dim=head_dim,
                     kv_dtype_bytes=kv_dtype_bytes, q_dtype_bytes=q_dtype_bytes):
                # Prefer a kv tile of at least `pref`, then the biggest q tile (K/V is re-read
                # once per q tile), then the longest kv tile.
                key = (min(kv, pref), q_tile, kv)
                if best is None or key > best[0]:
                    best = (key, q_tile, kv)
                break
    if best is None:
        raise ValueError(
            f"head_dim {head_dim} (kv_dtype_bytes {kv_dtype_bytes}) does not fit {device.name}'s "
            f"on-chip buffers even with a 16-row q tile and a 16-key kv tile")
    return best[1], best[2]


def _choose_splits(device, *, units_base, max_kv_len, granule, q_rows, kv_dtype_bytes):
    """(num_splits, split_len). Splitting is considered while batch * h_kv units leave cores idle
    in the first wave and the longest request holds at least two minimum-length splits; the
    number of splits then minimizes a cost model in key-equivalents of one core's time:
    waves x (split_len + per-unit overhead) + the combine pass (its partial traffic spread
    over all cores, plus one more per-unit overhead for its launch). Ties go to fewer splits."""
    if device.is_cuda:
        min_split = CUDA_MIN_SPLIT if kv_dtype_bytes == 2 else CUDA_MIN_SPLIT_8BIT
        overhead = CUDA_UNIT_OVERHEAD
        split_cap = CUDA_MAX_SPLITS_LONG if kv_dtype_bytes == 2 else CUDA_MAX_SPLITS_8BIT
        long_from = CUDA_MAX_SPLITS if kv_dtype_bytes == 2 else split_cap  # more splits: long ones only
    else:
        min_split, overhead = ASCEND_MIN_SPLIT, ASCEND_UNIT_OVERHEAD
        split_cap = long_from = max_kv_len
    cores = device.num_cores
    whole = round_up(max(max_kv_len, 1), granule)
    max_splits = max_kv_len // round_up(min_split, granule)
    if units_base >= cores or max_splits < 2:
        return 1, whole
    # One split's partial (q_rows x head_dim fp32, written then read back) costs as much
    # traffic as this many keys of K+V (2 x head_dim x kv bytes each).
    combine_per_split = ceil_div(4 * q_rows, kv_dtype_bytes)
    best = None
    for s in range(1, min(max_splits, ceil_div(2 * cores, units_base), split_cap) + 1):
        split_len = round_up(ceil_div(max_kv_len, s), granule)
        s_eff = ceil_div(max_kv_len, split_len)      # no split is empty at max_kv_len
        if s_eff > long_from and split_len < CUDA_LONG_SPLIT:
            continue
        if (device.is_cuda and kv_dtype_bytes == 1 and split_len < CUDA_SHORT_SPLIT_8BIT
                and units_base * s_eff > CUDA_SHORT_SPLIT_MAX_UNITS):
            continue
        cost = ceil_div(units_base * s_eff, cores) * (split_len + overhead)
        if s_eff > 1:
            cost += overhead + ceil_div(units_base * s_eff * combine_per_split, cores)
        key = (cost, s_eff)
        if best is None or key < best[0]:
            best = (key, s_eff, split_len)
    return best[1], best[2]


def _choose_tail(device, *, groups, max_kv_len, granule, q_rows, head_dim, kv_dtype_bytes):
    """(whole_groups, num_splits, split_len) for a grid of more (batch, KV head) groups than cores,
    else None. One CTA per group, equal groups: the groups of the last, partial wave start as the
    others end and stream on alone, with most SMs idle -- the wave's ragged tail. So the groups
    of the whole waves stay whole (and go first: lower unit ids start first) and only the last
    wave's are split, into pieces that the SMs take as they free up, so that the grid ends
    within about one piece of the ideal. CUDA only (Ascend keeps one split length), 16-bit caches
    (the 8-bit kernel pays its per-unit cost on the SM it occupies: 1-5 % slower), one q tile per
    unit (the CTAs of a unit's second q tile are dispatched after every first tile), at least
    CUDA_TAIL_MIN_WAVES whole waves (b256 h8/1 s8k, 1.9 waves: +1 %) and units of at least
    CUDA_TAIL_MIN_UNIT_BYTES of K+V (units of 1 MB or less run as two narrow CTAs per SM, which
    fills the tail otherwise: ifa_launch.cuh). Pieces: CUDA_TAIL_SPLITS, or more when the last
    wave has few groups (its pieces should cover the SMs), each of at least CUDA_TAIL_MIN_KEYS,
    and no more than the CUDA_MAX_SPLITS_LONG any 16-bit plan may have."""
    cores = device.num_cores
    if not device.is_cuda or kv_dtype_bytes != 2 or q_rows > 16 or not tuning.get("ifa_tail", True):
        return None
    rem = groups % cores
    if groups // cores < CUDA_TAIL_MIN_WAVES or rem == 0:
        return None
    if max_kv_len * head_dim * 2 * kv_dtype_bytes < CUDA_TAIL_MIN_UNIT_BYTES:
        return None
    splits = min(max(CUDA_TAIL_SPLITS, ceil_div(cores, rem)), max_kv_len // CUDA_TAIL_MIN_KEYS,
                 CUDA_MAX_SPLITS_LONG)
    if splits < 2:
        return None
    split_len = round_up(ceil_div(max_kv_len, splits), granule)
    return groups - rem, ceil_div(max_kv_len, split_len), split_len


def plan_incre_flash_attention(*, batch: int, s_q: int, h_q: int, h_kv: int, head_dim: int,
                               max_kv_len: int, block_size: int = 0, kv_dtype_bytes: int = 2,
                               q_dtype_bytes: int = 2, kv_dtype: int | None = None,
                               device: DeviceProfile) -> IfaPlan:
    """Plan one IFA call. max_kv_len: S_max (contiguous) or max_blocks_per_seq * block_size
    (paged); block_size 0 = contiguous cache. kv_dtype: the cache's DType code (default bf16 for
    2-byte caches, int8 for 1-byte ones). The plan follows the tuning overrides in force."""
    return _plan(batch=batch, s_q=s_q, h_q=h_q, h_kv=h_kv, head_dim=head_dim, max_kv_len=max_kv_len,
                 block_size=block_size, kv_dtype_bytes=kv_dtype_bytes, q_dtype_bytes=q_dtype_bytes,
                 kv_dtype=kv_dtype, device=device, overrides=tuning.current())


@functools.lru_cache(maxsize=1024)
def _plan(*, batch, s_q, h_q, h_kv, head_dim, max_kv_len, block_size, kv_dtype_bytes, q_dtype_bytes,
          kv_dtype, device, overrides) -> IfaPlan:
    del overrides  # (a cache key: tuning.get reads them)
    device = check_device(device)
    batch = check_int("batch", batch, min_value=1)
    s_q = check_int("s_q", s_q, min_value=1)
    h_q = check_int("h_q", h_q, min_value=1)
    h_kv = check_int("h_kv", h_kv, min_value=1)
    if h_q % h_kv:
        raise ValueError(f"h_q must be a multiple of h_kv, got h_q={h_q}, h_kv={h_kv}")
    head_dim = check_int("head_dim", head_dim, min_value=1)
    max_kv_len = check_int("max_kv_len", max_kv_len, min_value=0)
    block_size = check_int("block_size", block_size, min_value=0)
    if block_size % 16:
        raise ValueError(f"block_size must be 0 (contiguous) or a multiple of 16, got {block_size}")
    kv_dtype_bytes = check_int("kv_dtype_bytes", kv_dtype_bytes)
    if kv_dtype_bytes not in (1, 2):
        raise ValueError(f"kv_dtype_bytes must be 1 (int8/fp8) or 2 (fp16/bf16), got {kv_dtype_bytes}")
    q_dtype_bytes = check_int("q_dtype_bytes", q_dtype_bytes)
    if q_dtype_bytes != 2:
        raise ValueError(f"q_dtype_bytes must be 2 (q is fp16/bf16), got {q_dtype_bytes}")
    if kv_dtype is None:
        kv_dtype = _BF16 if kv_dtype_bytes == 2 else _cuda.INT8
    kv_dtype = check_int("kv_dtype", kv_dtype)
    if (kv_dtype in _ONE_BYTE) != (kv_dtype_bytes == 1) or kv_dtype not in (*_ONE_BYTE, *_TWO_BYTE):
        raise ValueError(f"kv_dtype code {kv_dtype} does not match kv_dtype_bytes {kv_dtype_bytes}")

    group = h_q // h_kv
    q_rows = group * s_q
    q_tile_rows, kv_tile = _choose_tiles(
        device, q_rows=q_rows, head_dim=head_dim, max_kv_len=max_kv_len, block_size=block_size,
        kv_dtype_bytes=kv_dtype_bytes, q_dtype_bytes=q_dtype_bytes)
    # Splits start on a kv tile and, when paged, on a page (one of the two divides the other).
    granule = max(kv_tile, block_size)
    num_splits, split_len = _choose_splits(
        device, units_base=batch * h_kv, max_kv_len=max_kv_len, granule=granule, q_rows=q_rows,
        kv_dtype_bytes=kv_dtype_bytes)
    whole_groups = 0
    tail = _choose_tail(device, groups=batch * h_kv, max_kv_len=max_kv_len, granule=granule, q_rows=q_rows,
                        head_dim=head_dim, kv_dtype_bytes=kv_dtype_bytes)
    if num_splits == 1 and tail is not None:
        whole_groups, num_splits, split_len = tail
    num_units = _num_units(batch * h_kv, whole_groups, num_splits)
    plan = IfaPlan(
        version=IFA_VERSION, batch=batch, s_q=s_q, h_q=h_q, h_kv=h_kv, group=group,
        head_dim=head_dim, max_kv_len=max_kv_len, block_size=block_size, kv_tile=kv_tile,
        num_splits=num_splits, split_len=split_len, num_units=num_units,
        num_cores=min(device.num_cores, num_units), q_rows=q_rows, q_tile_rows=q_tile_rows,
        kv_dtype_bytes=kv_dtype_bytes, whole_groups=whole_groups, kv_dtype=kv_dtype)
    plan = plan.relaunched(device)
    plan.pack()  # fails early, naming the field, if a value does not fit int32
    return plan


_BF16 = schema.DTYPE_CODES["bfloat16"]
_TWO_BYTE = (schema.DTYPE_CODES["float16"], _BF16)
_ONE_BYTE = (_cuda.INT8, _cuda.FP8)


plan_incre_flash_attention.cache_clear = _plan.cache_clear  # type: ignore[attr-defined]


def _tensor_shape_args(q, k_cache, block_table) -> dict:
    """The planner's shape arguments read off a call's tensors (docs/internals.md: S_kv is the
    contiguous cache length, or max_blocks_per_seq * block_size when paged)."""
    B, S_q, H_q, D = (int(x) for x in q.shape)
    bs = int(k_cache.shape[1]) if block_table is not None else 0
    max_kv = int(block_table.shape[1]) * bs if block_table is not None else int(k_cache.shape[1])
    return dict(batch=B, s_q=S_q, h_q=H_q, h_kv=int(k_cache.shape[2]), head_dim=D, max_kv_len=max_kv,
                block_size=bs, kv_dtype_bytes=k_cache.element_size())


_PLANS_BY_SHAPE: dict = {}


def plan_for_tensors(q, k_cache, block_table, device: DeviceProfile) -> IfaPlan:
    """The plan of one call's shapes: made once per shape and device, then one dict look-up
    (every layer of every decode step asks)."""
    shape = _tensor_shape_args(q, k_cache, block_table)
    key = (*shape.values(), q.element_size(), k_cache.dtype, device, tuning.current())
    plan = _PLANS_BY_SHAPE.get(key)
    if plan is None:
        if len(_PLANS_BY_SHAPE) > 4096:
            _PLANS_BY_SHAPE.clear()
        plan = _PLANS_BY_SHAPE[key] = plan_incre_flash_attention(
            **shape, q_dtype_bytes=q.element_size(), kv_dtype=schema.dtype_code(k_cache.dtype), device=device)
    return plan


def check_plan_for_tensors(plan: IfaPlan, q, k_cache, block_table) -> None:
    """ValueError when ``plan`` was made for other shapes than this call's."""
    for k, v in _tensor_shape_args(q, k_cache, block_table).items():
        if getattr(plan, k) != v:
            raise ValueError(f"plan was made for {k}={getattr(plan, k)}, but the call has {k}={v}; "
                             f"make the plan for this step's shapes")

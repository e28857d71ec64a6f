import itertools
import math

import pytest
import torch

from dualops import tuning
from dualops.devices import ASCEND_910B2, H100, H200, PROFILES, with_cores
from dualops.tiling import IfaPlan, ifa_capacity, plan_incre_flash_attention
from dualops.tiling.incre_flash_attention import (CUDA_LONG_SPLIT, CUDA_MAX_SPLITS, CUDA_MAX_SPLITS_8BIT,
                                                  CUDA_MAX_SPLITS_LONG, CUDA_MIN_SPLIT, CUDA_MIN_SPLIT_8BIT,
                                                  CUDA_SHORT_SPLIT_8BIT, CUDA_SHORT_SPLIT_MAX_UNITS,
                                                  CUDA_TAIL_MIN_KEYS, CUDA_TAIL_SPLITS)

ALL = list(PROFILES.values())
CONTRACT_FIELDS = ("version", "batch", "s_q", "h_q", "h_kv", "group", "head_dim", "max_kv_len",
                   "block_size", "kv_tile", "num_splits", "split_len", "num_units", "num_cores",
                   "q_rows", "q_tile_rows", "kv_dtype_bytes", "whole_groups")
CUDA_FIELDS = ("kv_dtype", "cta_m_tile", "variant", "merge", "merge_fallback", "pdl", "wave_ctas", "stagger_ns",
               "second_fill_keys", "lockstep_burst")


def plan(device=H200, **kw):
    args = dict(batch=1, s_q=1, h_q=32, h_kv=8, head_dim=128, max_kv_len=4096, block_size=0,
                kv_dtype_bytes=2)
    args.update(kw)
    return plan_incre_flash_attention(device=device, **args)


def covered_once(ranges, length):
    """The non-empty [begin, end) ranges tile [0, length) exactly, without overlap."""
    pos = 0
    for b, e in sorted(r for r in ranges if r[1] > r[0]):
        if b != pos:
            return False
        pos = e
    return pos == length


def test_header_is_the_documented_contract():
    """The shared header is shape-only; the CUDA launch fields follow it in the CUDA struct only."""
    assert IfaPlan.FIELDS == CONTRACT_FIELDS and IfaPlan.BACKEND_FIELDS == {"cuda": CUDA_FIELDS}
    p = plan()
    t = p.pack()
    assert t.dtype == torch.int32 and t.device.type == "cpu" and t.numel() == len(CONTRACT_FIELDS)
    assert t.tolist() == [getattr(p, f) for f in CONTRACT_FIELDS]
    assert p.pack("cuda").tolist() == [getattr(p, f) for f in CONTRACT_FIELDS + CUDA_FIELDS]
    assert p.pack("ascend").tolist() == t.tolist()
    assert p.group == 4 and p.q_rows == 4 and p.version == 4 and p.whole_groups == 0 and p.variant in range(6)


def head_dim_cases():
    for dev, hd, group, bs, kvb in itertools.product(
            ALL, (64, 128, 256, 512, 576), (1, 8, 64), (0, 16, 128, 256), (2, 1)):
        yield dev, hd, group, bs, kvb


@pytest.mark.parametrize("dev", ALL, ids=lambda d: d.name)
def test_tiles_fit_on_chip_and_respect_pages(dev):
    for _, hd, group, bs, kvb in (c for c in head_dim_cases() if c[0] is dev):
        for s_q in (1, 2):
            p = plan(dev, s_q=s_q, h_q=group, h_kv=1, head_dim=hd, max_kv_len=32768,
                     block_size=bs, kv_dtype_bytes=kvb)
            ctx = p.describe()
            assert p.kv_tile % 16 == 0, ctx
            if bs:
                assert p.kv_tile % bs == 0 or bs % p.kv_tile == 0, ctx
                assert p.split_len % bs == 0, ctx
            assert p.split_len % p.kv_tile == 0, ctx
            assert 1 <= p.q_tile_rows <= p.q_rows == group * s_q, ctx
            assert p.q_tile_rows == p.q_rows or p.q_tile_rows % 16 == 0, ctx
            # The planner's own footprint model stays within every buffer ...
            need, cap = p.footprint(dev), ifa_capacity(dev)
            assert all(need[k] <= cap[k] for k in need), (ctx, need)
            # ... and so do the plain bounds a kernel writer would check by hand.
            hd16, rows16 = math.ceil(hd / 16) * 16, math.ceil(p.q_tile_rows / 16) * 16
            if dev.is_cuda:
                kv_bytes = 2 * 2 * p.kv_tile * hd16 * kvb      # K + V, double-buffered
                assert kv_bytes + rows16 * hd16 * 2 <= dev.smem_per_core_bytes, ctx
                assert p.kv_tile <= 128, ctx
            else:
                scores = 2 * p.q_tile_rows * p.kv_tile * 4    # fp32, double-buffered
                assert scores + p.q_tile_rows * hd16 * 4 <= dev.ub_bytes, ctx
                assert 2 * p.kv_tile * hd16 * 2 + rows16 * hd16 * 2 <= dev.l1_bytes, ctx
                assert 2 * rows16 * 128 * 2 <= dev.l0a_bytes, ctx   # 128-deep K base block
                assert 2 * rows16 * 128 * 4 <= dev.l0c_bytes, ctx


def test_ascend_kv_tile_shrinks_as_the_group_grows():
    tiles = [plan(ASCEND_910B2, h_q=g, h_kv=1, max_kv_len=65536).kv_tile for g in (1, 8, 32, 64)]
    assert tiles == sorted(tiles, reverse=True) and tiles[0] > tiles[-1]
    assert tiles[-1] >= 256


@pytest.mark.parametrize("dev", ALL + [with_cores(ASCEND_910B2, 2)], ids=lambda d: d.name)
def test_split_ranges_cover_every_key_once(dev):
    for batch, h_kv, max_len, bs in ((1, 1, 131072, 128), (1, 8, 40000, 0), (2, 2, 5000, 64),
                                     (3, 4, 700, 16), (1, 1, 1, 0), (64, 8, 4096, 256)):
        p = plan(dev, batch=batch, h_q=h_kv * 4, h_kv=h_kv, max_kv_len=max_len, block_size=bs)
        # no split is empty for the longest request
        assert (p.num_splits - 1) * p.split_len < max_len, p.describe()
        for kv_len in sorted({0, 1, 15, 16, 17, max_len // 3, max_len - 1, max_len}):
            if not 0 <= kv_len <= max_len:
                continue
            ranges = p.kv_ranges(kv_len)
            assert [s for s, _, _ in ranges] == list(range(p.num_splits))
            assert all(b == s * p.split_len and b <= e for s, b, e in ranges)
            assert covered_once([(b, e) for _, b, e in ranges], kv_len), (p.describe(), kv_len)
        with pytest.raises(ValueError, match="kv_len"):
            p.kv_ranges(max_len + 1)


@pytest.mark.parametrize("dev", [H100, ASCEND_910B2, with_cores(ASCEND_910B2, 3)],
                         ids=lambda d: d.name)
def test_units_and_cores_enumerate_the_work_once(dev):
    p = plan(dev, batch=3, h_q=8, h_kv=2, max_kv_len=65536)
    assert p.num_units == p.batch * p.h_kv * p.num_splits
    assert p.num_cores == min(dev.num_cores, p.num_units)
    coords = [p.unit_coords(u) for u in range(p.num_units)]
    assert sorted(coords) == sorted(itertools.product(range(3), range(2), range(p.num_splits)))
    for u, (b, kvh, s) in enumerate(coords):
        assert u == (b * p.h_kv + kvh) * p.num_splits + s
    dealt = sorted(u for c in range(p.num_cores) for u in p.units_of_core(c))
    assert dealt == list(range(p.num_units))
    with pytest.raises(ValueError, match="unit"):
        p.unit_coords(p.num_units)


def test_forced_splits_keep_the_unit_count_and_cover_the_keys():
    """IfaPlan.with_splits, how tests and measurements force plans: by count (split_len the
    granule multiple that makes about that many), by length, or both as given; units follow."""
    p = plan(H100, batch=3, h_q=8, h_kv=2, max_kv_len=1120)
    q = p.with_splits(70)
    assert (q.num_splits, q.split_len, q.num_units) == (70, 16, 3 * 2 * 70)
    q = p.with_splits(9, granule=128)
    assert (q.num_splits, q.split_len) == (9, 128) and q.num_splits * q.split_len >= 1120
    q = p.with_splits(split_len=48)
    assert (q.num_splits, q.num_units) == (24, 6 * 24)
    q = p.with_splits(80, split_len=16)  # as given: the last 10 splits hold no key
    assert (q.num_splits, q.split_len, q.kv_ranges(1120)[-1]) == (80, 16, (79, 1264, 1264))
    with pytest.raises(ValueError, match="do not cover max_kv_len 1120"):
        p.with_splits(40, split_len=16)
    q = p.with_splits(5, whole_groups=2, kv_tile=32)
    assert (q.whole_groups, q.num_units, q.kv_tile) == (2, 2 + 4 * 5, 32)
    assert [q.group_splits(g) for g in range(6)] == [1, 1, 5, 5, 5, 5]
    assert sorted(q.unit_coords(u) for u in range(q.num_units))[:2] == [(0, 0, 0), (0, 1, 0)]
    with pytest.raises(ValueError, match="num_splits, split_len"):
        p.with_splits()


def test_cluster_merge_only_where_a_slice_fits_the_cta():
    """Each CTA of a cluster merges a slice of the tile's rows x head_dim / 4 slots, one per thread:
    D 256 (4-warp CTAs) with 12 q rows over 3 splits would need 256 a CTA, so another merge runs."""
    from dualops.heuristics.cuda import MERGE_CLUSTER
    for d, s_q, cluster in ((256, 3, False), (256, 1, True), (128, 3, True)):
        p = plan(H100, batch=2, s_q=s_q, h_q=8, h_kv=2, head_dim=d, max_kv_len=320).with_splits(3)
        assert (p.merge == MERGE_CLUSTER) == cluster, p.describe()


@pytest.mark.parametrize("dev", [H100, H200], ids=lambda d: d.name)
def test_multi_wave_grids_split_only_their_last_wave(dev):
    """b128 h32/8 s8k: 1024 groups on 132 SMs = 7 whole waves + 100 groups. The 924 groups of the
    whole waves run whole, first; the last 100 split in pieces (CUDA_TAIL_SPLITS); every key of
    every group is covered once, in unit order whole groups then split ones."""
    p = plan(dev, batch=128, h_q=32, h_kv=8, max_kv_len=8192)
    assert (p.whole_groups, p.num_splits, p.split_len) == (924, CUDA_TAIL_SPLITS, 2048), p.describe()
    assert p.num_units == 924 + 100 * CUDA_TAIL_SPLITS
    coords = [p.unit_coords(u) for u in range(p.num_units)]
    groups = [b * p.h_kv + kvh for b, kvh, _ in coords]
    assert groups == sorted(groups)  # whole groups first, each split group's pieces together
    assert [p.group_splits(g) for g in (0, 923, 924, 1023)] == [1, 1, CUDA_TAIL_SPLITS, CUDA_TAIL_SPLITS]
    assert sorted(coords) == sorted([(g // 8, g % 8, 0) for g in range(924)] +
                                    [(g // 8, g % 8, s) for g in range(924, 1024) for s in range(p.num_splits)])
    for g in (0, 1000):
        for kv_len in (0, 1, 5000, 8192):
            assert covered_once([(b, e) for _, b, e in p.kv_ranges(kv_len, group=g)], kv_len)
    # the workspace keeps one slot per (group, split)
    assert p.workspace_floats() == (1024 * p.num_splits * 4 * 128, 1024 * p.num_splits * 4)
    # a last wave with few groups (272 = 2 x 132 + 8) is cut finer, down to CUDA_TAIL_MIN_KEYS
    few = plan(dev, batch=34, h_q=32, h_kv=8, max_kv_len=8192)
    assert (few.whole_groups, few.num_splits) == (264, 8192 // CUDA_TAIL_MIN_KEYS), few.describe()
    # one group in the last wave of 256k-key units: as many pieces as a 16-bit plan may have
    one = plan(dev, batch=53, h_q=20, h_kv=5, max_kv_len=262144)
    assert (one.whole_groups, one.num_splits) == (264, CUDA_MAX_SPLITS_LONG), one.describe()


@pytest.mark.parametrize("kw", [
    dict(kv_dtype_bytes=1),                       # 8-bit caches: measured slower
    dict(max_kv_len=2048),                        # 1 MB units: narrow CTAs' domain
    dict(batch=33),                               # 264 groups: two exactly full waves
    dict(batch=32),                               # 256 groups: under two whole waves
    dict(h_q=256),                                # 32 q rows: two q tiles per unit
    dict(s_q=5),                                  # 20 q rows likewise
], ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_multi_wave_grids_kept_whole(kw):
    args = dict(batch=128, h_q=32, h_kv=8, max_kv_len=8192)
    args.update(kw)
    p = plan(H200, **args)
    assert p.whole_groups == 0 and p.num_splits == 1, p.describe()
    assert p.num_units == p.batch * p.h_kv


def test_tail_split_can_be_turned_off():
    """tuning.override(ifa_tail=False) plans every group whole again, inside the block only."""
    kw = dict(batch=128, s_q=1, h_q=32, h_kv=8, head_dim=128, max_kv_len=8192, device=H200)
    with tuning.override(ifa_tail=False):
        p = plan_incre_flash_attention(**kw)
        assert (p.whole_groups, p.num_splits) == (0, 1), p.describe()
    assert plan_incre_flash_attention(**kw).whole_groups > 0


def test_ascend_plans_have_no_whole_groups():
    p = plan(ASCEND_910B2, batch=128, h_q=32, h_kv=8, max_kv_len=8192)
    assert p.whole_groups == 0, p.describe()


def test_split_lengths_are_balanced_within_one_tile():
    for dev in ALL:
        for max_len in (2000, 9999, 65536, 131072, 100003):
            for h_kv in (1, 2, 8):
                p = plan(dev, h_q=h_kv, h_kv=h_kv, max_kv_len=max_len, block_size=64)
                granule = max(p.kv_tile, p.block_size)
                if p.num_splits > 1:
                    lens = [e - b for _, b, e in p.kv_ranges(max_len)]
                    assert max(lens) == p.split_len
                    # the longest split is within one tile of a perfect division
                    assert p.split_len - max_len / p.num_splits < granule, p.describe()
                    assert min(lens) > 0


def test_split_kv_engages_for_long_single_requests():
    for dev in ALL:
        for h_kv in (1, 8):
            p = plan(dev, batch=1, h_q=4 * h_kv, h_kv=h_kv, max_kv_len=131072)
            assert p.num_splits > 1, p.describe()
            # roughly fills the machine: at least 3/4 of the cores get a unit -- on CUDA at least
            # CUDA_MAX_SPLITS units: 64 SMs with their K/V pipelines full saturate HBM, and more
            # splits of short ranges measured slower, so a single-head
            # request goes past 64 splits only with long ones (test_split_cap_...)
            need = min(0.75 * dev.num_cores, CUDA_MAX_SPLITS) if dev.is_cuda else 0.75 * dev.num_cores
            assert p.num_units >= need, p.describe()
            assert p.split_len >= (512 if dev.is_ascend else 256)
            w_o, w_lse = p.workspace_floats()
            assert w_lse == p.batch * p.h_kv * p.num_splits * p.q_rows
            assert w_o == w_lse * p.head_dim
    # H200, GQA 32/8: at least cores / h_kv splits
    assert plan(H200, batch=1, h_q=32, h_kv=8, max_kv_len=131072).num_splits >= 132 // 8
    assert plan(ASCEND_910B2, batch=1, h_q=32, h_kv=8, max_kv_len=131072).num_splits >= 24 // 8


def test_split_cap_depends_on_cache_width():
    """16-bit caches stop at CUDA_MAX_SPLITS splits unless every split keeps CUDA_LONG_SPLIT keys
    (then up to CUDA_MAX_SPLITS_LONG: a long split's first fill is prefetched into L2 under the
    kernel ahead: b1 h8/1 s128k 64 splits 23.9 us, 128 splits 22.2); 8-bit
    ones at CUDA_MAX_SPLITS_8BIT: the 8-bit kernel does more math per byte, so a single-head
    128k request needs more SMs (fp8 64 splits 22.9 us, 128 splits 17.7); the split plans of
    the other measured shapes stay as they were (b1 h32/8 s32k 16 splits, b1 h8/1 s8k 64 for
    8-bit since the one-chunk kernel, b1 h8/1 s32k 64 for 16-bit)."""
    for kv_bytes, cap in ((2, CUDA_MAX_SPLITS_LONG), (1, CUDA_MAX_SPLITS_8BIT)):
        p = plan(H200, batch=1, h_q=8, h_kv=1, max_kv_len=131072, kv_dtype_bytes=kv_bytes)
        assert p.num_splits == cap, p.describe()
    assert CUDA_MAX_SPLITS_LONG > CUDA_MAX_SPLITS and CUDA_MAX_SPLITS_8BIT > CUDA_MAX_SPLITS
    for kv_bytes in (1, 2):
        assert plan(H200, batch=1, h_q=32, h_kv=8, max_kv_len=32768, kv_dtype_bytes=kv_bytes).num_splits == 16
    assert plan(H200, batch=1, h_q=8, h_kv=1, max_kv_len=8192, kv_dtype_bytes=1).num_splits == 64
    for dev in (H100, H200):
        for max_len in (8192, 32768, 65536, 100000, 131072, 140000, 262144, 1 << 20):
            p = plan(dev, batch=1, h_q=8, h_kv=1, max_kv_len=max_len)
            assert p.num_splits <= CUDA_MAX_SPLITS_LONG, p.describe()
            if p.num_splits > CUDA_MAX_SPLITS:
                assert p.split_len >= CUDA_LONG_SPLIT, p.describe()
        assert plan(dev, batch=1, h_q=8, h_kv=1, max_kv_len=32768).num_splits == CUDA_MAX_SPLITS


def test_split_kv_stays_off_for_big_batches_and_short_caches():
    for dev in ALL:
        # "short": under two minimum splits (CUDA: 128 keys, Ascend: 512)
        short = ((1, 8, 200), (1, 1, 255)) if dev.is_cuda else ((1, 8, 300), (1, 1, 511))
        # (whole waves only: a partial last wave of long units is split on CUDA, tested above)
        for batch, h_kv, max_len in ((66, 8, 131072), (256, 1, 32768), (dev.num_cores, 1, 131072), *short):
            p = plan(dev, batch=batch, h_q=h_kv, h_kv=h_kv, max_kv_len=max_len)
            assert p.num_splits == 1, p.describe()
            assert p.split_len >= max_len and p.split_len % p.kv_tile == 0
            assert p.workspace_floats() == (0, 0)


def test_deterministic_cached_and_round_trips():
    kw = dict(batch=2, s_q=2, h_q=16, h_kv=2, head_dim=128, max_kv_len=50000, block_size=128)
    a = plan(H100, **kw)
    assert plan(H100, **kw) is a                      # lru_cache
    plan_incre_flash_attention.cache_clear()
    b = plan(H100, **kw)
    assert b is not a and b == a and torch.equal(a.pack(), b.pack())
    for p in (a, plan(ASCEND_910B2, **kw), plan(with_cores(ASCEND_910B2, 2), **kw)):
        assert IfaPlan.from_packed(p.pack("cuda"), "cuda") == p
        assert IfaPlan.from_packed(p.pack("cuda").tolist(), "cuda") == p
        assert IfaPlan.from_packed(p.pack()).header() == p.header()
    bad = a.pack().clone()
    bad[0] = 99
    with pytest.raises(ValueError, match="version"):
        IfaPlan.from_packed(bad)
    with pytest.raises(ValueError, match="trailing"):
        IfaPlan.from_packed(torch.cat([a.pack(), torch.zeros(1, dtype=torch.int32)]))
    with pytest.raises(ValueError, match="int32"):
        IfaPlan.from_packed(a.pack().long())
    assert "splits=" in a.describe() and "\n" not in a.describe()


def test_q_tiles_cover_all_rows():
    p = plan(ASCEND_910B2, s_q=4, h_q=64, h_kv=1, head_dim=256)
    tiles = p.q_tiles()
    assert covered_once(tiles, p.q_rows) and len(tiles) == math.ceil(p.q_rows / p.q_tile_rows)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(h_q=6, h_kv=4), ValueError, "h_q"),
    (dict(block_size=24), ValueError, "block_size"),
    (dict(block_size=-16), ValueError, "block_size"),
    (dict(kv_dtype_bytes=4), ValueError, "kv_dtype_bytes"),
    (dict(q_dtype_bytes=4), ValueError, "q_dtype_bytes"),
    (dict(batch=0), ValueError, "batch"),
    (dict(s_q=0), ValueError, "s_q"),
    (dict(head_dim=0), ValueError, "head_dim"),
    (dict(head_dim=8192), ValueError, "head_dim"),
    (dict(max_kv_len=-1), ValueError, "max_kv_len"),
    (dict(batch=1.5), TypeError, "batch"),
    (dict(h_kv=True), TypeError, "h_kv"),
    (dict(device="tpu-v9"), ValueError, "tpu-v9"),
    (dict(device=123), TypeError, "device"),
])
def test_bad_arguments_name_the_argument(kw, exc, match):
    with pytest.raises(exc, match=match):
        plan(**kw)


def test_short_8bit_splits_only_on_small_grids():
    """8-bit caches split down to CUDA_MIN_SPLIT_8BIT (128) keys, as 16-bit ones, but splits shorter
    than CUDA_SHORT_SPLIT_8BIT (256) only while the split grid keeps <= CUDA_SHORT_SPLIT_MAX_UNITS
    units (b1 h8/1 s1k 8 splits beat 4, b16 h8/1 s1k 8 splits lost to 4)."""
    assert CUDA_MIN_SPLIT_8BIT == CUDA_MIN_SPLIT < CUDA_SHORT_SPLIT_8BIT
    for b, h_q, h_kv, s_kv, ns in ((1, 8, 1, 1024, 8), (1, 8, 1, 8192, 64), (1, 32, 8, 1024, 8), (16, 8, 1, 1024, 4)):
        p = plan(H200, batch=b, h_q=h_q, h_kv=h_kv, max_kv_len=s_kv, kv_dtype_bytes=1)
        assert p.num_splits == ns, p.describe()
    for dev in (H100, H200):
        for b in (1, 2, 4, 8, 16, 32, 64):
            for h_q, h_kv in ((8, 1), (32, 8), (64, 8), (128, 128)):
                for s_kv in (512, 1024, 2048, 4096, 8192, 32768, 131072):
                    p = plan(dev, batch=b, h_q=h_q, h_kv=h_kv, max_kv_len=s_kv, kv_dtype_bytes=1)
                    if p.num_splits > 1 and p.split_len < CUDA_SHORT_SPLIT_8BIT:
                        assert p.num_units <= CUDA_SHORT_SPLIT_MAX_UNITS, p.describe()
                    if p.num_splits > 1:
                        assert p.split_len >= CUDA_MIN_SPLIT_8BIT, p.describe()

import math
import random
from collections import Counter

import pytest
import torch

from dualops.devices import ASCEND_910B2, H100, H200, PROFILES, with_cores
from dualops.tiling import GroupedGemmPlan, plan_grouped_gemm, plan_grouped_gemm_masked
from dualops.tiling.grouped_gemm import gemm_capacity, tile_m_for

ALL = list(PROFILES.values()) + [with_cores(ASCEND_910B2, 3)]
RECIPES = [("bfloat16", "none"), ("float16", "none"), ("float8_e4m3fn", "per_tensor"),
           ("float8_e4m3fn", "rowwise"), ("float8_e4m3fn", "blockwise"), ("int8", "rowwise")]


def check_coverage(p: GroupedGemmPlan, rows):
    """Every (row tile, column tile) of every group exactly once; nothing for empty groups."""
    items = p.item_list()
    assert len(items) == p.num_items
    count = Counter(items)
    assert max(count.values(), default=1) == 1
    n_tiles = math.ceil(p.n / p.tile_n)
    assert p.num_n_tiles == n_tiles and p.num_k_tiles == math.ceil(p.k / p.tile_k)
    expect = {(g, mt, nt) for g, r in enumerate(rows)
              for mt in range(math.ceil(r / p.tile_m)) for nt in range(n_tiles)}
    assert set(items) == expect
    for g, r in enumerate(rows):
        # the tiles' row ranges partition [0, rows(g))
        covered = sorted((mt * p.tile_m, min((mt + 1) * p.tile_m, r))
                         for gg, mt, nt in items if gg == g and nt == 0)
        pos = 0
        for b, e in covered:
            assert b == pos and e > b
            pos = e
        assert pos == r
    # order: group-major, then n tile, m tile innermost
    assert items == sorted(items, key=lambda it: (it[0], it[2], it[1]))
    # round-robin dealing covers each item once and balances to within one item
    dealt = [list(p.items_of_core(c)) for c in range(p.num_cores)]
    assert sorted(i for d in dealt for i in d) == list(range(p.num_items))
    sizes = [len(d) for d in dealt]
    assert max(sizes) - min(sizes) <= 1


def test_tile_m_table():
    table = {1: 8, 8: 8, 9: 16, 16: 16, 17: 32, 32: 32, 33: 48, 48: 48, 49: 64, 64: 64,
             65: 48, 96: 48, 97: 32, 128: 32, 129: 48, 144: 48, 145: 64, 4096: 64}
    for avg, tile in table.items():
        assert tile_m_for(avg, H200) == tile, avg
        assert tile_m_for(avg, ASCEND_910B2) == math.ceil(tile / 16) * 16, avg


def test_cuda_mma_tile_m():
    """The mma.sync kernel's tile M (heuristics.cuda.gg_mma_tile_m): the planner's tile M rounded up
    to an instantiated one, or a bigger one that pads the groups no more. Ranges of average rows
    per group -> tile M, on both CUDA profiles."""
    from dualops.heuristics.cuda import GG_MMA_TILE_MS, gg_mma_tile_m, gg_mma_tile_m_of

    ranges = [(0, 8, 8), (9, 16, 16), (17, 32, 32), (33, 48, 48), (49, 64, 64), (65, 96, 48),
              (97, 128, 64), (129, 144, 48), (145, 1024, 64)]
    for dev in (H100, H200):
        for lo, hi, tile in ranges:
            assert {gg_mma_tile_m(avg, dev) for avg in range(lo, hi + 1)} == {tile}, (dev.name, lo, hi)
    assert [gg_mma_tile_m_of(t) for t in (1, 8, 9, 40, 48, 49, 64, 128)] == [8, 8, 16, 48, 48, 64, 64, 64]
    assert set(GG_MMA_TILE_MS) == {8, 16, 32, 48, 64}


@pytest.mark.parametrize("dev", ALL, ids=lambda d: d.name)
def test_contiguous_varlen_coverage_and_capacity(dev):
    rng = random.Random(dev.num_cores)
    for dtype, mode in RECIPES:
        for G, max_rows, n, k in ((8, 700, 4096, 7168), (33, 40, 200, 96), (1, 1, 1, 1),
                                  (5, 0, 256, 128)):
            rows = [rng.randrange(0, max_rows + 1) for _ in range(G)]
            if G > 2:
                rows[1] = 0
            p = plan_grouped_gemm(rows, n=n, k=k, dtype=dtype, scale_mode=mode, device=dev)
            check_coverage(p, rows)
            assert p.m_total == sum(rows) and p.num_groups == G and p.shape_only == 0
            if dev.is_ascend:   # tiles from L0A / L0B / L0C (ascend_tiles)
                assert p.tile_n in (128, 256) and p.tile_k in (32, 64, 128, 256)
                assert p.stages == 2 and "K step" in p.describe()
            else:
                assert p.tile_n == 128 and p.tile_k * (1 if "8" in dtype else 2) == 128
            if mode == "blockwise":
                assert p.tile_k == 128            # one blockwise scale per K tile
            need, cap = p.footprint(dev), gemm_capacity(dev)
            assert all(need[x] <= cap[x] for x in need), (p.describe(), need)
            assert 2 <= p.stages <= (8 if dev.is_cuda else 4)
            assert 1 <= p.num_cores <= dev.num_cores
            assert p.num_cores == max(1, min(dev.num_cores, p.num_items))


def test_hopper_bf16_gets_deep_pipelines():
    p = plan_grouped_gemm([512] * 8, n=4096, k=7168, device=H200)
    assert (p.tile_m, p.tile_n, p.tile_k) == (64, 128, 64) and p.stages >= 4
    q = plan_grouped_gemm([16] * 256, n=4096, k=7168, dtype=torch.float8_e4m3fn,
                          scale_mode="rowwise", device=H100)
    assert (q.tile_m, q.tile_k, q.stages) == (16, 128, 8)


def test_offsets_sizes_and_tensors_agree():
    rows = [3, 0, 17, 64, 1]
    offs = [0, 3, 3, 20, 84, 85]
    a = plan_grouped_gemm(rows, n=300, k=64, device=H200)
    b = plan_grouped_gemm(group_offsets=offs, n=300, k=64, device=H200)
    c = plan_grouped_gemm(group_offsets=torch.tensor(offs, dtype=torch.int32), n=300, k=64,
                          device=H200)
    d = plan_grouped_gemm(torch.tensor(rows, dtype=torch.int32), n=300, k=64, device=H200)
    assert a == b == c == d


def test_masked_layout_with_values_and_shape_only():
    masked = [0, 5, 256, 100]
    p = plan_grouped_gemm(masked_m=masked, m_max=256, layout="masked", n=512, k=256,
                          device=ASCEND_910B2)
    check_coverage(p, masked)
    assert (p.layout, p.m_max, p.shape_only) == (1, 256, 0)
    s = plan_grouped_gemm(layout="masked", num_groups=4, m_max=256, n=512, k=256,
                          device=ASCEND_910B2)
    assert s == plan_grouped_gemm_masked(4, 256, n=512, k=256, device=ASCEND_910B2)
    assert s.shape_only == 1 and s.m_total == 4 * 256
    check_coverage(s, [256] * 4)
    # every tile a run-time masked_m can need is present
    for g, m in enumerate(masked):
        need = {(g, mt) for mt in range(math.ceil(m / s.tile_m))}
        assert need <= {(gg, mt) for gg, mt, _ in s.item_list()}
    # expected_m only changes tile M
    e = plan_grouped_gemm_masked(4, 256, n=512, k=256, device=H200, expected_m=8)
    assert e.tile_m == 8 and e.num_items == 4 * 32 * 4
    assert plan_grouped_gemm_masked(4, 0, n=512, k=256, device=H200).num_items == 0


def test_deterministic_and_round_trip():
    rows = [random.Random(3).randrange(0, 300) for _ in range(16)]
    for dev in (H200, ASCEND_910B2):
        a = plan_grouped_gemm(rows, n=1024, k=512, dtype="float8_e4m3fn",
                              scale_mode="blockwise", device=dev)
        b = plan_grouped_gemm(list(rows), n=1024, k=512, dtype=torch.float8_e4m3fn,
                              scale_mode="blockwise", device=dev)
        assert torch.equal(a.pack(), b.pack())
        t = a.pack()
        assert t.dtype == torch.int32 and t.numel() == len(GroupedGemmPlan.FIELDS) + 3 * a.num_items
        assert t[len(GroupedGemmPlan.FIELDS):].view(-1, 3).tolist() == [list(i) for i in a.item_list()]
        assert GroupedGemmPlan.from_packed(t) == a
        assert (a.in_dtype, a.scale_mode) == (4, 3)
    empty = plan_grouped_gemm([0, 0], n=128, k=128, device=H200)
    assert empty.num_items == 0 and empty.num_cores == 1
    assert GroupedGemmPlan.from_packed(empty.pack()) == empty
    assert "items" in a.describe() and "\n" not in a.describe()


@pytest.mark.parametrize("args, kw, exc, match", [
    ([[1, 2]], dict(group_offsets=[0, 1, 3]), ValueError, "exactly one"),
    ([None], dict(), ValueError, "exactly one"),
    ([None], dict(group_offsets=[0, 5, 3]), ValueError, "group_offsets"),
    ([None], dict(group_offsets=[1, 5]), ValueError, r"group_offsets\[0\]"),
    ([None], dict(group_offsets=[0]), ValueError, "group_offsets"),
    ([[1, -2]], dict(), ValueError, "group_sizes"),
    ([[]], dict(), ValueError, "group"),
    ([[1, 2]], dict(num_groups=3), ValueError, "num_groups"),
    ([[1, 2]], dict(masked_m=[1, 2]), ValueError, "masked_m"),
    ([None], dict(layout="masked", masked_m=[1, 300], m_max=256), ValueError, "masked_m"),
    ([None], dict(layout="masked", masked_m=[1, 2]), ValueError, "m_max"),
    ([None], dict(layout="masked", m_max=16), ValueError, "num_groups"),
    ([[1]], dict(layout="masked", m_max=16), ValueError, "masked"),
    ([[1]], dict(layout="ragged"), ValueError, "layout"),
    ([[1]], dict(scale_mode="per_row"), ValueError, "scale_mode"),
    ([[1]], dict(scale_mode="rowwise"), ValueError, "scale_mode"),
    ([[1]], dict(dtype="int8", scale_mode="blockwise"), ValueError, "blockwise"),
    ([[1]], dict(dtype="float64"), ValueError, "dtype"),
    ([[1]], dict(dtype=3), TypeError, "dtype"),
    ([[1]], dict(n=0), ValueError, "n must"),
    ([[1]], dict(k=2.5), TypeError, "k must"),
    ([[1.5]], dict(), TypeError, "group_sizes"),
    ([[1]], dict(device="nope"), ValueError, "nope"),
])
def test_bad_arguments_name_the_argument(args, kw, exc, match):
    kw.setdefault("n", 128)
    kw.setdefault("k", 128)
    kw.setdefault("device", H200)
    with pytest.raises(exc, match=match):
        plan_grouped_gemm(*args, **kw)


def test_cuda_kernel_choice():
    from dualops.heuristics.cuda import cuda_kernel_for, sm90_min_rows

    h100 = H100
    lo = sm90_min_rows("bfloat16", h100)
    assert 16 < lo <= 128
    kw = dict(n=4096, dtype="bfloat16", scale_mode="none", out_dtype="bfloat16", device=h100)
    assert cuda_kernel_for(4096, **kw) == "sm90" and cuda_kernel_for(16, **kw) == "sm90_small"
    assert cuda_kernel_for(64, **kw) == "sm90_small" and cuda_kernel_for(65, **kw) == "sm90_mid"
    assert cuda_kernel_for(128, **kw) == "sm90_mid" and cuda_kernel_for(129, **kw) == "sm90"
    assert [cuda_kernel_for(r, **kw) for r in (256, 257, 384, 385)] == ["sm90", "sm90_mid", "sm90_mid", "sm90"]
    fp8 = {**kw, "dtype": "float8_e4m3fn", "scale_mode": "rowwise"}
    assert [cuda_kernel_for(r, **fp8) for r in (4, 64, 96, 128, 256, 384, 512)] == \
        ["sm90_small", "sm90_small", "sm90_mid", "sm90_mid", "sm90_mid", "sm90_mid", "sm90"]
    bw = {**kw, "dtype": "float8_e4m3fn", "scale_mode": "blockwise"}              # no mid kernel
    assert [cuda_kernel_for(r, **bw) for r in (1, 4, 96, 300)] == ["sm90"] * 4  # every size
    fp16 = {**kw, "dtype": "float16", "out_dtype": "float16"}                     # no small kernel
    assert cuda_kernel_for(16, **fp16) == "mma" and cuda_kernel_for(4096, **fp16) == "sm90"
    assert cuda_kernel_for(4096, **{**kw, "out_dtype": "float32"}) == "mma"      # no sm90 kernel for it
    assert cuda_kernel_for(4096, **{**kw, "n": 4100}) == "mma"                   # rows not 16-byte pieces
    assert cuda_kernel_for(4096, **{**kw, "dtype": "float8_e4m3fn", "scale_mode": "rowwise"}) == "sm90"
    plan = plan_grouped_gemm([512, 512], n=256, k=256, device=h100)
    assert plan.cuda_kernel == "sm90" and "sm90" in plan.describe()
    assert plan_grouped_gemm([512], n=256, k=256, device=h100, kernel="mma").cuda_kernel == "mma"
    with pytest.raises(ValueError, match="kernel"):
        plan_grouped_gemm([512], n=256, k=256, device=h100, out_dtype="float32", kernel="sm90")
    with pytest.raises(ValueError, match="kernel"):
        plan_grouped_gemm([512], n=256, k=256, device=h100, kernel="wgmma")
    assert plan_grouped_gemm([512], n=256, k=256, device=ASCEND_910B2).cuda_kernel == "mma"

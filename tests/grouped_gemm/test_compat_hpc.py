"""dualops.compat.hpc: hpc-ops' grouped GEMM signatures against per-group loops written from
hpc-ops' documented semantics (runs on the reference backend here, on CUDA when present)."""
import pytest
import torch

from dualops.compat import hpc

FP8 = torch.float8_e4m3fn
import dualops

from backend_params import BACKENDS, device_of as _dev  # noqa: E402


def _groups(seqlens, dev):
    seq = torch.tensor(seqlens, dtype=torch.int32, device=dev)
    cu = torch.zeros(len(seqlens) + 1, dtype=torch.int32, device=dev)
    cu[1:] = torch.cumsum(seq, 0)
    return seq, cu


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seqlens", [[3, 0, 17, 1], [30, 30], [0, 0, 5]])
def test_pertensor(backend, seqlens):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(1)
    G, N, K = len(seqlens), 200, 192
    seq, cu = _groups(seqlens, dev)
    M = sum(seqlens)
    x = (torch.randn(M, K, generator=g) / 4).to(FP8).to(dev)
    w = (torch.randn(G, N, K, generator=g) / 4).to(FP8).to(dev)
    ys = (torch.rand(G, generator=g) + 0.5).to(dev)
    y = hpc.group_gemm_pertensor_fp8(x, w, seq, cu, ys, num_seq_per_group_avg=max(1, M // G), backend=backend)
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == (M, N)
    for i in range(G):
        a, b = int(cu[i]), int(cu[i + 1])
        want = (x[a:b].double() @ w[i].double().t()) * float(ys[i])
        torch.testing.assert_close(y[a:b].double().cpu(), want.cpu(), rtol=1e-2, atol=1e-2)
    out = torch.empty_like(y)
    assert hpc.group_gemm_pertensor_fp8(x, w, seq, cu, ys, output=out, tma_desc=torch.empty(8, dtype=torch.uint8),
                                        task_map_workspace=torch.empty(4, dtype=torch.int32), backend=backend) is out
    assert torch.equal(out, y)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seqlens,avg", [([30, 30, 30], 30), ([3, 0, 40, 1], 11), ([70, 2], 36)])
def test_blockwise(backend, seqlens, avg):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(2)
    G, N, K = len(seqlens), 256, 384
    kb, nb = K // 128, N // 128
    seq, cu = _groups(seqlens, dev)
    M = sum(seqlens)
    tile = hpc.hpc_tile_m(avg)
    pad = sum(-(-s // tile) * tile for s in seqlens)
    x = (torch.randn(M, K, generator=g) / 4).to(FP8).to(dev)
    w = (torch.randn(G, N, K, generator=g) / 4).to(FP8).to(dev)
    xs = (torch.rand(kb, pad, generator=g) + 0.5).to(dev)
    ws = (torch.rand(G, nb, 4, generator=g) + 0.5).to(dev)  # hpc-ops pads the last dim to 4
    y = hpc.group_gemm_blockwise_fp8(x, w, seq, cu, xs, ws, num_seq_per_group_avg=avg, backend=backend)
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == (M, N)
    start = 0
    for i, s in enumerate(seqlens):
        a = int(cu[i])
        for r in range(s):
            xr = x[a + r].double().view(kb, 128) * xs[:, start + r].double().cpu().to(dev)[:, None]
            wr = w[i].double().view(nb, 128, kb, 128) * ws[i, :, :kb].double()[:, None, :, None]
            want = torch.einsum("kc,nikc->ni", xr, wr).reshape(N)
            torch.testing.assert_close(y[a + r].double().cpu(), want.cpu(), rtol=1e-2, atol=2e-2)
        start += -(-s // tile) * tile


def test_bad_arguments():
    x = torch.zeros(4, 128, dtype=FP8)
    w = torch.zeros(2, 128, 128, dtype=FP8)
    seq, cu = _groups([2, 2], "cpu")
    with pytest.raises(ValueError, match="seqlens"):
        hpc.group_gemm_pertensor_fp8(x, w, seq[:1], cu, torch.ones(2))
    with pytest.raises(ValueError, match="x_scale"):
        hpc.group_gemm_blockwise_fp8(x, w, seq, cu, torch.ones(2, 32), torch.ones(2, 1, 1))
    with pytest.raises(ValueError, match="w_scale"):
        hpc.group_gemm_blockwise_fp8(x, w, seq, cu, torch.ones(1, 32), torch.ones(2, 2, 1))
    with pytest.raises(ValueError, match="output"):
        hpc.group_gemm_pertensor_fp8(x, w, seq, cu, torch.ones(2), output=torch.empty(4, 128))


def _gapped(seqlens, slot, dev):
    """hpc-ops' gapped layout (DeepEP's): group g owns rows g * slot .. g * slot + seqlens[g]."""
    seq = torch.tensor(seqlens, dtype=torch.int32, device=dev)
    cu = (torch.arange(len(seqlens) + 1, dtype=torch.int32, device=dev) * slot).to(torch.int32)
    return seq, cu


@pytest.mark.parametrize("backend", BACKENDS)
def test_gapped_layout_pertensor_and_output(backend):
    """Rows between groups are neither computed nor written: output= keeps them."""
    dev = _dev(backend)
    g = torch.Generator().manual_seed(3)
    seqlens, slot, N, K = [5, 0, 32, 17], 32, 256, 256
    G, M = len(seqlens), len(seqlens) * 32
    seq, cu = _gapped(seqlens, slot, dev)
    x = (torch.randn(M, K, generator=g) / 4).to(FP8).to(dev)
    w = (torch.randn(G, N, K, generator=g) / 4).to(FP8).to(dev)
    ys = (torch.rand(G, generator=g) + 0.5).to(dev)
    out = torch.full((M, N), 7.0, dtype=torch.bfloat16, device=dev)
    y = hpc.group_gemm_pertensor_fp8(x, w, seq, cu, ys, num_seq_per_group_avg=13, output=out, backend=backend)
    assert y is out
    fresh = hpc.group_gemm_pertensor_fp8(x, w, seq, cu, ys, num_seq_per_group_avg=13, backend=backend)
    for i, s in enumerate(seqlens):
        a = i * slot
        want = (x[a:a + s].double() @ w[i].double().t()) * float(ys[i])
        torch.testing.assert_close(y[a:a + s].double().cpu(), want.cpu(), rtol=1e-2, atol=1e-2)
        assert (y[a + s:a + slot] == 7.0).all() and (fresh[a + s:a + slot] == 0).all()
        assert torch.equal(fresh[a:a + s], y[a:a + s])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("avg", [6, 30, 80, 100, 200])
def test_gapped_layout_blockwise_with_reformat(backend, avg):
    """DeepEP-style input: a row-major [M, K / 128] x_scale reformatted by reformat_x_scale, then
    the blockwise GEMM, against a per-row loop (tile M of the GEMM = tile M of the reformat up to
    an average of 64 rows; above it the caller pads by the GEMM's tile, as hpc-ops')."""
    dev = _dev(backend)
    g = torch.Generator().manual_seed(avg)
    seqlens, slot, N, K = [3, 0, 20, 9], 64, 256, 256
    G, M, kb, nb = len(seqlens), len(seqlens) * 64, 2, 2
    seq, cu = _gapped(seqlens, slot, dev)
    x = (torch.randn(M, K, generator=g) / 4).to(FP8).to(dev)
    w = (torch.randn(G, N, K, generator=g) / 4).to(FP8).to(dev)
    rows_scale = (torch.rand(M, kb, generator=g) + 0.5).to(dev)
    ws = (torch.rand(G, nb, 4, generator=g) + 0.5).to(dev)
    tile = hpc.gemm_tile_m(avg)
    if tile == hpc.reformat_tile_m(avg):
        xs = hpc.reformat_x_scale(rows_scale, seq, cu, avg)
        assert tuple(xs.shape) == (kb, M)
    else:
        xs, start = torch.zeros(kb, M, device=dev), 0
        for i, s in enumerate(seqlens):
            xs[:, start:start + s] = rows_scale[i * slot:i * slot + s].t()
            start += -(-s // tile) * tile
    y = hpc.group_gemm_blockwise_fp8(x, w, seq, cu, xs, ws, num_seq_per_group_avg=avg, backend=backend)
    for i, s in enumerate(seqlens):
        for r in range(i * slot, i * slot + s):
            xr = x[r].double().view(kb, 128) * rows_scale[r].double()[:, None]
            wr = w[i].double().view(nb, 128, kb, 128) * ws[i, :, :kb].double()[:, None, :, None]
            want = torch.einsum("kc,nikc->ni", xr, wr).reshape(N)
            torch.testing.assert_close(y[r].double().cpu(), want.cpu(), rtol=1e-2, atol=2e-2)
        assert (y[i * slot + s:(i + 1) * slot] == 0).all()


@pytest.mark.parametrize("avg", [8, 16, 30, 48, 70])
def test_reformat_x_scale(avg):
    g = torch.Generator().manual_seed(5)
    seqlens, slot, kb = [7, 0, 64, 33], 64, 3
    seq, cu = _gapped(seqlens, slot, "cpu")
    xs = torch.rand(len(seqlens) * slot, kb, generator=g)
    out = torch.full((kb, xs.shape[0]), -1.0)
    got = hpc.reformat_x_scale(xs, seq, cu, avg, output=out)
    assert got is out
    tile, start = hpc.reformat_tile_m(avg), 0
    want = torch.full_like(out, -1.0)
    for i, s in enumerate(seqlens):
        want[:, start:start + s] = xs[i * slot:i * slot + s].t()
        start += -(-s // tile) * tile
    assert torch.equal(got, want)
    assert torch.equal(hpc.reformat_x_scale(xs, seq, cu, avg), torch.where(want == -1.0, 0.0, want))


def test_tile_tables():
    assert [hpc.gemm_tile_m(a) for a in (1, 8, 9, 16, 32, 40, 64, 90, 128, 144, 145)] == \
        [8, 8, 16, 16, 32, 48, 64, 48, 32, 48, 64]
    assert [hpc.reformat_tile_m(a) for a in (8, 9, 33, 49, 500)] == [8, 16, 48, 64, 64]


def test_reformat_bad_arguments():
    seq, cu = _groups([2, 2], "cpu")
    with pytest.raises(ValueError, match="x_scale"):
        hpc.reformat_x_scale(torch.ones(4, 2, dtype=torch.float64), seq, cu, 2)
    with pytest.raises(ValueError, match="cu_seqlens"):
        hpc.reformat_x_scale(torch.ones(4, 2), seq, cu[:2], 2)
    with pytest.raises(ValueError, match="output"):
        hpc.reformat_x_scale(torch.ones(4, 2), seq, cu, 2, output=torch.empty(4, 2))
    x = torch.zeros(4, 128, dtype=FP8)
    with pytest.raises(ValueError, match="y_scale"):
        hpc.group_gemm_pertensor_fp8(x, torch.zeros(2, 128, 128, dtype=FP8), seq, cu, torch.ones(3))

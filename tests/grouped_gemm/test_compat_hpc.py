"""dualops.compat.hpc: hpc-ops' grouped GEMM signatures against per-group loops written from
hpc-ops' documented semantics (runs on the reference backend here, on CUDA when present)."""
import pytest
import torch

from dualops.compat import hpc

FP8 = torch.float8_e4m3fn
import dualops

_AVAILABLE = dualops.backends()
BACKENDS = ["reference"] + [b for b in ("ascend_sim", "cuda") if _AVAILABLE.get(b, {}).get("available")]


def _dev(backend):
    return "cuda" if backend == "cuda" else "cpu"


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
    assert hpc.group_gemm_pertensor_fp8(x, w, seq, cu, ys, output=out, backend=backend) is out


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

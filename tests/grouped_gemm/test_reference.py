"""dualops.reference.grouped_gemm against explicit fp64 loops per group (and per 128x128
block for the blockwise recipe)."""

import pytest
import torch

from dualops.parity.builders import poison_at
from dualops.reference import grouped_gemm as ref_gg

FP8 = torch.float8_e4m3fn


def naive_group(xg, wg, mode, xs=None, ws=None, x_tensor_scale=None):
    """One group, fp64: xg [m, K], wg [N, K]."""
    x, w = xg.double(), wg.double()
    if mode == "none":
        return x @ w.t()
    if mode == "per_tensor":
        y = (x @ w.t()) * float(ws)
        return y * float(x_tensor_scale) if x_tensor_scale is not None else y
    if mode == "rowwise":
        return (x @ w.t()) * xs.double()[:, None] * ws.double()[None, :]
    m, K = x.shape
    N = w.shape[0]
    y = torch.zeros(m, N, dtype=torch.float64)
    for kb in range(0, (K + 127) // 128):
        ks = slice(kb * 128, (kb + 1) * 128)
        for nb in range(0, (N + 127) // 128):
            ns = slice(nb * 128, (nb + 1) * 128)
            y[:, ns] += (x[:, ks] @ w[ns, ks].t()) * xs.double()[:, kb, None] * float(ws[nb, kb])
    return y


def make(dtype, *shape):
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, dtype=torch.int8)
    return torch.randn(*shape).to(dtype)


SCALES = [("none", torch.bfloat16), ("none", torch.float16), ("per_tensor", FP8),
          ("rowwise", FP8), ("rowwise", torch.int8), ("blockwise", FP8)]


def scales_for(mode, lead, G, N, K):
    kb, nb = (K + 127) // 128, (N + 127) // 128
    if mode == "none":
        return None, None
    if mode == "per_tensor":
        return torch.tensor([0.75]), torch.rand(G) + 0.5
    if mode == "rowwise":
        return torch.rand(*lead) + 0.5, torch.rand(G, N) + 0.5
    return torch.rand(*lead, kb) + 0.5, torch.rand(G, nb, kb) + 0.5


@pytest.mark.parametrize("mode,dtype", SCALES)
def test_contiguous_layout(mode, dtype):
    torch.manual_seed(SCALES.index((mode, dtype)))
    G, N, K = 5, 136, 200  # N and K not multiples of 128: partial scale blocks
    sizes = [3, 0, 7, 1, 0]  # empty groups included
    offsets = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist(), dtype=torch.int32)
    M = int(offsets[-1]) + 2  # two trailing rows belong to no group
    x = poison_at(make(dtype, M, K), slice(M - 2, M))
    w = make(dtype, G, N, K)
    xs, ws = scales_for(mode, (M,), G, N, K)
    y = ref_gg(x, w, group_offsets=offsets, scale_mode=mode, x_scale=xs, w_scale=ws)
    assert y.shape == (M, N) and y.dtype == torch.float32
    want = torch.zeros(M, N, dtype=torch.float64)
    for g in range(G):
        a, b = int(offsets[g]), int(offsets[g + 1])
        if b == a:
            continue
        xg_s = xs[a:b] if mode in ("rowwise", "blockwise") else None
        want[a:b] = naive_group(x[a:b], w[g], mode, xg_s, ws[g] if ws is not None else None,
                                xs if mode == "per_tensor" else None)
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-4)
    assert (y[M - 2:] == 0).all()


@pytest.mark.parametrize("mode,dtype", SCALES)
def test_masked_layout(mode, dtype):
    torch.manual_seed(100 + SCALES.index((mode, dtype)))
    G, M_max, N, K = 4, 6, 130, 256
    masked_m = torch.tensor([6, 0, 2, 5], dtype=torch.int32)
    x = make(dtype, G, M_max, K)
    for g in range(G):
        x[g] = poison_at(x[g], slice(int(masked_m[g]), M_max))
    w = make(dtype, G, N, K)
    xs, ws = scales_for(mode, (G, M_max), G, N, K)
    y = ref_gg(x, w, masked_m=masked_m, scale_mode=mode, x_scale=xs, w_scale=ws)
    assert y.shape == (G, M_max, N)
    want = torch.zeros(G, M_max, N, dtype=torch.float64)
    for g in range(G):
        m = int(masked_m[g])
        if m:
            want[g, :m] = naive_group(x[g, :m], w[g], mode, xs[g, :m] if mode in ("rowwise", "blockwise") else None,
                                      ws[g] if ws is not None else None, xs if mode == "per_tensor" else None)
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-4)
    assert torch.isfinite(y).all()


def test_int8_is_exact():
    torch.manual_seed(3)
    G, N, K = 2, 16, 4096  # |dot| can exceed 2**24: fp32 accumulation would round
    x = torch.full((4, K), 127, dtype=torch.int8)
    w = torch.full((G, N, K), 127, dtype=torch.int8)
    w[1] = -128
    offsets = torch.tensor([0, 2, 4], dtype=torch.int32)
    ones_x, ones_w = torch.ones(4), torch.ones(G, N)
    y = ref_gg(x, w, group_offsets=offsets, scale_mode="rowwise", x_scale=ones_x, w_scale=ones_w,
               compute_dtype=torch.float64)
    assert (y[:2] == 127 * 127 * K).all() and (y[2:] == -128 * 127 * K).all()
    xi = make(torch.int8, 4, 300)
    wi = make(torch.int8, G, N, 300)
    y = ref_gg(xi, wi, group_offsets=offsets, scale_mode="rowwise", x_scale=ones_x, w_scale=ones_w)
    exact = torch.cat([xi[:2].long() @ wi[0].long().t(), xi[2:].long() @ wi[1].long().t()])
    assert torch.equal(y, exact.float())


def test_per_tensor_without_x_scale_and_fp64():
    torch.manual_seed(4)
    x, w = make(FP8, 5, 64), make(FP8, 2, 32, 64)
    offsets = torch.tensor([0, 4, 5], dtype=torch.int32)
    ws = torch.tensor([0.5, 3.0])
    y = ref_gg(x, w, group_offsets=offsets, scale_mode="per_tensor", w_scale=ws, compute_dtype=torch.float64)
    assert y.dtype == torch.float64
    want = torch.cat([naive_group(x[:4], w[0], "per_tensor", ws=ws[0]), naive_group(x[4:], w[1], "per_tensor", ws=ws[1])])
    torch.testing.assert_close(y, want, rtol=1e-13, atol=1e-12)


def test_errors():
    x, w = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(2, 3, 8, dtype=torch.bfloat16)
    offs = torch.tensor([0, 2, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="exactly one of"):
        ref_gg(x, w)
    with pytest.raises(ValueError, match="group_offsets must start at 0"):
        ref_gg(x, w, group_offsets=torch.tensor([0, 3, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match="group_offsets must have shape"):
        ref_gg(x, w, group_offsets=torch.tensor([0, 4], dtype=torch.int32))
    with pytest.raises(ValueError, match="masked_m entries"):
        ref_gg(x.view(2, 2, 8), w, masked_m=torch.tensor([1, 3], dtype=torch.int32))
    with pytest.raises(TypeError, match="scale_mode 'rowwise'"):
        ref_gg(x, w, group_offsets=offs, scale_mode="rowwise", x_scale=torch.ones(4), w_scale=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"w_scale must have shape \[2, 1, 1\]"):
        ref_gg(x.to(FP8), w.to(FP8), group_offsets=offs, scale_mode="blockwise", x_scale=torch.ones(4, 1),
               w_scale=torch.ones(2, 3, 1))
    with pytest.raises(ValueError, match="scale_mode must be one of"):
        ref_gg(x, w, group_offsets=offs, scale_mode="per_channel")
    with pytest.raises(ValueError, match="last dim must be K=8"):
        ref_gg(x[:, :4], w, group_offsets=offs)

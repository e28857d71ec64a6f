"""dualops.compat.torch_npu: npu_fused_infer_attention_score against the native
dualops.incre_flash_attention and npu_grouped_matmul against dualops.grouped_gemm and per-group
loops, on every backend here; the peers' arguments outside the supported subset raise errors
naming them."""
from __future__ import annotations

import pytest
import torch

import dualops
from dualops.compat import torch_npu

bf16 = torch.bfloat16
from backend_params import BACKENDS, device_of as _dev  # noqa: E402


def _same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    assert torch.equal(a, b)


# ----------------------------------------------------------------------------- fused infer attention


def _attn_inputs(g, dev, B=2, N=8, N_kv=2, D=64, S=48, paged=False, int8=False):
    q = torch.randn(B, 1, N, D, generator=g).to(bf16)
    if paged:
        k = torch.randn(6, 16, N_kv, D, generator=g)
        v = torch.randn(6, 16, N_kv, D, generator=g)
    else:
        k = torch.randn(B, S, N_kv, D, generator=g)
        v = torch.randn(B, S, N_kv, D, generator=g)
    if int8:
        k, v = (t.mul(40).round().clamp(-127, 127).to(torch.int8) for t in (k, v))
    else:
        k, v = k.to(bf16), v.to(bf16)
    return q.to(dev), k.to(dev), v.to(dev)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["BSH", "BNSD", "BSND"])
def test_fia_layouts_lse_mask_pse(backend, layout):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(1)
    B, N, N_kv, D, S = 2, 8, 2, 64, 48
    q, k, v = _attn_inputs(g, dev)
    lens = [48, 5]
    mask = (torch.rand(B, 1, S, generator=g) < 0.2).to(dev)
    pse = torch.randn(B, N, 1, S, generator=g).to(bf16).to(dev)
    want, want_lse = dualops.incre_flash_attention(
        q, k, v, kv_lens=torch.tensor(lens, dtype=torch.int32, device=dev), softmax_scale=0.125,
        atten_mask=mask[:, None], pse_shift=pse, return_lse=True, backend=backend)
    conv = {"BSH": lambda t: t.reshape(t.shape[0], t.shape[1], -1), "BNSD": lambda t: t.transpose(1, 2),
            "BSND": lambda t: t}[layout]
    out, lse = torch_npu.npu_fused_infer_attention_score(
        conv(q), conv(k), conv(v), atten_mask=mask, pse_shift=pse, actual_seq_lengths_kv=lens, num_heads=N,
        num_key_value_heads=N_kv, scale=0.125, input_layout=layout, softmax_lse_flag=True, backend=backend)
    _same(out, conv(want))
    assert lse.shape == (B, N, 1, 1) and lse.dtype == torch.float32
    _same(lse[..., 0], want_lse)
    out2, lse2 = torch_npu.npu_fused_infer_attention_score(
        conv(q), [conv(k)], [conv(v)], atten_mask=mask, pse_shift=pse, actual_seq_lengths_kv=lens,
        actual_seq_lengths=[1, 1], num_heads=N, num_key_value_heads=N_kv, scale_value=0.125,
        input_layout=layout, inner_precise=1, backend=backend)
    _same(out2, out)
    assert lse2.shape == (1,) and not lse2.any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("separate", [False, True])
def test_fia_paged_int8_antiquant(backend, separate):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(2)
    B, N, N_kv, D, BS = 2, 4, 1, 64, 16
    q, k, v = _attn_inputs(g, dev, N=N, N_kv=N_kv, paged=True, int8=True)
    scale = (torch.rand(2, N_kv, 1, D, generator=g) / 50).to(dev)  # BNSD-style [2, N_kv, 1, D]
    offset = torch.randn(2, N_kv, 1, D, generator=g).to(dev)
    bt = torch.tensor([[3, 0, 5], [1, 2, 4]], dtype=torch.int32, device=dev)
    lens = torch.tensor([40, 17], dtype=torch.int32, device=dev)
    want = dualops.incre_flash_attention(q, k, v, kv_lens=lens, block_table=bt, softmax_scale=1.0,
                                         k_scale=scale[0].view(N_kv, D), v_scale=scale[1].view(N_kv, D),
                                         k_offset=offset[0].view(N_kv, D), v_offset=offset[1].view(N_kv, D),
                                         backend=backend)
    quant = (dict(key_antiquant_scale=scale[0], value_antiquant_scale=scale[1], key_antiquant_offset=offset[0],
                  value_antiquant_offset=offset[1]) if separate
             else dict(antiquant_scale=scale, antiquant_offset=offset))
    out, _ = torch_npu.npu_fused_infer_attention_score(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), actual_seq_lengths_kv=lens, block_table=bt,
        block_size=BS, num_heads=N, num_key_value_heads=N_kv, input_layout="BNSD", **quant, backend=backend)
    _same(out, want.transpose(1, 2))


def test_fia_unsupported_arguments(gen):
    q, k, v = _attn_inputs(gen, "cpu")
    base = dict(num_heads=8, num_key_value_heads=2, input_layout="BSND")
    for name, value in (("sparse_mode", 2), ("quant_scale2", torch.ones(1)), ("antiquant_mode", 1),
                        ("pre_tokens", 10), ("key_shared_prefix", torch.ones(1)), ("query_rope", torch.ones(1))):
        with pytest.raises(NotImplementedError, match=name):
            torch_npu.npu_fused_infer_attention_score(q, k, v, **base, **{name: value})
    with pytest.raises(NotImplementedError, match="actual_seq_lengths"):
        torch_npu.npu_fused_infer_attention_score(q, k, v, actual_seq_lengths=[2, 1], **base)
    with pytest.raises(TypeError, match="no_such_arg"):
        torch_npu.npu_fused_infer_attention_score(q, k, v, no_such_arg=1, **base)
    with pytest.raises(ValueError, match="input_layout"):
        torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, input_layout="TND")
    with pytest.raises(ValueError, match="scale_value"):
        torch_npu.npu_fused_infer_attention_score(q, k, v, scale=0.1, scale_value=0.2, **base)


# ----------------------------------------------------------------------------- grouped matmul


def _gmm_inputs(g, dev, counts, K=64, N=48, dtype=bf16):
    M, G = sum(counts), len(counts)
    if dtype == torch.int8:
        x = torch.randint(-100, 100, (M, K), generator=g).to(torch.int8)
        w = torch.randint(-100, 100, (G, K, N), generator=g).to(torch.int8)
    else:
        x = torch.randn(M, K, generator=g).to(dtype)
        w = torch.randn(G, K, N, generator=g).to(dtype)
    return x.to(dev), w.to(dev)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("group_list_type", [0, 1])
def test_gmm_float_single_x(backend, group_list_type):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(3)
    counts = [5, 0, 17, 9]
    x, w = _gmm_inputs(g, dev, counts)
    offs = torch.tensor([0, 5, 5, 22, 31], dtype=torch.int32, device=dev)
    want = dualops.grouped_gemm(x, w.transpose(1, 2).contiguous(), group_offsets=offs, backend=backend)
    gl = torch.tensor(counts if group_list_type else [5, 5, 22, 31], dtype=torch.int64, device=dev)
    (y,) = torch_npu.npu_grouped_matmul([x], [w], group_list=gl, split_item=3, group_type=0,
                                        group_list_type=group_list_type, backend=backend)
    _same(y, want)
    ys = torch_npu.npu_grouped_matmul([x], list(w.unbind(0)), group_list=gl, split_item=1, group_type=0,
                                      group_list_type=group_list_type, backend=backend)
    assert [t.shape[0] for t in ys] == counts
    _same(torch.cat(ys), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gmm_float_multi_x_and_bias(backend):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(4)
    x, w = _gmm_inputs(g, dev, [6, 10], dtype=torch.float16)
    xs = [x[:6].reshape(2, 3, 64), x[6:]]
    bias = [torch.randn(48, generator=g).to(torch.float16).to(dev) for _ in range(2)]
    ys = torch_npu.npu_grouped_matmul(xs, list(w.unbind(0)), bias=bias, split_item=0, backend=backend)
    assert ys[0].shape == (2, 3, 48) and ys[1].shape == (10, 48) and ys[0].dtype == torch.float16
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        want = xi.reshape(-1, 64).double() @ w[i].double() + bias[i].double()
        torch.testing.assert_close(yi.reshape(-1, 48).double().cpu(), want.cpu(), rtol=2e-3, atol=3e-2)
    (y,) = torch_npu.npu_grouped_matmul(xs, list(w.unbind(0)), bias=bias, split_item=2, backend=backend)
    _same(y, torch.cat([t.reshape(-1, 48) for t in ys]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("int64_scale", [False, True])
def test_gmm_int8_w8a8(backend, int64_scale):
    dev = _dev(backend)
    g = torch.Generator().manual_seed(5)
    counts = [7, 3, 0, 12]
    G, M, N = len(counts), sum(counts), 48
    x, w = _gmm_inputs(g, dev, counts, dtype=torch.int8)
    scale = (torch.rand(G, N, generator=g) / 100).to(dev)
    pts = (torch.rand(M, generator=g) + 0.5).to(dev)
    offs = torch.tensor([0, 7, 10, 10, 22], dtype=torch.int32, device=dev)
    want = dualops.grouped_gemm(x, w.transpose(1, 2).contiguous(), group_offsets=offs, scale_mode="rowwise",
                                x_scale=pts, w_scale=scale, out_dtype=bf16, backend=backend)
    npu_scale = scale.view(torch.int32).to(torch.int64) & 0xFFFFFFFF if int64_scale else scale
    (y,) = torch_npu.npu_grouped_matmul([x], [w], scale=[npu_scale], per_token_scale=[pts],
                                        group_list=torch.tensor(counts, device=dev), group_list_type=1,
                                        split_item=3, group_type=0, output_dtype=bf16, backend=backend)
    _same(y, want)
    bias = torch.randint(-1000, 1000, (G, N), generator=g).to(torch.int32).to(dev)
    (yb,) = torch_npu.npu_grouped_matmul([x], [w], bias=[bias], scale=[scale], per_token_scale=[pts],
                                         group_list=torch.tensor(counts, device=dev), group_list_type=1,
                                         split_item=3, group_type=0, output_dtype=bf16, backend=backend)
    for i in range(G):
        a, b = int(offs[i]), int(offs[i + 1])
        acc = x[a:b].double() @ w[i].double() + bias[i].double()
        torch.testing.assert_close(yb[a:b].double().cpu(), (acc * scale[i].double() * pts[a:b, None].double()).cpu(),
                                   rtol=1e-2, atol=1e-2)


def test_gmm_unsupported_arguments(gen):
    x, w = _gmm_inputs(gen, "cpu", [4, 4])
    gl = torch.tensor([4, 8])
    for name, value in (("antiquant_scale", [torch.ones(48)]), ("offset", [torch.ones(48)]),
                        ("activation_input", [x])):
        with pytest.raises(NotImplementedError, match=name):
            torch_npu.npu_grouped_matmul([x], [w], group_list=gl, split_item=3, **{name: value})
    with pytest.raises(NotImplementedError, match="act_type"):
        torch_npu.npu_grouped_matmul([x], [w], group_list=gl, act_type=1)
    with pytest.raises(NotImplementedError, match="group_type"):
        torch_npu.npu_grouped_matmul([x], [w], group_list=gl, group_type=2)
    with pytest.raises(NotImplementedError, match="group_list_type"):
        torch_npu.npu_grouped_matmul([x], [w], group_list=gl, group_list_type=2)
    xi, wi = _gmm_inputs(gen, "cpu", [4, 4], dtype=torch.int8)
    with pytest.raises(NotImplementedError, match="output_dtype"):
        torch_npu.npu_grouped_matmul([xi], [wi], group_list=gl, scale=[torch.ones(2, 48)], output_dtype=torch.int8)
    with pytest.raises(ValueError, match="scale"):
        torch_npu.npu_grouped_matmul([xi], [wi], group_list=gl)
    with pytest.raises(ValueError, match="split_item"):
        torch_npu.npu_grouped_matmul([x], [w], group_list=gl, split_item=5)

"""Every class of bad input gets a clear error naming the argument."""
import pytest
import torch

import dualops

bf16 = torch.bfloat16


def ifa_inputs(B=2, S_q=1, H_q=8, H_kv=2, D=64, S=32, paged=False, BS=16):
    q = torch.randn(B, S_q, H_q, D, dtype=bf16)
    if paged:
        nb = B * (S // BS) + 1
        k = torch.randn(nb, BS, H_kv, D, dtype=bf16)
        bt = torch.randperm(nb)[: B * (S // BS)].reshape(B, S // BS).to(torch.int32)
        return q, k, torch.randn_like(k), dict(block_table=bt, kv_lens=torch.full((B,), S, dtype=torch.int32))
    k = torch.randn(B, S, H_kv, D, dtype=bf16)
    return q, k, torch.randn_like(k), {}


def call_ifa(**over):
    q, k, v, kw = ifa_inputs(paged=over.pop("paged", False))
    args = dict(q=q, k_cache=k, v_cache=v, **kw)
    args.update(over)
    return dualops.incre_flash_attention(args.pop("q"), args.pop("k_cache"), args.pop("v_cache"), **args)


def test_ifa_good_call_runs():
    out = call_ifa()
    assert out.shape == (2, 1, 8, 64) and out.dtype == bf16
    out, lse = call_ifa(paged=True, return_lse=True)
    assert lse.shape == (2, 8, 1) and lse.dtype == torch.float32


@pytest.mark.parametrize("over, exc, words", [
    (dict(q=torch.randn(2, 1, 8, 64)), TypeError, ["q", "float32", "bfloat16"]),
    (dict(q=torch.randn(2, 1, 8, 64, dtype=bf16)[..., :32]), ValueError, ["q.shape[3]", "32", "64"]),
    (dict(q=torch.randn(2, 8, 64, dtype=bf16)), ValueError, ["q", "4 dims"]),
    (dict(q=[1, 2]), TypeError, ["q", "tensor", "list"]),
    (dict(q=torch.randn(2, 1, 7, 64, dtype=bf16)), ValueError, ["7 heads", "2 KV heads"]),
    (dict(v_cache=torch.randn(2, 32, 2, 64, dtype=torch.float16)), TypeError, ["v_cache", "k_cache"]),
    (dict(kv_lens=torch.tensor([1, 2])), TypeError, ["kv_lens", "int64", "int32"]),
    (dict(kv_lens=torch.tensor([1, 2, 3], dtype=torch.int32)), ValueError, ["kv_lens.shape[0]", "B"]),
    (dict(softmax_scale=0.0), ValueError, ["softmax_scale"]),
    (dict(softmax_scale=float("nan")), ValueError, ["softmax_scale"]),
    (dict(causal="yes"), TypeError, ["causal", "bool"]),
    (dict(atten_mask=torch.zeros(1, 1, 1, 33, dtype=torch.bool)), ValueError, ["atten_mask", "broadcast"]),
    (dict(atten_mask=torch.zeros(1, 1, 1, 32)), TypeError, ["atten_mask", "bool"]),
    (dict(pse_shift=torch.zeros(2, 3, 1, 32)), ValueError, ["pse_shift", "broadcast"]),
    (dict(k_scale=torch.ones(2, 64)), ValueError, ["k_scale", "must not be given"]),
    (dict(k_cache=torch.zeros(2, 32, 2, 64, dtype=torch.int8), v_cache=torch.zeros(2, 32, 2, 64, dtype=torch.int8)),
     ValueError, ["k_scale", "required"]),
    (dict(k_cache=torch.zeros(2, 32, 2, 64, dtype=torch.int8), v_cache=torch.zeros(2, 32, 2, 64, dtype=torch.int8),
          k_scale=torch.ones(2, 64), v_scale=torch.ones(3, 64)), ValueError, ["v_scale.shape[0]", "H_kv"]),
    (dict(block_table=torch.zeros(2, 2, dtype=torch.int32)), ValueError, ["kv_lens", "required"]),
    (dict(backend="tpu"), ValueError, ["backend", "tpu"]),
    (dict(backend="cuda"), ValueError, ["cuda", "cpu"]),
    (dict(validate="sometimes"), ValueError, ["validate"]),
    (dict(bogus=1), TypeError, ["bogus"]),
])
def test_ifa_bad_inputs(over, exc, words):
    with pytest.raises(exc) as e:
        call_ifa(**over)
    msg = str(e.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_ifa_non_contiguous_last_dim_rejected():
    q = torch.randn(2, 1, 8, 128, dtype=bf16)[..., ::2]
    with pytest.raises(ValueError, match="q must have a contiguous last dim"):
        call_ifa(q=q)


def test_ifa_non_contiguous_q_accepted():
    q = torch.randn(2, 8, 1, 128, dtype=bf16)[..., :64].transpose(1, 2)  # [B, S_q, H, D], strided
    assert not q.is_contiguous()
    assert call_ifa(q=q).shape == (2, 1, 8, 64)


def test_ifa_full_validation_catches_values():
    q, k, v, kw = ifa_inputs(paged=True)
    bt = kw["block_table"].clone()
    bt[1, 1] = 10_000
    with pytest.raises(ValueError, match=r"block_table\[1, 1\] = 10000"):
        dualops.incre_flash_attention(q, k, v, block_table=bt, kv_lens=kw["kv_lens"], validate="full")
    # padding past what a request needs is not checked
    lens = torch.tensor([32, 16], dtype=torch.int32)
    dualops.incre_flash_attention(q, k, v, block_table=bt, kv_lens=lens, validate="full")
    with pytest.raises(ValueError, match=r"kv_lens\[0\] = 99"):
        dualops.incre_flash_attention(q, k, v, block_table=kw["block_table"],
                                      kv_lens=torch.tensor([99, 1], dtype=torch.int32), validate="full")


def mla_inputs(B=2, H=16, dqk=576, nb=8, pbs=16, fmt="bf16"):
    q = torch.randn(B, 1, H, dqk, dtype=bf16)
    kv = torch.randn(nb, pbs, 1, dqk, dtype=bf16)
    if fmt != "bf16":
        kv = dualops.quant.pack_mla_kv(kv, kv_format=fmt)
    bt = torch.arange(nb, dtype=torch.int32).reshape(B, nb // B)
    lens = torch.tensor([pbs * nb // B, 5], dtype=torch.int32)[:B]
    return q, kv, bt, lens


@pytest.mark.parametrize("over, exc, words", [
    (dict(kv_format="fp9"), ValueError, ["kv_format", "fp9"]),
    (dict(kv_format="fp8_v32"), TypeError, ["kv_cache", "uint8", "fp8_v32"]),
    (dict(kv_format="int8_v32"), TypeError, ["kv_cache", "uint8", "int8_v32"]),
    (dict(head_dim_v=256), ValueError, ["head_dim_v"]),
    (dict(causal=True, indices=torch.zeros(2, 1, 4, dtype=torch.int32)), ValueError, ["causal", "sparse"]),
    (dict(topk_length=torch.zeros(2, dtype=torch.int32)), ValueError, ["topk_length", "dense"]),
    (dict(attn_sink=torch.zeros(15)), ValueError, ["attn_sink.shape[0]", "H_q"]),
    (dict(cache_seqlens=torch.tensor([1, 2])), TypeError, ["cache_seqlens", "int32"]),
])
def test_mla_bad_inputs(over, exc, words):
    q, kv, bt, lens = mla_inputs()
    args = dict(q=q, kv_cache=kv, block_table=bt, cache_seqlens=lens)
    args.update(over)
    with pytest.raises(exc) as e:
        dualops.mla_decode(args.pop("q"), args.pop("kv_cache"), args.pop("block_table"), args.pop("cache_seqlens"), **args)
    for w in words:
        assert w in str(e.value), f"{w!r} not in {str(e.value)!r}"


def test_mla_wrong_d_qk_for_format():
    q, kv, bt, lens = mla_inputs(dqk=576, fmt="fp8_v32")
    q512 = torch.randn(2, 1, 16, 512, dtype=bf16)
    with pytest.raises(ValueError, match="fp8_v32 needs d_qk 576"):
        dualops.mla_decode(q512, kv, bt, lens, kv_format="fp8_v32")
    q, kv, bt, lens = mla_inputs(dqk=576, fmt="int8_v32")
    with pytest.raises(ValueError, match="int8_v32 needs d_qk 576 and 656 bytes per token, got d_qk 512"):
        dualops.mla_decode(q512, kv, bt, lens, kv_format="int8_v32")
    with pytest.raises(ValueError, match="int8_v32 needs d_qk 576 and 656 bytes per token, got d_qk 576, 584 bytes"):
        dualops.mla_decode(q, kv[..., :584].contiguous(), bt, lens, kv_format="int8_v32")
    with pytest.raises(TypeError, match=r"kv_cache dtype must be one of \[.uint8.\] \(format=int8_v32.*got int8"):
        dualops.mla_decode(q, kv.view(torch.int8), bt, lens, kv_format="int8_v32")


def gg_inputs(G=3, M=10, N=32, K=64):
    x = torch.randn(M, K, dtype=bf16)
    w = torch.randn(G, N, K, dtype=bf16)
    offs = torch.tensor([0, 4, 4, 10], dtype=torch.int32)
    return x, w, offs


@pytest.mark.parametrize("over, exc, words", [
    (dict(group_offsets=None), ValueError, ["group_offsets", "required"]),
    (dict(group_offsets=torch.tensor([0, 4, 10], dtype=torch.int32)), ValueError, ["group_offsets.shape[0]", "G + 1"]),
    (dict(w=torch.randn(3, 32, 63, dtype=bf16)), ValueError, ["w.shape[2]", "K"]),
    (dict(scale_mode="rowwise", x_scale=torch.ones(10), w_scale=torch.ones(3, 32)), TypeError, ["x dtype", "float8_e4m3fn"]),
    (dict(scale_mode="bogus"), ValueError, ["scale_mode", "bogus"]),
    (dict(w_scale=torch.ones(3)), ValueError, ["w_scale", "must not be given"]),
    (dict(out_dtype=torch.int8), ValueError, ["out_dtype", "int8"]),
    (dict(masked_m=torch.zeros(3, dtype=torch.int32)), ValueError, ["group_offsets", "must not be given"]),
])
def test_grouped_gemm_bad_inputs(over, exc, words):
    x, w, offs = gg_inputs()
    args = dict(x=x, w=w, group_offsets=offs)
    args.update(over)
    with pytest.raises(exc) as e:
        dualops.grouped_gemm(args.pop("x"), args.pop("w"), **args)
    for ww in words:
        assert ww in str(e.value), f"{ww!r} not in {str(e.value)!r}"


def test_grouped_gemm_fp8_blockwise_scale_shapes():
    x, w, offs = gg_inputs(K=200, N=130)
    xf, wf = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    good = dict(x_scale=torch.ones(10, 2), w_scale=torch.ones(3, 2, 2))
    y = dualops.grouped_gemm(xf, wf, group_offsets=offs, scale_mode="blockwise", **good)
    assert y.shape == (10, 130)
    with pytest.raises(ValueError, match=r"x_scale.shape\[1\] must be KB = 2"):
        dualops.grouped_gemm(xf, wf, group_offsets=offs, scale_mode="blockwise",
                             x_scale=torch.ones(10, 3), w_scale=good["w_scale"])


def test_grouped_gemm_full_validation():
    x, w, _ = gg_inputs()
    with pytest.raises(ValueError, match="non-decreasing"):
        dualops.grouped_gemm(x, w, group_offsets=torch.tensor([0, 5, 4, 10], dtype=torch.int32), validate="full")
    with pytest.raises(ValueError, match="exceeds x rows"):
        dualops.grouped_gemm(x, w, group_offsets=torch.tensor([0, 5, 6, 11], dtype=torch.int32), validate="full")
    xm = torch.randn(3, 4, 64, dtype=bf16)
    with pytest.raises(ValueError, match=r"masked_m\[2\] = 5"):
        dualops.grouped_gemm(xm, w, masked_m=torch.tensor([0, 4, 5], dtype=torch.int32), validate="full")


def test_validation_cache_keeps_every_check():
    """Structural results are cached by call signature; value checks (validate="full") and any
    change of shape, dtype, layout or scalar still get their errors."""
    q, k, v, kw = ifa_inputs(paged=True)
    dualops.incre_flash_attention(q, k, v, **kw, validate="full")
    bt = kw["block_table"].clone()
    bt[0, 0] = -5  # same signature, bad value
    with pytest.raises(ValueError, match=r"block_table\[0, 0\] = -5"):
        dualops.incre_flash_attention(q, k, v, block_table=bt, kv_lens=kw["kv_lens"], validate="full")
    with pytest.raises(ValueError, match="softmax_scale"):
        dualops.incre_flash_attention(q, k, v, **kw, softmax_scale=-1.0)
    with pytest.raises(TypeError, match="q dtype"):
        dualops.incre_flash_attention(q.half().float(), k, v, **kw)
    from dualops import schema
    a = schema.validate("incre_flash_attention", dict(q=q, k_cache=k, v_cache=v, **kw))
    b = schema.validate("incre_flash_attention", dict(q=q.clone(), k_cache=k, v_cache=v, **kw))
    assert a.dims == b.dims and b.args["q"] is not a.args["q"] and b.args["softmax_scale"] == 64 ** -0.5

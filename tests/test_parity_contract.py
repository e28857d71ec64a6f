"""The parity contract of docs/parity.md on CPU simulations of kernels that round their
matrix-unit operands once (tests/helpers/rounding_sims.py): such kernels pass on short and long
requests (where the old per-element check failed them), torch's own 16-bit attention passes, and
planted faults still fail (a dropped key, a read of a poisoned slot, a wrong softmax or dequant
scale, one element off by a few bounds). MLA decode, IFA and grouped GEMM alike."""
from __future__ import annotations

import pytest
import torch

from dualops import quant, reference
from dualops.parity import cases as parity_cases
from dualops.testing import LSE_TOLERANCE, ROUNDING_FACTOR, compare, tolerance_for
from rounding_sims import once_rounded_attention, once_rounded_gemm, torch16_attention

BF16, FP16 = torch.bfloat16, torch.float16


def _verdict(got: dict, want: dict, budget, dtype, *, use_budget=True):
    """{"out": Comparison, "lse": Comparison} of the contract (or of the old check, without budget)."""
    atol, rtol, cos = tolerance_for(dtype)
    la, lr, lc = LSE_TOLERANCE
    return {"out": compare(got["out"], want["out"], atol=atol, rtol=rtol, cos_eps=cos,
                           budget=budget.out if use_budget else None),
            "lse": compare(got["lse"], want["lse"], atol=la, rtol=lr, cos_eps=lc,
                           budget=budget.lse if use_budget else None)}


# ----------------------------------------------------------------------------- MLA decode


def _mla_case(lens, *, h_q=8, dtype="bf16", kv_format="bf16", seed=0, odd_scales=False):
    inp = parity_cases._mla("contract", B=len(lens), lens=tuple(lens), h_q=h_q, dtype=dtype, kv_format=kv_format,
                            d_qk=512 if kv_format == "fp8_model1" else 576).build(torch.Generator().manual_seed(seed))
    if odd_scales:  # fp8_v32 with scales that are not powers of two: dequantized values need > 8 bits
        kv = inp["kv_cache"].clone()
        scales = kv[..., 512:528].contiguous().view(torch.float32) * 1.3
        kv[..., 512:528] = scales.view(torch.uint8)
        inp["kv_cache"] = kv
    return inp


def _mla_sim(inp, *, impl=once_rounded_attention, fault=None):
    """The once-rounding kernel on an MLA call (dense, s_q = 1), with an optional planted fault."""
    q, kv, fmt = inp["q"], inp["kv_cache"], inp["kv_format"]
    B, _, H, D = q.shape
    pbs = kv.shape[1]
    scale = D ** -0.5 * (1.01 if fault == "softmax_scale" else 1.0)
    out = torch.zeros(B, 1, H, 512, dtype=q.dtype)
    lse = torch.full((B, H, 1), float("inf"))
    for b, L in enumerate(inp["cache_seqlens"].tolist()):
        n = L + 1 if fault == "poisoned_slot" and L % pbs else L   # one slot past the length
        if n == 0:
            continue
        pos = torch.arange(n)
        keys = quant.gather_mla_kv(kv, fmt, inp["block_table"][b, pos // pbs].long() * pbs + pos % pbs)
        if fault == "dropped_key" and L >= 2:
            keys = keys[1:]
        if fault == "dequant_scale" and L >= 2:
            keys = keys.clone()
            keys[0, :128] *= 2            # one 128-value scale tile of one token read with 2x its scale
        o, l = impl(q[b, 0], keys, keys[:, :512], scale, q.dtype)
        out[b, 0], lse[b, :, 0] = o, l
    return {"out": out, "lse": lse}


def _mla_ref(inp):
    out, lse, budget = reference.mla_decode(**inp, return_budget=True)
    return {"out": out, "lse": lse}, budget


MLA_PASS = [
    # (lengths, q dtype, cache format, scales not powers of two)
    (tuple(range(1, 65, 4)) + (64,), "bf16", "bf16", False),
    ((2, 3, 4, 5, 6, 7, 8, 2, 3, 8), "bf16", "bf16", False),
    ((2, 5, 8, 3), "fp16", "bf16", False),
    (tuple(range(1, 65, 9)), "fp16", "bf16", False),
    ((2, 3, 7, 8, 40, 64), "bf16", "fp8_v32", False),
    ((2, 3, 7, 8, 40, 64), "bf16", "fp8_v32", True),
    ((1, 4, 33), "bf16", "fp8_model1", False),
    ((3000, 1), "bf16", "bf16", False),
    ((2048,), "bf16", "fp8_v32", True),
]


@pytest.mark.parametrize("lens, dtype, kv_format, odd", MLA_PASS, ids=lambda v: str(v)[:20])
def test_mla_once_rounding_kernel_passes(lens, dtype, kv_format, odd):
    inp = _mla_case(lens, dtype=dtype, kv_format=kv_format, odd_scales=odd)
    want, budget = _mla_ref(inp)
    v = _verdict(_mla_sim(inp), want, budget, inp["q"].dtype)
    assert v["out"].ok and v["lse"].ok, f"out: {v['out']}; lse: {v['lse']}"


def test_mla_short_requests_fail_the_old_check():
    """Why the rounding term exists: the once-rounding kernel fails the check without it."""
    inp = _mla_case((2, 3, 4, 5, 6, 7, 8, 2, 3, 8), h_q=16)
    want, budget = _mla_ref(inp)
    assert not _verdict(_mla_sim(inp), want, budget, BF16, use_budget=False)["out"].ok


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mla_torch16_path_passes(dtype):
    inp = _mla_case((1, 2, 3, 5, 8, 13, 21, 64, 700), dtype=dtype, seed=5)
    want, budget = _mla_ref(inp)
    v = _verdict(_mla_sim(inp, impl=torch16_attention), want, budget, inp["q"].dtype)
    assert v["out"].ok and v["lse"].ok, f"out: {v['out']}; lse: {v['lse']}"


MLA_FAULTS = [
    ("dropped_key", "bf16", "out"),
    ("dropped_key", "fp8_v32", "out"),
    ("poisoned_slot", "bf16", "out"),
    ("poisoned_slot", "fp8_v32", "out"),
    ("softmax_scale", "bf16", "lse"),
    ("dequant_scale", "fp8_v32", "out"),
]


@pytest.mark.parametrize("fault, kv_format, output", MLA_FAULTS, ids=lambda v: str(v))
def test_mla_planted_faults_fail(fault, kv_format, output):
    inp = _mla_case((2, 3, 5, 8, 13, 30), kv_format=kv_format, odd_scales=kv_format != "bf16", seed=7)
    want, budget = _mla_ref(inp)
    v = _verdict(_mla_sim(inp, fault=fault), want, budget, BF16)
    assert not v[output].ok, f"{fault} passed: {v[output]}"


def test_mla_one_element_a_few_bounds_off_fails():
    inp = _mla_case((2, 3, 5, 8, 700), seed=9)
    want, budget = _mla_ref(inp)
    got = _mla_sim(inp)
    assert _verdict(got, want, budget, BF16)["out"].ok
    atol, rtol, _ = tolerance_for(BF16)
    ref = want["out"]
    bound = atol + rtol * ref.abs() + ROUNDING_FACTOR * budget.out
    for idx in [(0, 0, 0, 0), (4, 0, 3, 100)]:   # a short and a long request
        bad = got["out"].clone()
        bad[idx] = (ref[idx] + 3 * bound[idx]).to(BF16)
        c = _verdict({"out": bad, "lse": got["lse"]}, want, budget, BF16)["out"]
        assert not c.ok and c.mismatched == 1, str(c)


def test_mla_pair_gets_the_sum_of_both_budgets():
    """Two once-rounding kernels (bf16 P with one or with the other rounding order) against each
    other: within the sum of their bounds, not necessarily within one."""
    inp = _mla_case((2, 3, 4, 6, 8), seed=11)
    _, budget = _mla_ref(inp)
    a, b = _mla_sim(inp), _mla_sim(inp, impl=torch16_attention)
    atol, rtol, cos = tolerance_for(BF16)
    assert compare(a["out"], b["out"], atol=atol, rtol=rtol, cos_eps=cos, budget=budget.out, pair=True).ok


# ----------------------------------------------------------------------------- IFA


def _ifa_case(lens, *, kv="same", dtype="bf16", h_q=8, h_kv=2, seed=0):
    return parity_cases._ifa("contract", B=len(lens), lens=tuple(lens), h_q=h_q, h_kv=h_kv, d=128, kv=kv,
                             dtype=dtype).build(torch.Generator().manual_seed(seed))


def _ifa_sim(inp, *, fault=None):
    """The once-rounding kernel on an IFA call (paged, s_q = 1, GQA)."""
    q, kc, vc, table = inp["q"], inp["k_cache"], inp["v_cache"], inp["block_table"]
    B, _, H_q, D = q.shape
    H_kv, bs = kc.shape[2], kc.shape[1]
    group = H_q // H_kv
    out = torch.zeros(B, 1, H_q, D, dtype=q.dtype)
    lse = torch.full((B, H_q, 1), float("inf"))
    for b, L in enumerate(inp["kv_lens"].tolist()):
        if L == 0:
            continue
        pos = torch.arange(L)
        blk = table[b, pos // bs].long()
        k, v = kc[blk, pos % bs], vc[blk, pos % bs]
        if "k_scale" in inp:
            k = quant.dequantize_kv(k, inp["k_scale"], inp.get("k_offset"), out_dtype=torch.float32)
            v = quant.dequantize_kv(v, inp["v_scale"], inp.get("v_offset"), out_dtype=torch.float32)
        k, v = k.float(), v.float()
        if fault == "dropped_key" and L >= 2:
            k, v = k[:-1], v[:-1]
        for h in range(H_kv):
            rows = slice(h * group, (h + 1) * group)
            o, l = once_rounded_attention(q[b, 0, rows], k[:, h], v[:, h], D ** -0.5, q.dtype)
            out[b, 0, rows], lse[b, rows, 0] = o, l
    return {"out": out, "lse": lse}


def _ifa_ref(inp):
    out, lse, budget = reference.incre_flash_attention(**inp, return_budget=True)
    return {"out": out, "lse": lse}, budget


@pytest.mark.parametrize("kv, dtype", [("same", "bf16"), ("same", "fp16"), ("int8", "bf16"), ("fp8", "fp16")])
def test_ifa_once_rounding_kernel_passes(kv, dtype):
    inp = _ifa_case((0, 1, 2, 3, 5, 8, 40, 600), kv=kv, dtype=dtype)
    want, budget = _ifa_ref(inp)
    v = _verdict(_ifa_sim(inp), want, budget, inp["q"].dtype)
    assert v["out"].ok and v["lse"].ok, f"out: {v['out']}; lse: {v['lse']}"


@pytest.mark.parametrize("kv", ["same", "int8"])
def test_ifa_dropped_key_fails(kv):
    inp = _ifa_case((2, 3, 4, 6, 8), kv=kv, seed=3)
    want, budget = _ifa_ref(inp)
    assert not _verdict(_ifa_sim(inp, fault="dropped_key"), want, budget, BF16)["out"].ok


# ----------------------------------------------------------------------------- grouped GEMM


def _gg_case(seed=0, K=256):
    g = torch.Generator().manual_seed(seed)
    sizes = [0, 1, 5, 37]
    x = torch.randn(sum(sizes), K, generator=g)
    w = torch.randn(len(sizes), 48, K, generator=g)
    offs = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist(), dtype=torch.int32)
    return x, w, offs


def _gg_sim(x, w, offs, *, fault=None):
    y = torch.zeros(x.shape[0], w.shape[1])
    for g in range(w.shape[0]):
        r = slice(int(offs[g]), int(offs[g + 1]))
        xs = x[r].clone()
        if fault == "dropped_k_tile":
            xs[:, :16] = 0           # one 16-wide K step skipped
        y[r] = once_rounded_gemm(xs, w[g], BF16)
    return y.to(BF16)


def test_gg_once_rounding_kernel_passes_and_needs_the_budget():
    x, w, offs = _gg_case()
    want, budget = reference.grouped_gemm(x, w, group_offsets=offs, return_budget=True, rounding_dtype=BF16)
    got = _gg_sim(x, w, offs)
    atol, rtol, cos = tolerance_for(BF16)
    assert compare(got, want, atol=atol, rtol=rtol, cos_eps=cos, budget=budget).ok
    assert not compare(got, want, atol=atol, rtol=rtol, cos_eps=cos).ok
    # 16-bit inputs are exact as operands: no budget, the old bounds
    _, b16 = reference.grouped_gemm(x.to(BF16), w.to(BF16), group_offsets=offs, return_budget=True)
    assert torch.count_nonzero(b16) == 0


@pytest.mark.parametrize("fault", ["dropped_k_tile", "one_element"])
def test_gg_planted_faults_fail(fault):
    x, w, offs = _gg_case(seed=1)
    want, budget = reference.grouped_gemm(x, w, group_offsets=offs, return_budget=True, rounding_dtype=BF16)
    got = _gg_sim(x, w, offs, fault=fault)
    atol, rtol, cos = tolerance_for(BF16)
    if fault == "one_element":
        bound = atol + rtol * want[10, 7].abs() + ROUNDING_FACTOR * budget[10, 7]
        got[10, 7] = (want[10, 7] + 3 * bound).to(BF16)
    assert not compare(got, want, atol=atol, rtol=rtol, cos_eps=cos, budget=budget).ok

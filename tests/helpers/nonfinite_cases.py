"""The cases of tests/test_nonfinite.py: per op, inputs holding NaN / inf values where the semantics
of docs/values.md say what must happen, each with its own check of the outputs (`expect`)."""
from __future__ import annotations

import dataclasses

import torch

from dualops.parity import builders

NAN, INF = float("nan"), float("inf")
BF16 = torch.bfloat16


@dataclasses.dataclass
class Case:
    name: str
    values: dict
    expect: object = None          # callable(outputs dict) -> None, asserting the semantics
    splits: int = 0                # > 0: also run with a plan forced to this many KV splits
    propagates: bool = True        # the case needs non-finite values to propagate (else: no effect)


# ----------------------------------------------------------------------------- helpers


def _only_nan_rows(out, lse, nan_rows):
    """out [B, S_q, H, D], lse [B, H, S_q]; nan_rows: set of (b, i, h) whose out and lse are NaN;
    every other row finite."""
    B, S_q, H, _ = out.shape
    for b in range(B):
        for i in range(S_q):
            for h in range(H):
                if (b, i, h) in nan_rows:
                    assert out[b, i, h].isnan().all(), f"out row {(b, i, h)} should be NaN"
                    assert lse[b, h, i].isnan(), f"lse row {(b, i, h)} should be NaN"
                else:
                    assert torch.isfinite(out[b, i, h].float()).all(), f"out row {(b, i, h)} should be finite"
                    assert not lse[b, h, i].isnan(), f"lse row {(b, i, h)} should not be NaN"


def _all_finite(outs):
    for name, t in outs.items():
        assert torch.isfinite(t.float()).all(), f"{name} holds non-finite values"


def _randn(g, *shape, dtype=BF16):
    return builders.randn(g, *shape, dtype=dtype)


# ----------------------------------------------------------------------------- IFA cases

B, HQ, HKV, D, S = 2, 4, 2, 64, 128
LENS = (37, 100)


def ifa_inputs(g, *, s_q=1, lens=LENS, s_max=S, h_q=HQ, h_kv=HKV, b=B):
    """IFA inputs (contiguous caches)."""
    return dict(q=_randn(g, b, s_q, h_q, D), k_cache=_randn(g, b, s_max, h_kv, D),
                v_cache=_randn(g, b, s_max, h_kv, D), kv_lens=torch.tensor(lens, dtype=torch.int32))


def _heads_of(kvh, h_q=HQ, h_kv=HKV):
    grp = h_q // h_kv
    return range(kvh * grp, (kvh + 1) * grp)


def ifa_cases(g):
    cs = []
    v = ifa_inputs(g)
    v["q"][0, 0, 1, 3] = NAN
    cs.append(Case("nan_q", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, 1)})))

    v = ifa_inputs(g)
    v["k_cache"][1, 20, 0, 5] = NAN                      # attended by b=1's kv head 0
    cs.append(Case("nan_key", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(1, 0, h) for h in _heads_of(0)})))

    v = ifa_inputs(g)
    v["v_cache"][1, 20, 1, 7] = NAN

    def nan_value(o):
        nan = o["out"].isnan()
        assert nan[1, 0, list(_heads_of(1)), 7].all() and int(nan.sum()) == len(_heads_of(1))
        assert not o["lse"].isnan().any()
    cs.append(Case("nan_value", v, nan_value))

    v = ifa_inputs(g)
    v["pse_shift"] = torch.randn(B, HQ, 1, S, generator=g)
    v["pse_shift"][0, 2, 0, 10] = NAN
    cs.append(Case("nan_pse", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, 2)})))

    for which in ("k", "v"):
        v = ifa_inputs(g)
        from dualops import quant
        k8, ks, ko = quant.quantize_kv_int8(v["k_cache"])
        v8, vs, vo = quant.quantize_kv_int8(v["v_cache"])
        v.update(k_cache=k8, v_cache=v8, k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo)
        v[f"{which}_scale"] = v[f"{which}_scale"].clone()
        v[f"{which}_scale"][1, 4] = NAN
        if which == "k":
            exp = (lambda o: _only_nan_rows(o["out"], o["lse"], {(b, 0, h) for b in range(B) for h in _heads_of(1)}))
        else:
            def exp(o):
                assert o["out"][:, 0, list(_heads_of(1)), 4].isnan().all()
                assert not o["lse"].isnan().any()
        cs.append(Case(f"nan_{which}_scale_int8", v, exp))

    v = ifa_inputs(g)
    v["k_cache"][0, 5, 0, :] = INF                       # scores +-inf (q has both signs)
    cs.append(Case("inf_key", v))

    v = ifa_inputs(g)
    v["v_cache"][0, 5, 0, 2] = -INF

    def neg_inf_value(o):
        assert (o["out"][0, 0, list(_heads_of(0)), 2] == -INF).all()
        assert int((~torch.isfinite(o["out"].float())).sum()) == len(_heads_of(0))
    cs.append(Case("neg_inf_value", v, neg_inf_value))

    for sign in (1, -1):
        v = ifa_inputs(g)
        v["pse_shift"] = torch.randn(B, HQ, 1, S, generator=g)
        v["pse_shift"][0, 1, 0, 7] = sign * INF
        cs.append(Case(f"{'pos' if sign > 0 else 'neg'}_inf_pse", v))

    # ---- values a call never attends
    v = ifa_inputs(g)
    for t in ("k_cache", "v_cache"):
        v[t] = builders.nan_tail(v[t], LENS)
        v[t][0, LENS[0] + 3] = INF
    cs.append(Case("past_kv_len", v, _all_finite, propagates=False))

    v = ifa_inputs(g)
    (k, vv), table = builders.page([v["k_cache"], v["v_cache"]], LENS, 16, g)
    v.update(k_cache=k, v_cache=vv, block_table=table)
    cs.append(Case("unused_pages", v, _all_finite, propagates=False))

    v = ifa_inputs(g)
    mask = torch.zeros(B, 1, 1, S, dtype=torch.bool)
    mask[0, ..., [3, 30]] = True
    mask[1, ..., [0, 64, 99]] = True
    for b, keys in ((0, [3, 30]), (1, [0, 64, 99])):
        v["k_cache"][b, keys] = NAN
        v["v_cache"][b, keys] = INF
    v["atten_mask"] = mask
    v["pse_shift"] = torch.randn(B, 1, 1, S, generator=g).masked_fill(mask, NAN)
    cs.append(Case("masked_keys", v, _all_finite, propagates=False))

    v = ifa_inputs(g, s_q=2)
    v["causal"] = True
    v["k_cache"][0, LENS[0] - 1] = NAN                 # only query 1 of request 0 sees the last key
    v["v_cache"][0, LENS[0] - 1] = NAN
    cs.append(Case("causal_hidden_key", v,
                   lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 1, h) for h in range(HQ)})))

    # ---- split-KV: long requests, and plans forced to several splits
    v = ifa_inputs(g, b=1, h_q=4, h_kv=1, s_max=3000, lens=(3000,))
    v["k_cache"][0, 2500, 0, 3] = NAN
    cs.append(Case("split_nan_key", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, h) for h in range(4)}),
                   splits=4))

    v = ifa_inputs(g, b=1, h_q=4, h_kv=1, s_max=3000, lens=(3000,))
    v["q"][0, 0, 2, 0] = NAN
    cs.append(Case("split_nan_q", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, 2)}), splits=4))

    # A split whose keys all sit 1e4 below the others: its merge weight is exactly 0, and one of
    # its values is NaN. 0 * NaN is NaN: the merge must not skip it.
    v = ifa_inputs(g, b=1, h_q=4, h_kv=1, s_max=2048, lens=(2048,))
    pse = torch.zeros(1, 1, 1, 2048)
    pse[..., 1024:1536] = -1e4
    v["pse_shift"] = pse
    v["v_cache"][0, 1100, 0, 9] = NAN

    def zero_weight_split(o):
        nan = o["out"].isnan()
        assert nan[0, 0, :, 9].all() and int(nan.sum()) == 4
        assert not o["lse"].isnan().any()
    cs.append(Case("split_zero_weight_nan_value", v, zero_weight_split, splits=4))
    return cs


# ----------------------------------------------------------------------------- MLA cases

MH, PBS, MLENS = 16, 64, (100, 37)


def mla_inputs(g, *, lens=MLENS, s_q=1, poison=True):
    """MLA inputs (paged cache, poisoned unused slots unless poison=False)."""
    b = len(lens)
    width = max(-(-max(lens) // PBS), 1)
    logical = _randn(g, b, width * PBS, 1, 576)
    (kv,), table = builders.page([logical], lens, PBS, g) if poison else ((logical.view(-1, PBS, 1, 576),),
                                                                       torch.arange(b * width, dtype=torch.int32).view(b, width))
    return dict(q=_randn(g, b, s_q, MH, 576), kv_cache=kv, block_table=table,
                cache_seqlens=torch.tensor(lens, dtype=torch.int32))


def _token(values, b, pos):
    """(block, slot) of request b's token pos."""
    blk = int(values["block_table"][b, pos // PBS])
    return blk, pos % PBS


def mla_cases(g):
    cs = []
    v = mla_inputs(g)
    v["q"][1, 0, 3, 100] = NAN
    cs.append(Case("nan_q", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(1, 0, 3)})))

    for name, d in (("nan_key_value_part", 7), ("nan_key_rope_part", 540)):
        v = mla_inputs(g)
        blk, slot = _token(v, 0, 70)
        v["kv_cache"][blk, slot, 0, d] = NAN
        cs.append(Case(name, v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, h) for h in range(MH)})))

    v = mla_inputs(g)
    blk, slot = _token(v, 1, 3)
    v["kv_cache"][blk, slot, 0, 11] = INF
    cs.append(Case("inf_key", v))

    v = mla_inputs(g)
    v["attn_sink"] = torch.randn(MH, generator=g)
    v["attn_sink"][5] = NAN

    def nan_sink(o):
        nan = o["out"].isnan()
        assert nan[:, :, 5].all() and int(nan.sum()) == nan[:, :, 5].numel()
        assert not o["lse"].isnan().any()       # the sink scales out; lse is the keys' own
    cs.append(Case("nan_attn_sink", v, nan_sink))

    v = mla_inputs(g)                                         # tail of the last page and unused pages: NaN
    cs.append(Case("past_seqlen_and_unused_pages", v, _all_finite, propagates=False))

    v = mla_inputs(g, s_q=2)
    v["causal"] = True
    blk, slot = _token(v, 1, MLENS[1] - 1)
    v["kv_cache"][blk, slot] = NAN
    cs.append(Case("causal_hidden_key", v,
                   lambda o: _only_nan_rows(o["out"], o["lse"], {(1, 1, h) for h in range(MH)})))

    # sparse: NaN tokens reached only through invalid indices or entries past topk_length
    v = mla_inputs(g, poison=False)
    cap = v["kv_cache"].shape[0] * PBS
    idx = torch.randperm(cap // 2, generator=g)[:2 * 32].view(2, 1, 32).to(torch.int32)
    idx[0, 0, 5] = -1
    idx[1, 0, 9] = builders.INT32_MIN
    idx[0, 0, 30:] = torch.tensor([cap // 2 + 1, cap // 2 + 2], dtype=torch.int32)   # past topk_length
    flat = v["kv_cache"].view(-1, 576)
    flat[cap // 2:] = NAN                                       # only cut-off entries point here
    v.update(indices=idx, topk_length=torch.tensor([30, 32], dtype=torch.int32))
    cs.append(Case("sparse_invalid_and_cut_off", v, _all_finite, propagates=False))

    v = mla_inputs(g, poison=False)
    idx = torch.randperm(cap, generator=g)[:2 * 32].view(2, 1, 32).to(torch.int32)
    v["kv_cache"].view(-1, 576)[int(idx[1, 0, 4])] = NAN
    v["indices"] = idx
    cs.append(Case("sparse_nan_key", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(1, 0, h) for h in range(MH)})))

    v = mla_inputs(g, lens=(4096,))
    blk, slot = _token(v, 0, 3000)
    v["kv_cache"][blk, slot, 0, 300] = NAN
    cs.append(Case("split_nan_key", v, lambda o: _only_nan_rows(o["out"], o["lse"], {(0, 0, h) for h in range(MH)})))
    return cs


# ----------------------------------------------------------------------------- grouped GEMM cases

OFFS = (0, 5, 5, 12)                 # group 1 empty; rows 12, 13 belong to no group
GN, GK = 128, 128


def _gg(g):
    return dict(x=_randn(g, 14, GK), w=_randn(g, 3, GN, GK), group_offsets=torch.tensor(OFFS, dtype=torch.int32))


def gg_cases(g):
    cs = []
    v = _gg(g)
    v["x"][7, 3] = NAN

    def nan_x(o):
        y = o["y"]
        assert y[7].isnan().all() and int(y.isnan().sum()) == GN
    cs.append(Case("nan_x", v, nan_x))

    v = _gg(g)
    v["w"][2, 9, 100] = NAN

    def nan_w(o):
        y = o["y"]
        assert y[5:12, 9].isnan().all() and int(y.isnan().sum()) == 7
    cs.append(Case("nan_w", v, nan_w))

    v = _gg(g)
    v["x"][0, 1] = INF
    cs.append(Case("inf_x", v))

    v = _gg(g)
    v["x"][12:] = NAN                                # rows of no group
    v["w"][1] = NAN                                  # the empty group's weights

    def unused(o):
        assert torch.isfinite(o["y"][:12].float()).all() and (o["y"][12:] == 0).all()
    cs.append(Case("unused_rows_and_empty_group", v, unused, propagates=False))

    v = dict(x=_randn(g, 3, 8, GK), w=_randn(g, 3, GN, GK), masked_m=torch.tensor([3, 0, 8], dtype=torch.int32))
    v["x"][0, 3:] = NAN
    v["x"][1] = INF
    v["w"][1] = NAN

    def masked(o):
        y = o["y"]
        assert torch.isfinite(y[0, :3].float()).all() and torch.isfinite(y[2].float()).all()
        assert (y[0, 3:] == 0).all() and (y[1] == 0).all()
    cs.append(Case("masked_rows_past_masked_m", v, masked, propagates=False))

    v = _gg(g)
    x8 = v["x"].float().clamp(-4, 4).to(torch.float8_e4m3fn)
    w8 = v["w"].float().clamp(-4, 4).to(torch.float8_e4m3fn)
    xs = torch.rand(14, generator=g) + 0.5
    xs[2] = NAN
    v.update(x=x8, w=w8, scale_mode="rowwise", x_scale=xs, w_scale=torch.rand(3, GN, generator=g) + 0.5)

    def nan_row_scale(o):
        assert o["y"][2].isnan().all() and int(o["y"].isnan().sum()) == GN
    cs.append(Case("nan_x_scale_fp8_rowwise", v, nan_row_scale))
    return cs


CASES = {"incre_flash_attention": ifa_cases, "mla_decode": mla_cases, "grouped_gemm": gg_cases}
OUTPUTS = {"incre_flash_attention": ("out", "lse"), "mla_decode": ("out", "lse"), "grouped_gemm": ("y",)}

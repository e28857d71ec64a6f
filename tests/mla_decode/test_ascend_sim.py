"""The Ascend C MLA decode kernel on the simulator against dualops.reference, by the parity method
of docs/parity.md: NaN in every unused cache slot, randomly permuted block tables, varlen batches
with 0- and 1-token requests, invalid sparse indices (-1, int32 min, capacity, int32 max), sinks of
+-inf, fresh random inputs; bf16 / fp16 / fp8_v32 / fp8_model1 / int8_v32 caches, dense / causal /
sparse / extra pool, split-KV with its combine, NaN propagation through a split, planted faults the
simulator must catch. Small shapes on 2-4 simulated AI cores (real per-core capacities) keep it
fast."""
from __future__ import annotations

import pytest
import torch

import dualops
from dualops.backends import ascend_sim
from dualops.backends.ascend_sim import mla_decode as sim_mla
from dualops.parity import cases as parity_cases
from dualops.reference.mla_decode import mla_decode as ref_mla
from dualops.testing import LSE_TOLERANCE, assert_close_parity

pytestmark = pytest.mark.skipif(not ascend_sim.status()[0], reason=f"ascend_sim unavailable: {ascend_sim.status()[1]}")


def _inputs(case, seed=0):
    g = torch.Generator()
    g.manual_seed(seed)
    return case.build(g)


def _run(inp, cores=2, **kw):
    with ascend_sim.use_profile("ascend910b2", cores=cores):
        return dualops.mla_decode(**inp, backend="ascend_sim", **kw)


def _check(inp, out, lse):
    want_out, want_lse, budget = ref_mla(**inp, return_budget=True)
    assert_close_parity(out, want_out.to(out.dtype), budget=budget.out, name="out")
    assert_close_parity(lse, want_lse.float(), *LSE_TOLERANCE, budget=budget.lse, name="lse")


def _splits():
    return ascend_sim.last_counters()["plan"].total_splits - ascend_sim.last_counters()["plan"].batch


# ----------------------------------------------------------------------------- the parity cases


@pytest.mark.parametrize("case", parity_cases.cases("mla_decode", full=True), ids=lambda c: c.name)
def test_parity_cases(case):
    inp = _inputs(case)
    _check(inp, *_run(inp))


# ----------------------------------------------------------------------------- shapes and splits

_MORE = [
    # split-KV: a long request dealt over every part (the combine merges 3-4 splits)
    parity_cases._mla("split_bf16_b1_h16", B=1, lens=(700,), h_q=16),
    parity_cases._mla("split_varlen_h33_odd", B=3, lens=(0, 410, 1), h_q=33),
    parity_cases._mla("split_fp8_v32_causal", B=1, lens=(300,), h_q=16, s_q=3, causal=True, kv_format="fp8_v32"),
    parity_cases._mla("split_model1_page48", B=2, lens=(260, 5), h_q=8, d_qk=512, kv_format="fp8_model1", pbs=48),
    parity_cases._mla("split_sparse_topk256_extra", B=1, h_q=16, s_q=2, topk=256, topk_lens=(200,),
                      extra_topk=64, sink=True),
    # q rows: one head, 128 heads x 2 tokens (4 m blocks), page sizes 1 and 100, fp16
    parity_cases._mla("h1_page1", B=2, lens=(9, 2), h_q=1, pbs=1),
    parity_cases._mla("fp16_h128_sq2_page100", B=1, lens=(130,), h_q=128, s_q=2, pbs=100, dtype="fp16"),
    parity_cases._mla("sparse_fp16_h3_sq3", B=2, h_q=3, s_q=3, topk=40, dtype="fp16", d_qk=512),
    # int8_v32: varlen (0- and 1-token requests) with split-KV and fp16 q; sparse with topk_length,
    # the extra pool and sinks
    parity_cases._mla("split_int8_v32_varlen_fp16", B=3, lens=(0, 420, 1), h_q=8, s_q=2, causal=True,
                      kv_format="int8_v32", dtype="fp16"),
    parity_cases._mla("sparse_int8_v32_topklen_extra_sink", B=2, h_q=16, s_q=2, topk=96, topk_lens=(96, 3),
                      extra_topk=32, sink=True, kv_format="int8_v32"),
]


@pytest.mark.parametrize("case", _MORE, ids=lambda c: c.name)
def test_shapes_and_splits(case):
    inp = _inputs(case, seed=3)
    cores = 4
    _check(inp, *_run(inp, cores=cores))
    if case.name.startswith("split"):
        assert _splits() > 0, "the case was meant to split a request"


def test_noncontiguous_q():
    inp = _inputs(parity_cases._mla("nc", B=2, lens=(70, 3), h_q=8, s_q=2))
    q = inp["q"]
    buf = torch.full((*q.shape[:-1], 2 * q.shape[-1]), float("nan"), dtype=q.dtype)
    buf[..., : q.shape[-1]] = q
    inp["q"] = buf[..., : q.shape[-1]]
    _check(inp, *_run(inp))


def test_empty_rows_out_zero_lse_inf():
    inp = _inputs(parity_cases._mla("empty", B=2, lens=(0, 3), h_q=4))
    inp["cache_seqlens"][1] = 0
    out, lse = _run(inp)
    assert torch.equal(out, torch.zeros_like(out))
    assert bool(torch.isposinf(lse).all())


def test_user_plan_reused_and_checked():
    inp = _inputs(parity_cases._mla("plan", B=2, lens=(200, 64), h_q=16))
    with ascend_sim.use_profile("ascend910b2", cores=3) as prof:
        plan = dualops.get_mla_metadata(inp["cache_seqlens"], 16, 1, 1, device=prof)
        out, lse = dualops.mla_decode(**inp, plan=plan, backend="ascend_sim")
        _check(inp, out, lse)
        other = dualops.get_mla_metadata(torch.tensor([300, 64], dtype=torch.int32), 16, 1, 1, device=prof)
        with pytest.raises(ValueError, match="other request lengths"):   # the sim's calls check values
            dualops.mla_decode(**inp, plan=other, backend="ascend_sim")


@pytest.mark.parametrize("where", ["rope", "nope"])
def test_nan_in_a_split_poisons_the_row(where):
    """A NaN in an attended key of one split (in its RoPE part: K only; in its NoPE part: K and V)
    must reach the merged row like the reference, not vanish in the combine."""
    inp = _inputs(parity_cases._mla("nan", B=1, lens=(600,), h_q=8))
    blk = int(inp["block_table"][0, 5])   # a key in the middle of the request
    col = 520 if where == "rope" else 3
    inp["kv_cache"][blk, 7, 0, col] = float("nan")
    out, lse = _run(inp, cores=4)
    assert _splits() > 0
    _check(inp, out, lse)
    assert bool(out.isnan().all())
    assert bool(lse.isnan().all())


def _poison_token(inp, pos, value, col=None):
    """Write ``value`` into request 0's key at position ``pos`` (all of it, or column ``col``);
    for fp8_v32 / int8_v32 a NaN / inf goes into the token's first scale (values 0..127)."""
    pbs = inp["kv_cache"].shape[1]
    blk, slot = int(inp["block_table"][0, pos // pbs]), pos % pbs
    if inp.get("kv_format", "bf16") in ("fp8_v32", "int8_v32"):
        inp["kv_cache"][blk, slot, 0, 512:516] = torch.tensor([value], dtype=torch.float32).view(torch.uint8)
    elif inp.get("kv_format") == "fp8_model1":   # an e4m3 NaN byte (0x7F) in the token's data
        assert value != value, "model1 tokens hold NaN (e4m3 has no inf)"
        inp["kv_cache"].view(inp["kv_cache"].shape[0], -1)[blk, slot * 576 + (col or 0)] = 0x7F
    elif col is None:
        inp["kv_cache"][blk, slot] = value
    else:
        inp["kv_cache"][blk, slot, 0, col] = value


_SPLIT_NONFINITE = {
    # +inf in one split's attended key (a value column): rows whose score is +inf get lse +inf and
    # out NaN, the others a NaN in that column (0 * inf) and a finite lse, through the combine
    "inf_key": dict(lens=(600,), h_q=16, keys=((300, float("inf"), 11),)),
    # NaN / inf in the last keys, hidden by the causal mask from the first query tokens: no effect there
    "causal_hidden_nan": dict(lens=(600,), h_q=8, s_q=3, causal=True, keys=((599, float("nan"), None),)),
    "causal_hidden_inf": dict(lens=(600,), h_q=8, s_q=3, causal=True, keys=((598, float("inf"), 7),)),
    "causal_hidden_many_sq40": dict(lens=(600,), h_q=1, s_q=40, causal=True,
                                    keys=((565, float("nan"), None), (580, float("nan"), 3), (599, float("nan"), None))),
    "causal_hidden_fp8_v32": dict(lens=(300,), h_q=16, s_q=3, causal=True, kv_format="fp8_v32",
                                  keys=((299, float("nan"), None), (298, float("inf"), None))),
    "causal_hidden_int8_v32": dict(lens=(300,), h_q=16, s_q=3, causal=True, kv_format="int8_v32",
                                   keys=((299, float("inf"), None), (298, float("nan"), None))),
    "causal_hidden_fp8_model1": dict(lens=(300,), h_q=16, s_q=3, causal=True, kv_format="fp8_model1", d_qk=512,
                                     keys=((299, float("nan"), None), (298, float("nan"), 5))),
    # 99 q rows: m blocks of 64 and 35 rows, the vector cores' row halves the same in both
    "causal_hidden_h33_two_m_blocks": dict(lens=(600,), h_q=33, s_q=3, causal=True,
                                           keys=((599, float("nan"), None), (598, float("-inf"), 7))),
}


@pytest.mark.parametrize("name", list(_SPLIT_NONFINITE))
def test_nonfinite_semantics_with_split_kv(name):
    """docs/values.md with a plan of several splits: inf / NaN positions and values match the
    reference (+inf scores give lse +inf; keys the causal mask hides have no effect)."""
    spec = dict(_SPLIT_NONFINITE[name])
    keys = spec.pop("keys")
    inp = _inputs(parity_cases._mla(name, B=1, **spec), seed=5)
    for pos, value, col in keys:
        _poison_token(inp, pos, value, col)
    out, lse = _run(inp, cores=4)
    assert _splits() > 0, "the case was meant to split the request"
    _check(inp, out, lse)
    if spec.get("causal"):
        assert not out[0, 0].isnan().any(), "the first query token hides every poisoned key"
    else:
        assert bool(lse.isposinf().any()) and bool(out.isnan().any())


@pytest.mark.parametrize("keys,split", [(range(0, 1), False), (range(0, 256), True), (range(0, 600), True)],
                         ids=["one_key_request", "whole_first_split", "every_split"])
def test_inf_values_of_keys_with_weight_zero(keys, split):
    """-inf in a value column of keys: rows whose score is -inf there give those keys weight 0,
    and 0 * inf is NaN in that column (the reference's p @ v), even when no key of the row, or of
    one split, has a score above -inf; rows whose score is +inf get lse +inf and out NaN.
    (The plan on 4 cores splits the 600 keys as [0, 256), [256, 512), [512, 600).)"""
    n = len(keys) if not split else 600
    inp = _inputs(parity_cases._mla("neg_inf_v", B=1, lens=(n,), h_q=16), seed=7)
    for pos in keys:
        _poison_token(inp, pos, float("-inf"), 5)
    out, lse = _run(inp, cores=4)
    assert (_splits() > 0) == split
    _check(inp, out, lse)
    assert bool(out[..., 5].isnan().all())


def test_int8_v32_matches_its_fp8_twin_within_quantization():
    """One bf16 cache stored as fp8_v32 and as int8_v32 (parity's format pair): each output matches
    the reference on its own dequantized cache, and the two outputs differ by about the fp8
    quantization error (the int8 cache is the closer one to the unquantized cache)."""
    fp8, int8, bf16 = parity_cases.FORMAT_PAIRS["dense_fp8_v32_h16"]
    got = {}
    for case in (fp8, int8):
        inp = case.inputs(11)
        got[case.name] = _run(inp)
        _check(inp, *got[case.name])
    cache_out, _ = ref_mla(**bf16.inputs(11))
    err_fp8 = (got[fp8.name][0].float() - cache_out).norm() / cache_out.norm()
    err_int8 = (got[int8.name][0].float() - cache_out).norm() / cache_out.norm()
    assert 0 < err_int8 < err_fp8 < 0.05, (err_int8, err_fp8)


def test_mismatched_16bit_cache_is_not_implemented():
    inp = _inputs(parity_cases._mla("mix", B=1, lens=(5,), h_q=4))
    inp["kv_cache"] = inp["kv_cache"].to(torch.float16)
    with pytest.raises(NotImplementedError, match="q's dtype"):
        _run(inp)


def test_capabilities():
    assert dualops.supports("mla_decode", "ascend_sim", kv_format="fp8_model1", sparse=True, h_q=128)
    assert dualops.supports("mla_decode", "ascend_sim", kv_format="int8_v32", sparse=True, h_q=128)
    assert not dualops.supports("mla_decode", "ascend_sim", h_q=256)


# ----------------------------------------------------------------------------- planted faults


def test_fault_read_past_the_cache_is_caught():
    """A block id past the cache, handed to the glue straight (the API's value checks would refuse
    it first): the simulator stops the GM read."""
    inp = _inputs(parity_cases._mla("oob", B=1, lens=(40,), h_q=4))
    inp["block_table"][0, 0] = 1_000_000   # ~70 GB past the cache, far from any other buffer
    with ascend_sim.use_profile("ascend910b2", cores=2):
        with pytest.raises(RuntimeError, match="ascend_sim: kernel 'mla_decode'.*outside every buffer"):
            sim_mla.mla_decode(**_kwargs(inp))
        with pytest.raises(ValueError, match=r"block_table\[0, 0\] = 1000000"):
            _run(inp)


def test_fault_oversize_tile_is_caught(monkeypatch):
    """A doctored launch (512-key tiles: L1 / UB overflow): the kernel's tiling check refuses it;
    with that check off the simulator's capacity check faults."""
    inp = _inputs(parity_cases._mla("big", B=1, lens=(40,), h_q=4))
    monkeypatch.setattr(sim_mla, "KV_TILE", 512)
    with ascend_sim.use_profile("ascend910b2", cores=2):
        with pytest.raises(ValueError, match="kv_tile"):
            sim_mla.mla_decode(**_kwargs(inp))
        monkeypatch.setattr(sim_mla, "check_tiling", lambda *a: None)
        with pytest.raises(RuntimeError, match="ascend_sim: kernel 'mla_decode'.*InitBuffer"):
            sim_mla.mla_decode(**_kwargs(inp))


def _kwargs(inp):
    kw = dict(head_dim_v=512, plan=None, softmax_scale=inp["q"].shape[-1] ** -0.5, causal=inp.get("causal", False),
              kv_format=inp.get("kv_format", "bf16"))
    for k in ("indices", "topk_length", "attn_sink", "extra_kv_cache", "extra_indices", "extra_topk_length"):
        kw[k] = inp.get(k)
    return dict(q=inp["q"], kv_cache=inp["kv_cache"], block_table=inp["block_table"],
                cache_seqlens=inp["cache_seqlens"], **kw)


# ----------------------------------------------------------------------------- cost model


def test_estimate_names_its_bound():
    inp = _inputs(parity_cases._mla("est", B=2, lens=(256, 128), h_q=16))
    est = ascend_sim.estimate("mla_decode", inp, profile="ascend910b2")
    assert est["seconds"] > 0 and est["label"].startswith("estimate")
    assert est["bound"] in ("cube", "vector", "mte", "hbm", "l2", "sync", "launch")



def test_bench_estimate_memory_bound_row_meets_the_bandwidth_target():
    """The dense bf16 memory-bound bench row (b 64, h_q 16, s_k 4096): the cost model, extrapolated
    from reduced simulated runs, puts it at >= 80 % of the profile's HBM bandwidth, bound by HBM."""
    from dualops import devices
    from dualops.bench import mla_decode as bench_mla

    s = bench_mla.normalize(dict(b=64, h_q=16, s_k=4096))
    est = bench_mla.sim_estimate(s, "ascend910b2")
    assert est["label"] == "estimate (cost model, extrapolated)" and est["bound"] == "hbm"
    gbs = bench_mla.bytes_moved(s) / est["seconds"] / 1e9
    assert gbs >= 0.8 * devices.profile("ascend910b2").hbm_bandwidth_gbs

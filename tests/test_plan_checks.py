"""A plan given to mla_decode is checked against the call (its shape-level fields on every call,
its schedule against the request lengths with validate="full"); another op's plan, validate=False,
meta tensors and get_mla_metadata's device= give clear answers."""
import pytest
import torch

import dualops

B, H_Q, PBS = 3, 16, 64


def _call(gen, *, s_q=1, h_q=H_Q, lens=(100, 5, 0), pbs=PBS, topk=None):
    lens_t = torch.tensor(lens, dtype=torch.int32)
    per = 4
    q = torch.randn(len(lens), s_q, h_q, 576, generator=gen).to(torch.bfloat16)
    kv = torch.randn(len(lens) * per, pbs, 1, 576, generator=gen).to(torch.bfloat16)
    table = torch.randperm(len(lens) * per, generator=gen).to(torch.int32).view(len(lens), per)
    kw = {}
    if topk:
        kw["indices"] = torch.randint(0, len(lens) * per * pbs, (len(lens), s_q, topk),
                                      generator=gen).to(torch.int32)
    return (q, kv, table, lens_t), kw


def _plan(lens=(100, 5, 0), **kw):
    kw.setdefault("num_heads_q", H_Q)
    return dualops.get_mla_metadata(torch.tensor(lens, dtype=torch.int32), **kw)


def test_matching_plan_runs_and_equals_no_plan(gen):
    args, kw = _call(gen)
    out, lse = dualops.mla_decode(*args, plan=_plan(), **kw)
    ref, ref_lse = dualops.mla_decode(*args, **kw)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse)


@pytest.mark.parametrize("field,plan_kw,call_kw", [
    ("batch", dict(lens=(100, 5)), {}),
    ("s_q", dict(s_q=2), {}),
    ("h_q", dict(num_heads_q=32), {}),
    ("kv_format", dict(kv_format="fp8_v32"), {}),
    ("sparse", dict(topk=64), {}),
    ("topk", dict(topk=64), dict(topk=128)),
    ("page_block_size", dict(page_block_size=32), {}),
    ("sparse", {}, dict(topk=64)),
])
@pytest.mark.parametrize("validate", [True, False, "full"])
def test_plan_for_another_call_is_refused(gen, field, plan_kw, call_kw, validate):
    args, kw = _call(gen, **call_kw)
    plan = _plan(**plan_kw)
    for _ in range(2):     # the second call takes the cached fast path: still checked
        with pytest.raises(ValueError, match=rf"plan\.{field} = .* but the call's"):
            dualops.mla_decode(*args, plan=plan, validate=validate, **kw)


def test_error_names_every_difference(gen):
    args, kw = _call(gen)
    with pytest.raises(ValueError) as e:
        dualops.mla_decode(*args, plan=_plan(s_q=2, num_heads_q=32, kv_format="fp8_model1"), **kw)
    msg = str(e.value)
    assert "plan.s_q = 2" in msg and "plan.h_q = 32" in msg and "'fp8_model1'" in msg
    assert "get_mla_metadata" in msg


def test_packed_plan_is_checked_too(gen):
    args, kw = _call(gen)
    with pytest.raises(ValueError, match="plan.h_q = 32"):
        dualops.mla_decode(*args, plan=_plan(num_heads_q=32).pack(), **kw)


def test_full_validation_checks_the_lengths(gen):
    args, kw = _call(gen)
    stale = _plan(lens=(4000, 5, 0))     # last step's lengths: same shapes, another schedule
    dualops.mla_decode(*args, plan=stale, **kw)          # basic: shape-level fields only
    with pytest.raises(ValueError, match="other request lengths"):
        dualops.mla_decode(*args, plan=stale, validate="full", **kw)
    dualops.mla_decode(*args, plan=_plan(), validate="full", **kw)


def test_full_validation_of_a_sparse_plan(gen):
    args, kw = _call(gen, topk=64)
    dualops.mla_decode(*args, plan=_plan(topk=64), validate="full", **kw)


def test_plan_device_profile_name():
    lens = torch.tensor([100, 5], dtype=torch.int32)
    h100 = dualops.get_mla_metadata(lens, 16, device="h100")
    assert h100 == dualops.get_mla_metadata(lens, 16, device=dualops.devices.profile("h100"))
    assert dualops.get_mla_metadata(lens, 16, device="ascend910b2").num_sm_parts == 24
    assert dualops.get_mla_metadata(lens, 16, device="npu:0").num_sm_parts == 24      # no torch_npu needed
    assert dualops.get_mla_metadata(lens, 16, device="cpu") == dualops.get_mla_metadata(lens, 16)
    with pytest.raises(ValueError, match="profile name .*h100.*h200"):
        dualops.get_mla_metadata(lens, 16, device="h300")
    with pytest.raises(TypeError, match="device must be"):
        dualops.get_mla_metadata(lens, 16, device=3.5)
    for bogus in ("bogus", "bogus:1", "gpu"):
        with pytest.raises(ValueError, match=f"device must be .*got '{bogus}'"):
            dualops.get_mla_metadata(lens, 16, device=bogus)
        with pytest.raises(ValueError, match=f"device must be .*got '{bogus}'"):
            dualops.devices.detect(bogus)
    assert dualops.devices.detect("npu:1").name == dualops.devices.DEFAULT_NPU_PROFILE   # no torch_npu needed


@pytest.mark.parametrize("backend", ["reference", None])
def test_another_ops_plan_is_refused(gen, backend):
    args, kw = _call(gen)
    ifa_plan = dualops.tiling.plan_incre_flash_attention(batch=B, s_q=1, h_q=H_Q, h_kv=1, head_dim=128,
                                                         max_kv_len=256, device=dualops.devices.profile("h100"))
    with pytest.raises(TypeError, match="plan must come from dualops.get_mla_metadata, got IfaPlan"):
        dualops.mla_decode(*args, plan=ifa_plan, backend=backend, **kw)


def test_validate_false_is_the_cheapest_mode(gen):
    args, kw = _call(gen)
    out, _ = dualops.mla_decode(*args, validate=False, **kw)
    torch.testing.assert_close(out, dualops.mla_decode(*args, **kw)[0])
    with pytest.raises(ValueError, match="validate must be"):
        dualops.mla_decode(*args, validate="fast", **kw)


@pytest.mark.parametrize("backend", ["reference", None])
def test_meta_tensors_give_output_shapes(backend):
    """Meta tensors hold no data: the custom op answers with its fake implementation (the outputs'
    shapes and dtypes), as every torch op does, and still validates the call."""
    q = torch.empty(2, 1, 8, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(2, 16, 2, 64, device="meta", dtype=torch.bfloat16)
    out, lse = dualops.incre_flash_attention(q, k, k, backend=backend, return_lse=True)
    assert out.device.type == "meta" and out.shape == q.shape and lse.shape == (2, 8, 1)
    x = torch.empty(8, 32, device="meta", dtype=torch.bfloat16)
    w = torch.empty(2, 16, 32, device="meta", dtype=torch.bfloat16)
    offs = torch.empty(3, device="meta", dtype=torch.int32)
    assert dualops.grouped_gemm(x, w, group_offsets=offs, backend=backend).shape == (8, 16)
    with pytest.raises(ValueError, match="v_cache"):
        dualops.incre_flash_attention(q, k, k[:, :, :1], backend=backend)


def test_meta_tensors_under_the_fake_implementation():
    q = torch.empty(2, 1, 8, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(2, 16, 2, 64, device="meta", dtype=torch.bfloat16)
    given = dict(q=q, k_cache=k, v_cache=k, causal=False, return_lse=True)
    args = [given.get(n) for n in dualops.ops.ARG_NAMES["incre_flash_attention"]]
    out, lse = torch.ops.dualops.incre_flash_attention(*args, "", "basic")
    assert out.shape == (2, 1, 8, 64) and lse.shape == (2, 8, 1)

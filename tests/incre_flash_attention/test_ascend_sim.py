"""The Ascend C incremental flash attention kernel on the simulator against dualops.reference,
by the docs/parity.md method: NaN in every unused cache slot, randomly permuted block tables,
varlen batches with 0- and 1-token requests, non-contiguous q, fresh random inputs per case;
GQA / MQA / MHA, head dims 64 / 128 / 256, causal MTP, masks, biases, int8 / fp8 caches,
split-KV on and off (plans forced to odd shapes too), lse, and full 910B core counts.

Most cases run on 2-4 simulated AI cores (real per-core capacities) to stay fast on a small CPU."""
from __future__ import annotations
from __future__ import annotations

import pytest
import torch

from dualops import schema
from dualops.backends import ascend_sim
from ifa_sim_cases import (BF16, FP16, _backend_call, _forced_plan, check, make_case, run_and_check,
                           run_sim)

pytestmark = pytest.mark.skipif(not ascend_sim.status()[0], reason=f"ascend_sim unavailable: {ascend_sim.status()[1]}")

# ----------------------------------------------------------------------------- basics


@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_gqa_contiguous_varlen_with_empty_and_single_token(gen, dtype):
    case = make_case(gen, B=4, h_q=8, h_kv=2, lens=(77, 0, 1, 130), dtype=dtype)
    out, lse = run_and_check(case)
    assert torch.isinf(lse[1]).all() and (lse[1] > 0).all(), "a request with no keys has lse +inf"
    assert (out[1] == 0).all(), "a request with no keys outputs 0"


@pytest.mark.parametrize("H_q,H_kv", [(4, 4), (16, 1), (6, 3)], ids=["mha", "mqa", "odd_heads"])
def test_head_layouts(gen, H_q, H_kv):
    run_and_check(make_case(gen, B=2, h_q=H_q, h_kv=H_kv, lens=(50, 91), dtype=BF16))


@pytest.mark.parametrize("D", [128, 256])
def test_head_dims(gen, D):
    run_and_check(make_case(gen, B=2, h_q=4, h_kv=2, d=D, lens=(33, 70)))


def test_noncontiguous_q(gen):
    case = make_case(gen, B=2, s_q=2, h_q=8, h_kv=2, lens=(40, 17), q_layout="bhsd", causal=True)
    assert not case["q"].is_contiguous()
    run_and_check(case)


@pytest.mark.parametrize("S_q", [2, 3, 4])
def test_causal_mtp(gen, S_q):
    # kv_len 2 < S_q: the first queries see no key at all.
    case = make_case(gen, B=3, s_q=S_q, h_q=4, h_kv=1, lens=(2, 45, 1), causal=True, dtype=BF16)
    out, lse = run_and_check(case)
    if S_q > 2:
        assert torch.isinf(lse[0, :, 0]).all()


# ----------------------------------------------------------------------------- paged cache


@pytest.mark.parametrize("block_size", [16, 64, 128])
def test_paged_permuted_blocks(gen, block_size):
    case = make_case(gen, B=3, h_q=8, h_kv=2, lens=(150, 1, 0), block_size=block_size, dtype=BF16)
    run_and_check(case)


def test_paged_block_ids_out_of_range_are_rejected(gen):
    case = make_case(gen, B=2, lens=(40, 20), block_size=16)
    case["block_table"][1, 0] = case["k_cache"].shape[0] + 5
    with pytest.raises(ValueError, match="block_table"):
        run_sim(case)


# ----------------------------------------------------------------------------- masks and bias


@pytest.mark.parametrize("mask,pse", [("full", None), ("bcast", None), (None, "full"), (None, "heads"),
                                      (None, "row"), ("full", "full")])
def test_mask_and_pse(gen, mask, pse):
    case = make_case(gen, B=2, s_q=2, h_q=4, h_kv=2, lens=(60, 9), mask=mask, pse=pse)
    run_and_check(case)


def test_mask_row_flag_and_causal_paged(gen):
    case = make_case(gen, B=2, s_q=3, h_q=4, h_kv=1, lens=(70, 30), mask="row", pse="full",
                     causal=True, block_size=32, dtype=BF16)
    run_and_check(case)


def test_fully_masked_rows_give_zero_and_inf_lse(gen):
    case = make_case(gen, B=1, s_q=1, h_q=4, h_kv=2, lens=(25,))
    case["atten_mask"] = torch.zeros(1, 4, 1, 25, dtype=torch.bool)
    case["atten_mask"][0, 1] = True
    out, lse = run_and_check(case)
    assert torch.isinf(lse[0, 1]).all() and (out[0, :, 1] == 0).all()


# ----------------------------------------------------------------------------- quantized caches


@pytest.mark.parametrize("dtype", [FP16, BF16])
@pytest.mark.parametrize("int8_offset", [True, False], ids=["asym", "sym"])
def test_int8_cache(gen, dtype, int8_offset):
    case = make_case(gen, B=2, h_q=8, h_kv=2, lens=(90, 1), dtype=dtype, kv=torch.int8,
                     int8_offsets="kv" if int8_offset else "")
    run_and_check(case)


@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_fp8_cache(gen, dtype):
    case = make_case(gen, B=2, h_q=8, h_kv=2, lens=(0, 120), dtype=dtype, kv=torch.float8_e4m3fn)
    run_and_check(case)


@pytest.mark.parametrize("kv", ["int8_asym", "int8_sym", "fp8", "same"])
def test_biased_q_short_requests(gen, kv):
    """q biased +2 in every channel (a large channel sum) on requests of 1 and 17 keys, whose lse
    is little more than the scores: the same cases as the CUDA kernels' (tests/incre_flash_attention/test_cuda.py,
    exact int8 keys)."""
    kv_dtype = {"int8_asym": torch.int8, "int8_sym": torch.int8, "fp8": torch.float8_e4m3fn, "same": None}[kv]
    case = make_case(gen, B=2, h_q=8, h_kv=2, d=128, lens=(1, 17), dtype=BF16, kv=kv_dtype,
                     int8_offsets="kv" if kv else "" != "int8_sym", q_bias=2.0)
    run_and_check(case)


def test_quantized_paged_causal(gen):
    case = make_case(gen, B=2, s_q=2, h_q=4, h_kv=2, lens=(100, 3), kv=torch.float8_e4m3fn,
                     block_size=64, causal=True, dtype=BF16)
    run_and_check(case)
    case = make_case(gen, B=2, s_q=2, h_q=4, h_kv=2, lens=(100, 3), kv=torch.int8,
                     block_size=32, causal=True, mask="bcast")
    run_and_check(case)


def test_e4m3_decode_table_is_exact():
    # Every finite e4m3 byte decodes bit-exactly (checked through the kernel: scale 1, one key,
    # p = 1, so out = v exactly when the value fits fp16).
    gen = torch.Generator().manual_seed(7)
    D = 64
    codes = torch.arange(256, dtype=torch.uint8)
    finite = codes[(codes & 0x7F) != 0x7F]
    vals = finite.view(torch.float8_e4m3fn)
    n = -(-vals.numel() // D)
    v = torch.zeros(n * D, dtype=torch.float8_e4m3fn)
    v[:vals.numel()] = vals
    v = v.view(n, 1, 1, D)                      # n requests, one key each
    k = torch.zeros_like(v)
    q = torch.randn(n, 1, 1, D, generator=gen).half()
    ones = torch.ones(1, D)
    out = run_sim(dict(q=q, k_cache=k, v_cache=v, kv_lens=torch.ones(n, dtype=torch.int32),
                       k_scale=ones, v_scale=ones), cores=2)[0]
    assert torch.equal(out.float().reshape(-1)[:vals.numel()], vals.float())


# ----------------------------------------------------------------------------- split-KV and plans

def test_planner_split_kv_long_request(gen):
    case = make_case(gen, B=1, h_q=4, h_kv=1, lens=(3000,), dtype=BF16)
    out, lse = run_and_check(case, cores=4)
    plan = ascend_sim.last_counters()["plan"]
    assert plan.num_splits > 1, plan.describe()


@pytest.mark.parametrize("kv_tile,num_splits,split_len,q_tile_rows",
                         [(32, 3, 64, None), (16, 5, 32, 3), (48, 2, 96, 5), (64, 1, 256, 2)])
def test_forced_plans_multi_tile_split_and_q_passes(gen, kv_tile, num_splits, split_len, q_tile_rows):
    # Several kv tiles per unit (online softmax across tiles, both workspace slots), empty splits
    # for the short requests, several q passes per unit.
    case = make_case(gen, B=3, s_q=2, h_q=6, h_kv=2, lens=(150, 1, 0), s_max=160, causal=True,
                     mask="full", pse="heads", dtype=BF16)
    plan = _forced_plan(case, kv_tile=kv_tile, num_splits=num_splits, split_len=split_len,
                        q_tile_rows=q_tile_rows)
    out, lse = _backend_call(case, plan)
    check(case, out, lse)


def test_forced_split_paged_quantized(gen):
    case = make_case(gen, B=2, h_q=8, h_kv=2, lens=(200, 65), block_size=32, kv=torch.int8)
    plan = _forced_plan(case, kv_tile=64, num_splits=2, split_len=128)
    check(case, *_backend_call(case, plan))
    case = make_case(gen, B=2, h_q=8, h_kv=2, lens=(200, 65), block_size=64, kv=torch.float8_e4m3fn)
    plan = _forced_plan(case, kv_tile=32, num_splits=3, split_len=96)
    check(case, *_backend_call(case, plan))


@pytest.mark.parametrize("whole_groups", [1, 3, 6])
def test_forced_plans_whole_groups_then_splits(gen, whole_groups):
    # The plan's first groups run whole (out / lse written by their unit), the rest split and
    # merged by the combine pass over the split groups only; empty and 1-key requests in both.
    case = make_case(gen, B=3, s_q=2, h_q=4, h_kv=2, lens=(150, 0, 1), s_max=160, causal=True, dtype=BF16)
    plan = _forced_plan(case, kv_tile=32, num_splits=3, split_len=64, whole_groups=whole_groups)
    check(case, *_backend_call(case, plan))
    case = make_case(gen, B=3, h_q=4, h_kv=2, lens=(1, 200, 65), block_size=32, kv=torch.int8)
    plan = _forced_plan(case, kv_tile=64, num_splits=2, split_len=128, whole_groups=whole_groups)
    check(case, *_backend_call(case, plan))


def test_plan_for_other_shapes_is_rejected(gen):
    case = make_case(gen, B=2, lens=(20, 10))
    other = make_case(gen, B=3, lens=(20, 10, 5))
    plan = _forced_plan(other, kv_tile=32, num_splits=1, split_len=32)
    with pytest.raises(ValueError, match="plan was made for batch=3"):
        _backend_call(case, plan)


# ----------------------------------------------------------------------------- full chips


@pytest.mark.parametrize("profile,cores", [("ascend910b2", 24), ("ascend910b3", 20)])
def test_full_core_count(gen, profile, cores):
    case = make_case(gen, B=3, h_q=16, h_kv=8, lens=(19, 0, 33), dtype=BF16)
    out, lse = run_and_check(case, cores=cores, profile=profile)
    rep = ascend_sim.last_counters()["report"]
    assert rep["num_blocks"] == cores and len(rep["cores"]) == 3 * cores


# ----------------------------------------------------------------------------- counters and cost model


def test_counters_and_estimate(gen):
    case = make_case(gen, B=2, h_q=8, h_kv=2, d=128, lens=(256, 100), dtype=BF16)
    run_and_check(case, cores=2)
    last = ascend_sim.last_counters()
    rep = last["report"]
    aic = [c for c in rep["cores"] if c["kind"] == "AIC"]
    aiv = [c for c in rep["cores"] if c["kind"] == "AIV"]
    assert len(aiv) == 2 * len(aic) == 4
    # Two matmuls per valid key and q row, padded to whole 16x16 fractals.
    useful = 2 * (256 + 100) * 4 * 128
    assert sum(c["cube_macs"] for c in aic) >= useful
    assert all(c["cube_macs"] == 0 for c in aiv) and all(c["vec_elem_ops"] == 0 for c in aic)
    regions = {r["name"]: r for r in rep["regions"]}
    kv_bytes = (256 + 100) * 128 * 2
    assert regions["k_cache"]["read"] >= kv_bytes and regions["v_cache"]["read"] >= kv_bytes
    assert regions["k_cache"]["write"] == 0 and regions["out"]["write"] == case["q"].numel() * 2
    est = ascend_sim.last_estimate()
    assert est["seconds"] > 0 and est["bound"] in ("cube", "vector", "mte", "hbm", "l2", "sync", "launch")
    assert est["profile"].startswith("ascend910b2") and est["assumptions"]


def test_estimate_entry_point_for_bench(gen):
    case = make_case(gen, B=2, h_q=8, h_kv=2, lens=(64, 64))
    res = ascend_sim.estimate("incre_flash_attention", case, profile="ascend910b4")
    assert res["seconds"] > 0 and res["profile"] == "ascend910b4"
    with pytest.raises(NotImplementedError):
        ascend_sim.estimate("no_such_op", {}, profile="ascend910b2")   # ops without an Ascend C kernel


def test_env_profile_override(monkeypatch):
    monkeypatch.setenv("DUALOPS_ASCEND_SIM_PROFILE", "ascend910b3")
    monkeypatch.setenv("DUALOPS_ASCEND_SIM_CORES", "3")
    p = ascend_sim.active_profile()
    assert p.num_cores == 3 and p.name.startswith("ascend910b3") and p.ub_bytes == 196608
    monkeypatch.setenv("DUALOPS_ASCEND_SIM_PROFILE", "h100")
    with pytest.raises(ValueError, match="Ascend"):
        ascend_sim.active_profile()


# ----------------------------------------------------------------------------- faults surface


def test_kernel_fault_surfaces_as_runtime_error(gen):
    """A q address outside every registered buffer: the sim stops the launch and raises, naming
    the kernel, the cube core that read it and the copy (with its call site)."""
    from dualops import native

    C = native.require()
    case = make_case(gen, B=1, h_q=2, h_kv=1, lens=(20,))
    plan = _forced_plan(case, kv_tile=32, num_splits=1, split_len=32, cores=1)
    k, v = case["k_cache"], case["v_cache"]
    out = torch.zeros(1, 1, 2, 64, dtype=FP16)
    lse = torch.zeros(1, 2, 1)
    params = schema.pack_params(
        "incre_flash_attention", q=0, k=0, v=0, out=0, lse=0, kv_lens=0, q_stride_b=128, q_stride_s=128,
        q_stride_h=64, k_stride_0=k.stride(0), k_stride_1=k.stride(1), k_stride_2=k.stride(2),
        v_stride_0=v.stride(0), v_stride_1=v.stride(1), v_stride_2=v.stride(2), out_stride_b=128,
        out_stride_s=128, out_stride_h=64, softmax_scale=0.125, q_dtype=1, kv_dtype=1)
    head = plan.pack().numpy().tobytes()
    ws = torch.zeros(C.ascend_ifa_workspace_bytes(head, 1, 1), dtype=torch.uint8)
    tt = torch.frombuffer(bytearray(head + params), dtype=torch.uint8)
    bufs = [(t.data_ptr(), t.numel() * t.element_size(), n) for n, t in
            (("k", k), ("v", v), ("out", out), ("lse", lse), ("kv_lens", case["kv_lens"]), ("ws", ws),
             ("tiling", tt))]
    args = [0x1000, k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), case["kv_lens"].data_ptr()]
    args += [0] * 9 + [ws.data_ptr(), tt.data_ptr()]
    with pytest.raises(RuntimeError, match=r"kernel 'incre_flash_attention' on AIC0 .*DataCopy\(GM->L1, Nd2NzParams\): "
                                           r"reads .* outside every buffer"):
        C.ascend_sim_launch("incre_flash_attention", 1, args, bufs, {})

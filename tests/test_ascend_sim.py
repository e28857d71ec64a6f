"""The AscendC simulator itself (backends/ascend/sim): each API piece through small self-test
kernels (backends/ascend/sim/tests/*.cpp), and each class of fault a kernel bug would cause on
the NPU -- reported naming the kernel, the core and the call, without hanging or crashing."""
from __future__ import annotations

import re
import time

import pytest
import torch

from dualops import ascend_cost_model, devices, native

C, _WHY = native.load()
pytestmark = pytest.mark.skipif(C is None or not hasattr(C, "ascend_sim_launch"),
                                reason=f"dualops._C with the Ascend simulator is not built: {_WHY}")


def regions(**tensors):
    return [(t.data_ptr(), t.numel() * t.element_size(), name) for name, t in tensors.items()]


def launch(kernel, blocks, args: dict, profile=None):
    """args: name -> tensor, in kernel-argument order; every one is also a GM buffer."""
    return C.ascend_sim_launch(kernel, blocks, [t.data_ptr() for t in args.values()], regions(**args),
                               profile or {})


def i32(*v):
    return torch.tensor(v, dtype=torch.int32)


def test_kernels_are_registered():
    names = C.ascend_sim_kernels()
    for k in ("incre_flash_attention", "sim_test_vector", "sim_test_cast", "sim_test_matmul",
              "sim_test_pipeline", "sim_test_faults", "sim_test_datacopy"):
        assert k in names


# ----------------------------------------------------------------------------- vector unit

VEC_OPS = {
    "add": (0, lambda x, y: x + y), "sub": (1, lambda x, y: x - y), "mul": (2, lambda x, y: x * y),
    "div": (3, lambda x, y: x / y), "max": (4, torch.maximum), "min": (5, torch.minimum),
    "adds": (6, lambda x, y: x + 2.5), "muls": (7, lambda x, y: x * -1.5), "exp": (8, lambda x, y: torch.exp(x)),
    "ln": (9, lambda x, y: torch.log(x)), "abs": (10, lambda x, y: x.abs()), "sqrt": (11, lambda x, y: x.sqrt()),
    "select_scalar": (14, lambda x, y: torch.where(x > 0, x, torch.full_like(x, -7.0))),
    "select_tensor": (15, lambda x, y: torch.where(x < y, x, y)),
    "duplicate": (16, lambda x, y: torch.full_like(x, 3.25)),
    "vec_index": (17, lambda x, y: torch.arange(x.numel(), dtype=torch.float32).view_as(x) % x.shape[1] + 0.5),
    "gather_reverse": (18, lambda x, y: x.flip(1)),
    "half_add": (19, lambda x, y: (x.half() + y.half()).float()),
    "reciprocal": (20, lambda x, y: 1 / x), "clamp": (21, lambda x, y: x.clamp(-1, 1)),
}


@pytest.mark.parametrize("name", sorted(VEC_OPS))
def test_vector_ops(gen, name):
    op, fn = VEC_OPS[name]
    blocks, n = 3, 128
    x = torch.randn(blocks, n, generator=gen)
    if name in ("ln", "sqrt", "reciprocal"):
        x = x.abs() + 0.1
    y = torch.randn(blocks, n, generator=gen).abs() + 0.5
    out = torch.full((blocks, n), float("nan"))
    rep = launch("sim_test_vector", blocks, dict(x=x, y=y, out=out, tiling=i32(op, n)))
    torch.testing.assert_close(out, fn(x, y), rtol=1e-6, atol=1e-6)
    assert [c["kind"] for c in rep["cores"]] == ["AIV"] * blocks   # AIV-only kernel: one thread per block
    assert all(c["vec_elem_ops"] >= n for c in rep["cores"])
    written = {r["name"]: r["write"] for r in rep["regions"]}
    assert written == {"x": 0, "y": 0, "out": out.numel() * 4, "tiling": 0}


@pytest.mark.parametrize("name,op", [("reduce_max", 12), ("reduce_sum", 13)])
def test_reductions(gen, name, op):
    x = torch.randn(2, 192, generator=gen)
    out = torch.zeros(2, 192)
    launch("sim_test_vector", 2, dict(x=x, y=x.clone(), out=out, tiling=i32(op, 192)))
    want = x.max(1).values if op == 12 else x.sum(1)
    torch.testing.assert_close(out[:, 0], want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- Cast

RINT, FLOOR, CEIL, ROUND, TRUNC, ODD, NONE = 1, 2, 3, 4, 5, 6, 0


def cast(kind, mode, x, out_dtype):
    out = torch.zeros(x.numel(), dtype=out_dtype)
    launch("sim_test_cast", 1, dict(x=x, out=out, tiling=i32(kind, mode, x.numel())))
    return out


def test_cast_float_to_half_rounding_modes():
    u = 2.0 ** -10   # fp16 ulp at 1
    x = torch.tensor([1 + u / 2, 1 + 3 * u / 2, -(1 + u / 2), 1 + u / 4, 70000.0, -70000.0, 2.0 ** -26, 0.0],
                     dtype=torch.float32)
    got = {m: cast(0, m, x, torch.float16).float() for m in (RINT, FLOOR, CEIL, ROUND, TRUNC, ODD)}
    inf = float("inf")
    assert got[RINT].tolist() == [1, 1 + 2 * u, -1, 1, inf, -inf, 0, 0]
    assert got[ROUND].tolist() == [1 + u, 1 + 2 * u, -(1 + u), 1, inf, -inf, 0, 0]
    assert got[FLOOR].tolist() == [1, 1 + u, -(1 + u), 1, 65504, -inf, 0, 0]
    assert got[CEIL].tolist() == [1 + u, 1 + 2 * u, -1, 1 + u, inf, -65504, 2.0 ** -24, 0]
    assert got[TRUNC].tolist() == [1, 1 + u, -1, 1, 65504, -65504, 0, 0]
    assert got[ODD].tolist() == [1 + u, 1 + u, -(1 + u), 1 + u, 65504, -65504, 2.0 ** -24, 0]


def test_cast_rint_matches_torch(gen):
    x = torch.randn(256, generator=gen) * 100
    assert torch.equal(cast(0, RINT, x, torch.float16), x.half())
    assert torch.equal(cast(1, RINT, x, torch.bfloat16), x.bfloat16())
    assert torch.equal(cast(2, RINT, x, torch.int32), torch.round(x).int())
    assert torch.equal(cast(2, FLOOR, x, torch.int32), torch.floor(x).int())
    assert torch.equal(cast(3, TRUNC, x, torch.float32), torch.trunc(x))
    i8 = torch.arange(-128, 128, dtype=torch.int8)
    assert torch.equal(cast(4, NONE, i8, torch.float16), i8.half())
    u8 = torch.arange(0, 256).to(torch.uint8)
    assert torch.equal(cast(5, NONE, u8, torch.float16), u8.half())
    big = torch.tensor([16777217, -3, 7], dtype=torch.int32)
    assert cast(6, RINT, big, torch.float32).tolist() == [16777216.0, -3.0, 7.0]
    h = torch.tensor([2.5, -2.5, 3.5, 1e4], dtype=torch.float16)
    assert cast(7, RINT, h, torch.int32).tolist() == [2, -2, 4, 10000]


def test_cast_pair_the_a2_vector_unit_lacks_is_a_fault():
    x = torch.randn(64)
    with pytest.raises(RuntimeError, match=r"Cast float -> half with RoundMode 0|Cast int32_t -> float"):
        cast(6, ODD, x.int(), torch.float32)


# ----------------------------------------------------------------------------- data movement


def test_strided_copies_and_padding(gen):
    rows, length, pitch = 5, 11, 19
    x = torch.randn(rows * pitch, generator=gen)
    out = torch.zeros(rows * length)
    padded = torch.zeros(rows * 16)
    launch("sim_test_datacopy", 1, dict(x=x, out=out, out_padded=padded, tiling=i32(rows, length, pitch)))
    src = x.view(rows, pitch)[:, :length]
    assert torch.equal(out.view(rows, length), src)
    p = padded.view(rows, 16)
    assert torch.equal(p[:, :length], src) and (p[:, length:] == -1).all()


# ----------------------------------------------------------------------------- cube


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b_is_nk", [1, 0], ids=["b_nk", "b_kn"])
@pytest.mark.parametrize("out_half", [0, 1], ids=["fp32_out", "cast_out"])
def test_matmul_nz_fractals(gen, dtype, b_is_nk, out_half):
    M, N, K, mt = 40, 48, 64, 16
    a = torch.randn(M, K, generator=gen).to(dtype)
    b = torch.randn(N, K, generator=gen).to(dtype) if b_is_nk else torch.randn(K, N, generator=gen).to(dtype)
    c = torch.zeros(M, N, dtype=dtype if out_half else torch.float32)
    code = 1 if dtype == torch.float16 else 2
    rep = launch("sim_test_matmul", 3, dict(a=a, b=b, c=c, tiling=i32(M, N, K, mt, code, b_is_nk, out_half)))
    want = a.float() @ (b.float().t() if b_is_nk else b.float())
    if out_half:
        assert torch.equal(c, want.to(dtype))   # fp32 accumulation, one rounding in FIXPIPE
    else:
        torch.testing.assert_close(c, want, rtol=1e-6, atol=1e-5)
    # Whole 16x16 fractals: 16 rows x 48 x 64 per block, on the cube cores only.
    assert [c_["cube_macs"] for c_ in rep["cores"]] == [16 * 48 * 64] * 3


def test_l0b_capacity_is_enforced(gen):
    a = torch.randn(16, 256, generator=gen).half()
    b = torch.randn(256, 256, generator=gen).half()   # B in L0B: 128 KB > 64 KB
    c = torch.zeros(16, 256)
    with pytest.raises(RuntimeError, match=r"sim_test_matmul.*AIC0.*TPipe::InitBuffer.*L0B.*65536"):
        launch("sim_test_matmul", 1, dict(a=a, b=b, c=c, tiling=i32(16, 256, 256, 16, 1, 1, 0)))


# ----------------------------------------------------------------------------- cross-core


def test_cube_vector_handoff_and_syncall(gen):
    blocks, rounds = 3, 5
    x = torch.randn(blocks, rounds, 16, 16, generator=gen).half()
    eye = torch.eye(16).half()
    out = torch.full((blocks, rounds, 16, 16), float("nan"))
    out2 = torch.full((blocks * 2, 16), float("nan"))
    ws = torch.full((blocks, 2, 16, 16), float("nan"))
    rep = launch("sim_test_pipeline", blocks, dict(x=x, eye=eye, out=out, out2=out2, ws=ws, tiling=i32(rounds)))
    want = x.float() + torch.arange(rounds).view(1, rounds, 1, 1)
    assert torch.equal(out, want)
    # After SyncAll each vector core read a row another AI core wrote.
    want2 = torch.stack([want[(b + 1) % blocks, 0].reshape(2, 128)[s, :16] for b in range(blocks) for s in range(2)])
    assert torch.equal(out2, want2)
    kinds = [c["kind"] for c in rep["cores"]]
    assert kinds == ["AIC"] * blocks + ["AIV"] * 2 * blocks
    assert all(c["cross_core_sets"] == rounds for c in rep["cores"])
    assert all(c["sync_alls"] == 1 for c in rep["cores"] if c["kind"] == "AIV")
    # More blocks than the chip's AI cores: SyncAll would wait forever for blocks not yet resident.
    with pytest.raises(RuntimeError, match=r"SyncAll: the launch has 3 blocks but .* has 2 AI cores"):
        launch("sim_test_pipeline", blocks, dict(x=x, eye=eye, out=out, out2=out2, ws=ws, tiling=i32(rounds)),
               {"ai_cores": 2})


# ----------------------------------------------------------------------------- faults

FAULTS = {
    "ub_over_allocation": (1, "AIV", r"TPipe::InitBuffer: TQue<VECIN> .* UB .*196608"),
    "misaligned_operand": (2, "AIV", r"Add: dst starts at byte 12 of UB, not 32-byte aligned"),
    "gm_read_out_of_bounds": (3, "AIV", r"DataCopy\(GM->local\): reads GM .* past the end of buffer 'buf'"),
    "unmatched_flag_wait": (4, "AIV0", r"CrossCoreWaitFlag: CrossCoreWaitFlag\(5\) can never be satisfied.*deadlock"),
    "deque_empty": (5, "AIV", r"TQue::DeQue: DeQue of an empty TQue<VECIN>"),
    "cube_op_on_vector_core": (6, "AIV", r"Mmad: runs only on the cube core \(AIC\)"),
    "vector_op_on_non_ub_tensor": (7, "AIC", r"Add: dst must be in UB, got a tensor in L1 \(A1\)"),
    "l1_queue_on_vector_core": (8, "AIV", r"TPipe::InitBuffer: TQue<A1> needs L1, which a vector core"),
    "double_free": (9, "AIV", r"TQue::FreeTensor: .*not allocated \(double free\?\)"),
    "unaligned_length": (10, "AIV", r"DataCopy\(GM->local\): count \* sizeof\(T\) is 28 bytes"),
    "l0a_over_allocation": (11, "AIC", r"TPipe::InitBuffer: TBuf<A2> .* L0A .*65536"),
    "unmatched_flag_set": (13, None, r"finished with cross-core flag 4 set 1 time\(s\) towards AIV0"),
    "loaddata_misaligned": (14, "AIC", r"LoadData\(2D\): dst starts at byte 256 of L0A, not 512-byte aligned"),
    "bf16_vector_arithmetic": (15, "AIV", r"Add: bfloat16_t has no vector arithmetic"),
    "syncall_missing_core": (16, "AIV", r"SyncAll: SyncAll<true> \(4 cores\) can never be satisfied"),
    "waitflag_without_setflag": (17, "AIV", r"WaitFlag<MTE2_V>: event id 0 was never set"),
    "two_tpipes": (18, "AIV", r"TPipe::TPipe: a TPipe is already live"),
    "bad_flag_id": (19, "AIC", r"CrossCoreSetFlag: flagId 11 is outside \[0, 10\]"),
    "queue_exhausted": (20, "AIV", r"TQue::AllocTensor: all 1 buffers .* in use"),
    "gm_write_out_of_bounds": (21, "AIV", r"DataCopy\(local->GM\): writes GM .* past the end of buffer 'buf'"),
}

# Missing pipe synchronisation (asynchronous pipes): each class names both pipes and both call sites.
_SITE = r"at backends/ascend/sim/tests/sim_test_faults\.cpp:\d+"
SYNC_FAULTS = {
    "mte2_to_mte1": (22, "AIC", rf"LoadData\(2D\): unsynchronized pipes: PIPE_MTE1 \(LoadData\(2D\) {_SITE}\) reads L1 "
                                rf".* PIPE_MTE2 \(DataCopy\(GM->local\) {_SITE}\) may still be writing .*MTE2_MTE1"),
    "mte1_to_mte2": (23, "AIC", rf"PIPE_MTE2 \(DataCopy\(GM->local\) {_SITE}\) writes L1 .* PIPE_MTE1 \(LoadData\(2D\) "
                                rf"{_SITE}\) may still be reading .*MTE1_MTE2"),
    "v_to_mte3": (24, "AIV", rf"PIPE_MTE3 \(DataCopy\(local->GM\) {_SITE}\) reads UB .* PIPE_V \(Duplicate {_SITE}\) "
                             rf"may still be writing .*V_MTE3"),
    "mte3_to_mte2": (25, "AIV", rf"PIPE_MTE2 \(DataCopy\(GM->local\) {_SITE}\) writes UB .* PIPE_MTE3 "
                                rf"\(DataCopy\(local->GM\) {_SITE}\) may still be reading .*MTE3_MTE2"),
    "v_to_v_without_barrier": (26, "AIV", rf"PIPE_V \(Muls {_SITE}\) reads UB .* PIPE_V \(Adds {_SITE}\) .*"
                                          rf"PipeBarrier<PIPE_V>"),
    "fix_to_v_across_cores": (27, "AIV", rf"unsynchronized GM access: PIPE_MTE2 \(DataCopy\(GM->local\) {_SITE}\) reads "
                                         rf"GM .* PIPE_FIX of AIC\d+ \(Fixpipe\(L0C->GM\) {_SITE}\) may still be writing"),
    "s_to_v": (29, "AIV", rf"PIPE_V \(Adds {_SITE}\) reads UB .* PIPE_S \(LocalTensor::SetValue {_SITE}\) .*S_V"),
}
FAULTS.update(SYNC_FAULTS)


def test_cross_core_flag_on_the_writing_pipe_is_clean():
    launch("sim_test_faults", 2, dict(buf=torch.zeros(256), tiling=i32(28)))


def test_cross_core_round_trip_orders_the_setters_own_pipes():
    # AIV: MTE3 reads UB, flag (on MTE3) to the AIC, flag back: V may then rewrite that UB.
    launch("sim_test_faults", 2, dict(buf=torch.zeros(256), tiling=i32(30)))


def test_parity_runs_use_the_strict_pipe_model():
    from dualops.backends.ascend_sim import _common
    assert _common.launch_profile(devices.profile(devices.DEFAULT_SIM_PROFILE))["pipe_sync"] == "strict"


@pytest.mark.parametrize("name", sorted(SYNC_FAULTS))
def test_missing_sync_passes_with_pipe_checks_off(name):
    """The same kernels run in program order when the checks are off: only the model catches them."""
    launch("sim_test_faults", 2, dict(buf=torch.zeros(256), tiling=i32(SYNC_FAULTS[name][0])),
           {"pipe_sync": "off"})


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_is_reported_with_kernel_core_and_call(name):
    case, core, pattern = FAULTS[name]
    buf = torch.zeros(256)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        launch("sim_test_faults", 2, dict(buf=buf, tiling=i32(case)), {"timeout_s": 20})
    msg = str(err.value)
    assert "kernel 'sim_test_faults'" in msg
    if core is not None:
        assert re.search(rf"on {core}\d* \(", msg) or f"on {core} (" in msg, msg
    assert re.search(pattern, msg), msg
    assert time.monotonic() - t0 < 10, "a fault must stop the launch promptly (no timeout wait)"
    # The simulator is left clean: the same kernel runs fine afterwards.
    launch("sim_test_faults", 2, dict(buf=buf, tiling=i32(0)))


def test_blocked_wait_times_out_instead_of_hanging():
    buf = torch.zeros(256)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"on AIV\d .*CrossCoreWaitFlag\(3\) timed out after 0.3 s"):
        launch("sim_test_faults", 2, dict(buf=buf, tiling=i32(12)), {"timeout_s": 0.3})
    assert time.monotonic() - t0 < 5


def test_launch_argument_errors():
    buf = torch.zeros(256)
    t = i32(0)
    with pytest.raises(ValueError, match="no kernel named 'nope'"):
        C.ascend_sim_launch("nope", 1, [], [], {})
    with pytest.raises(ValueError, match="takes 2 GM_ADDR arguments, got 1"):
        C.ascend_sim_launch("sim_test_faults", 1, [buf.data_ptr()], regions(buf=buf), {})
    with pytest.raises(ValueError, match="num_blocks must be in"):
        C.ascend_sim_launch("sim_test_faults", 0, [buf.data_ptr(), t.data_ptr()], regions(buf=buf, t=t), {})
    with pytest.raises(ValueError, match="overlap"):
        C.ascend_sim_launch("sim_test_faults", 1, [buf.data_ptr(), t.data_ptr()],
                            regions(buf=buf, t=t) + [(buf.data_ptr() + 8, 16, "inner")], {})
    with pytest.raises(ValueError, match="positive byte count"):
        launch("sim_test_faults", 1, dict(buf=buf, tiling=t), {"ub_bytes": -1})


def test_profile_capacities_are_the_ones_enforced():
    buf = torch.zeros(256)
    # A 64 KB UB (smaller than the A2's) makes a 2 x 32 KB + 1 KB allocation fail.
    small = {"name": "tiny", "ub_bytes": 64 * 1024}
    launch("sim_test_faults", 1, dict(buf=buf, tiling=i32(0)), small)
    x = torch.randn(1, 16384)
    with pytest.raises(RuntimeError, match=r"UB of this core holds 65536 B \(tiny\)"):
        launch("sim_test_vector", 1, dict(x=x, y=x.clone(), out=x.clone(), tiling=i32(0, 16384)), small)


# ----------------------------------------------------------------------------- cost model


def test_cost_model_bounds_and_assumptions(gen):
    prof = devices.with_cores(devices.profile("ascend910b2"), 3)
    a = torch.randn(48, 128, generator=gen).half()
    b = torch.randn(128, 128, generator=gen).half()
    c = torch.zeros(48, 128)
    rep = launch("sim_test_matmul", 3, dict(a=a, b=b, c=c, tiling=i32(48, 128, 128, 16, 1, 1, 0)))
    est = ascend_cost_model.estimate(rep, prof)
    cube_s = 16 * 128 * 128 / (4096 * prof.clock_ghz * 1e9)
    assert est.terms["cube_s"] == pytest.approx(cube_s)
    assert est.seconds >= ascend_cost_model.LAUNCH_OVERHEAD_S + cube_s
    assert est.bound in ("cube", "vector", "mte", "hbm", "l2", "sync", "launch")
    d = est.as_dict()
    assert d["label"].startswith("estimate") and len(d["assumptions"]) >= 5
    with pytest.raises(TypeError, match="Ascend DeviceProfile"):
        ascend_cost_model.estimate(rep, devices.profile("h100"))


def test_hardware_like_vector_numerics(gen):
    """vec_ulp = n: Exp / Ln / Div leave fp32 libm's value by a deterministic error of at most n ulp."""
    x = torch.randn(3, 128, generator=gen)
    y = torch.randn(3, 128, generator=gen).abs() + 0.5
    for name in ("exp", "div"):
        op, fn = VEC_OPS[name]
        outs = []
        for ulp in (0, 4, 4):
            out = torch.full((3, 128), float("nan"))
            launch("sim_test_vector", 3, dict(x=x, y=y, out=out, tiling=i32(op, 128)), {"vec_ulp": ulp})
            outs.append(out)
        exact, hw, again = outs
        assert torch.equal(hw, again), "the error is deterministic"
        assert not torch.equal(hw, exact)
        ulps = (hw.view(torch.int32) - exact.view(torch.int32)).abs()
        assert int(ulps.max()) <= 4

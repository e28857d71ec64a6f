"""The simulator's worst-order modes (pipe_sync "worst" / "worst_unchecked", docs/ascend_sim.md
"Modes"): every pipe's work is deferred and run in the legal order most likely to expose a missing
synchronization. A kernel with every sync computes exactly what it computes in program order; one
missing sync faults ("worst", like "strict") or computes a wrong result, the same on every run
("worst_unchecked"). The Ascend kernels' parity holds in worst order (a few cases per op here;
the whole suite with DUALOPS_ASCEND_SIM_PIPE_SYNC=worst)."""
from __future__ import annotations

import pytest
import torch

from dualops import devices, native

C, _WHY = native.load()
pytestmark = pytest.mark.skipif(C is None or not hasattr(C, "ascend_sim_launch"),
                                reason=f"dualops._C with the Ascend simulator is not built: {_WHY}")

MODES = ("off", "strict", "worst", "worst_unchecked")

# sim_test_races: the synchronization each case leaves out (backends/ascend/sim/tests/sim_test_races.cpp).
DROPS = {
    "mte2_to_mte1": 1, "mte1_to_mte2_war": 2, "mte1_to_m": 3, "m_to_mte1_war": 4, "m_to_fix": 5,
    "fix_to_m_war": 6, "cross_core_flag_on_wrong_pipe": 7, "mte2_to_v": 8, "v_to_mte2_war": 9,
    "v_to_v_barrier": 10, "v_to_mte3": 11, "mte3_to_v_war": 12, "s_to_v": 13, "v_to_s": 14,
}


def _launch(kernel, blocks, args: dict, profile: dict):
    C.ascend_sim_launch(kernel, blocks, [t.data_ptr() for t in args.values()],
                        [(t.data_ptr(), t.numel() * t.element_size(), n) for n, t in args.items()], profile)


def races(mode: str, drop: int, blocks: int = 2, rounds: int = 2, seed: int = 5):
    """Runs sim_test_races; returns (out, out3) and what they must be."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(blocks, rounds, 16, 16, generator=g).half()
    out = torch.full((blocks, rounds, 256), -7.0)
    out3 = torch.full((blocks * 2,), -7.0)
    ws = torch.full((blocks, rounds, 256), -5.0)
    args = dict(x=x, eye=torch.eye(16).half(), out=out, out3=out3, ws=ws,
                tiling=torch.tensor([rounds, drop], dtype=torch.int32))
    _launch("sim_test_races", blocks, args, {"pipe_sync": mode})
    want = 2 * (x.float().reshape(blocks, rounds, 256) + torch.arange(rounds).view(1, rounds, 1))
    want3 = want[:, rounds - 1, ::128].reshape(-1)
    return (out, out3), (want, want3)


def _same(a, b) -> bool:
    return all(torch.equal(x.nan_to_num(1e30), y.nan_to_num(1e30)) for x, y in zip(a, b))


@pytest.mark.parametrize("mode", MODES)
def test_every_sync_present_is_exact_in_every_mode(mode):
    got, want = races(mode, 0)
    assert _same(got, want)


@pytest.mark.parametrize("name", sorted(DROPS))
def test_missing_sync_faults_in_worst_mode(name):
    with pytest.raises(RuntimeError, match=r"kernel 'sim_test_races' on (AIC|AIV)\d.*unsynchronized"):
        races("worst", DROPS[name])


@pytest.mark.parametrize("name", sorted(DROPS))
def test_missing_sync_computes_a_wrong_result_in_worst_order(name):
    """Program order hides the bug; the worst legal order shows it, deterministically."""
    got_off, want = races("off", DROPS[name])
    assert _same(got_off, want)
    got, _ = races("worst_unchecked", DROPS[name])
    assert not _same(got, want)
    for seed_run in range(2):
        again, _ = races("worst_unchecked", DROPS[name])
        assert _same(again, got), "the worst order must give the same wrong result on every run"


# The planted-fault kernel's missing-sync cases fault in worst mode as in strict mode.
PLANTED = {"mte2_to_mte1": 22, "mte1_to_mte2": 23, "v_to_mte3": 24, "mte3_to_mte2": 25,
           "v_to_v_without_barrier": 26, "fix_to_v_across_cores": 27, "s_to_v": 29}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_faults_in_worst_mode(name):
    buf = torch.zeros(256)
    with pytest.raises(RuntimeError, match=r"unsynchronized"):
        _launch("sim_test_faults", 2, dict(buf=buf, tiling=torch.tensor([PLANTED[name]], dtype=torch.int32)),
                {"pipe_sync": "worst", "timeout_s": 20})


@pytest.mark.parametrize("case", [28, 30])
@pytest.mark.parametrize("mode", ["worst", "worst_unchecked"])
def test_planted_clean_cases_in_worst_modes(mode, case):
    _launch("sim_test_faults", 2, dict(buf=torch.zeros(256), tiling=torch.tensor([case], dtype=torch.int32)),
            {"pipe_sync": mode})


@pytest.mark.parametrize("mode", ["worst", "worst_unchecked"])
def test_queues_cross_core_flags_and_syncall_in_worst_order(gen, mode):
    blocks, rounds = 3, 5
    x = torch.randn(blocks, rounds, 16, 16, generator=gen).half()
    out = torch.full((blocks, rounds, 16, 16), float("nan"))
    out2 = torch.full((blocks * 2, 16), float("nan"))
    ws = torch.full((blocks, 2, 16, 16), float("nan"))
    args = dict(x=x, eye=torch.eye(16).half(), out=out, out2=out2, ws=ws, tiling=torch.tensor([rounds], dtype=torch.int32))
    _launch("sim_test_pipeline", blocks, args, {"pipe_sync": mode})
    want = x.float() + torch.arange(rounds).view(1, rounds, 1, 1)
    assert torch.equal(out, want)
    want2 = torch.stack([want[(b + 1) % blocks, 0].reshape(2, 128)[s, :16] for b in range(blocks) for s in range(2)])
    assert torch.equal(out2, want2)


def test_mode_names_are_checked():
    with pytest.raises(ValueError, match=r"'strict', 'worst', 'worst_unchecked' or 'off'"):
        _launch("sim_test_faults", 1, dict(buf=torch.zeros(256), tiling=torch.tensor([0], dtype=torch.int32)),
                {"pipe_sync": "fast"})


def test_env_selects_the_mode(monkeypatch):
    from dualops.backends.ascend_sim import _common
    p = devices.profile(devices.DEFAULT_SIM_PROFILE)
    for mode in MODES:
        monkeypatch.setenv("DUALOPS_ASCEND_SIM_PIPE_SYNC", mode)
        assert _common.launch_profile(p)["pipe_sync"] == mode
    monkeypatch.setenv("DUALOPS_ASCEND_SIM_PIPE_SYNC", "fast")
    with pytest.raises(ValueError, match="DUALOPS_ASCEND_SIM_PIPE_SYNC"):
        _common.launch_profile(p)


# A representative slice of each op's parity (paged / split-KV / causal IFA, dense and sparse
# MLA, plain and quantized grouped GEMM), in worst order with the checks on.
PARITY = {
    "incre_flash_attention": ["paged16_gqa4_d128_bf16", "paged32_causal_sq3_gqa2_d128", "paged16_long_b1_gqa8_d128"],
    "mla_decode": ["dense_causal_sq2_h8", "sparse_fp8_v32_extra"],
    "grouped_gemm": ["contig_bf16_g4_empty", "masked_fp8_blockwise_g2"],
}


@pytest.mark.parametrize("op", sorted(PARITY))
def test_parity_in_worst_order(monkeypatch, op):
    from dualops import parity

    monkeypatch.setenv("DUALOPS_ASCEND_SIM_PIPE_SYNC", "worst")
    monkeypatch.setenv("DUALOPS_ASCEND_SIM_CORES", "4")
    run = parity.run(ops=[op], backends=["ascend_sim"], seed=11, case_names=PARITY[op])
    rows = [r for r in run.results if r.backend == "ascend_sim"]
    assert len(rows) >= len(PARITY[op])
    assert not run.failures, [(r.case, r.status, r.reason) for r in run.failures]


@pytest.mark.parametrize("mode", ["strict", "worst"])
def test_full_parity_in_strict_and_worst_order(monkeypatch, mode):
    """Every parity case the Ascend kernels support (python -m dualops parity --full), on 4 cores,
    with the hazard checks on: in program issue order with checks (strict) and executed in the
    worst legal order (worst)."""
    from dualops import parity

    monkeypatch.setenv("DUALOPS_ASCEND_SIM_PIPE_SYNC", mode)
    monkeypatch.setenv("DUALOPS_ASCEND_SIM_CORES", "4")
    run = parity.run(backends=["ascend_sim"], full=True, seed=5)
    rows = [r for r in run.results if r.backend == "ascend_sim"]
    assert len({r.case for r in rows}) >= 40, len(rows)
    assert not run.failures, [(r.case, r.status, r.reason) for r in run.failures]


def _fault_api(case: int, mode: str) -> str:
    buf = torch.zeros(256)
    with pytest.raises(RuntimeError) as err:
        _launch("sim_test_faults", 2, dict(buf=buf, tiling=torch.tensor([case], dtype=torch.int32)),
                {"pipe_sync": mode, "timeout_s": 20})
    msg = str(err.value)
    assert "kernel 'sim_test_faults'" in msg
    head = msg.split("): ", 1)[-1]
    return head.split(":", 1)[0]


@pytest.mark.parametrize("case", [c for c in range(1, 28) if c not in (12,)] + [29])
def test_every_planted_fault_is_reported_alike_in_worst_mode(case):
    """Deferred execution changes no check: the same call faults as in strict mode."""
    assert _fault_api(case, "worst") == _fault_api(case, "strict")

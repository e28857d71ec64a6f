import dataclasses
from types import SimpleNamespace

import pytest
import torch

from dualops import devices
from dualops.devices import (ASCEND_910B2, ASCEND_910B3, ASCEND_910B4, H100, H200, PROFILES,
                             DeviceProfile, detect, from_cuda_properties, profile, with_cores)


def test_profiles_hold_the_reference_facts():
    assert set(PROFILES) == {"h100", "h200", "ascend910b2", "ascend910b3", "ascend910b4"}
    for p in (H100, H200):
        assert p.kind == "cuda" and p.num_cores == 132 and p.num_vector_cores == 132
        assert p.smem_per_core_bytes == 227 * 1024
        assert p.ub_bytes == p.l1_bytes == 0
    assert (H200.measured_copy_gbs, H200.measured_matmul_tflops) == (4250.0, 699.0)
    assert (H100.measured_copy_gbs, H100.measured_matmul_tflops) == (3000.0, 798.0)
    assert H200.bandwidth_gbs == 4250.0
    for p, cores in ((ASCEND_910B2, 24), (ASCEND_910B3, 20), (ASCEND_910B4, 20)):
        assert p.kind == "ascend" and p.num_cores == cores and p.num_vector_cores == 2 * cores
        assert (p.ub_bytes, p.l1_bytes, p.l0a_bytes, p.l0b_bytes, p.l0c_bytes) == (
            196608, 524288, 65536, 65536, 131072)
        assert (p.ub_align_bytes, p.l1_align_bytes, p.l0ab_align_bytes, p.l0c_align_bytes) == (
            32, 32, 512, 64)
        assert p.vector_repeat_bytes == 256 and p.cube_fractal == 16
        expect = 2 * cores * 4096 * p.clock_ghz * 1e9 / 1e12
        assert p.peak_fp16_tflops == pytest.approx(expect)
        # Ascend throughput figures are not published in our sources: flagged as assumptions.
        assert {"peak_fp16_tflops", "hbm_bandwidth_gbs", "clock_ghz"} <= set(p.assumptions)
    assert ASCEND_910B2.peak_fp16_tflops == pytest.approx(353.9, abs=0.1)


def test_profile_lookup_and_errors():
    assert profile("H200") is H200
    assert profile(" ascend910B2 ") is ASCEND_910B2
    assert profile("910b3") is ASCEND_910B3
    with pytest.raises(ValueError, match="unknown device profile 'a100'"):
        profile("a100")
    with pytest.raises(TypeError, match="profile name"):
        profile(3)


def test_profiles_are_frozen_and_hashable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        H200.num_cores = 1
    assert len({H100, H200, H200, ASCEND_910B2}) == 3
    assert hash(dataclasses.replace(H200)) == hash(H200)
    with pytest.raises(ValueError, match="kind"):
        dataclasses.replace(H200, kind="tpu")


def test_with_cores_keeps_per_core_capacities():
    p = with_cores(ASCEND_910B2, 2)
    assert p.num_cores == 2 and p.num_vector_cores == 4
    assert p.ub_bytes == ASCEND_910B2.ub_bytes and p.l1_bytes == ASCEND_910B2.l1_bytes
    assert p.peak_fp16_tflops == pytest.approx(ASCEND_910B2.peak_fp16_tflops / 12)
    assert p != ASCEND_910B2 and "2" in p.name
    assert with_cores(H100, 132) is H100
    assert with_cores(H100, 4).num_vector_cores == 4
    with pytest.raises(ValueError, match="n must be in"):
        with_cores(ASCEND_910B2, 25)
    with pytest.raises(ValueError, match="n must be in"):
        with_cores(ASCEND_910B2, 0)
    with pytest.raises(TypeError, match="n must be an int"):
        with_cores(ASCEND_910B2, 2.0)


def test_detect_cpu_sim_npu_and_names():
    assert detect(None).name == devices.DEFAULT_CPU_PROFILE
    assert detect("cpu") is profile(devices.DEFAULT_CPU_PROFILE)
    assert detect(torch.device("cpu")) is profile(devices.DEFAULT_CPU_PROFILE)
    assert detect(torch.zeros(1)) is profile(devices.DEFAULT_CPU_PROFILE)
    assert detect("ascend_sim") is profile(devices.DEFAULT_SIM_PROFILE)
    assert detect("npu") is ASCEND_910B2          # torch_npu absent: not a torch device type here
    assert detect("npu:1") is ASCEND_910B2
    assert detect(torch.device("privateuseone")) is ASCEND_910B2
    assert detect("h100") is H100
    assert detect(H200) is H200
    with pytest.raises(TypeError, match="detect: device"):
        detect(3)


def test_detect_cuda_without_or_with_a_gpu():
    if torch.cuda.is_available():
        p = detect(torch.device("cuda"))
        assert p.kind == "cuda"
        assert p.num_cores == torch.cuda.get_device_properties(0).multi_processor_count
    else:
        with pytest.raises(ValueError, match="not available"):
            detect("cuda:0")


def _props(name, sms, **kw):
    base = dict(name=name, multi_processor_count=sms, total_memory=80 * 2**30,
                L2_cache_size=50 * 2**20, clock_rate=1_755_000, memory_clock_rate=1_593_000,
                memory_bus_width=5120, shared_memory_per_block=48 * 1024,
                shared_memory_per_multiprocessor=228 * 1024)
    base.update(kw)
    return SimpleNamespace(**base)


def test_from_cuda_properties_known_and_generic():
    assert from_cuda_properties(_props("NVIDIA H200", 132)) is H200
    assert from_cuda_properties(_props("NVIDIA H100 80GB HBM3", 132)) is H100
    pcie = from_cuda_properties(_props("NVIDIA H100 PCIe", 114))   # 114 SMs: not the SXM profile
    assert pcie.kind == "cuda" and pcie.num_cores == 114 and pcie.num_vector_cores == 114
    assert pcie.smem_per_core_bytes == 227 * 1024
    assert pcie.clock_ghz == pytest.approx(1.755)
    assert pcie.hbm_bandwidth_gbs == pytest.approx(2 * 1_593_000e3 * 5120 / 8 / 1e9)
    assert "peak_bf16_tflops" in pcie.assumptions and "hbm_bandwidth_gbs" not in pcie.assumptions
    bare = from_cuda_properties(SimpleNamespace(name="X", multi_processor_count=8))
    assert bare.num_cores == 8 and {"clock_ghz", "hbm_bandwidth_gbs", "smem_per_core_bytes"} <= set(
        bare.assumptions)
    with pytest.raises(ValueError, match="SMs"):
        from_cuda_properties(SimpleNamespace(name="X", multi_processor_count=0))


def test_detect_cuda_reads_device_properties(monkeypatch):
    from dualops import devices

    # detect() reads a GPU's properties once per device index; clear that cache around the fakes.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: _props("NVIDIA H200", 132))
    devices._cuda_profile.cache_clear()
    assert detect(torch.device("cuda", 0)) is H200
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: _props("NVIDIA L40S", 142))
    devices._cuda_profile.cache_clear()
    p = detect("cuda:0")
    devices._cuda_profile.cache_clear()
    assert isinstance(p, DeviceProfile) and p.num_cores == 142 and "L40S" in p.name


def test_describe_mentions_assumptions():
    assert "assumed" in ASCEND_910B4.describe() and "20 AIC / 40 AIV" in ASCEND_910B4.describe()
    assert "132 SMs" in H200.describe() and "assumed" not in H200.describe()

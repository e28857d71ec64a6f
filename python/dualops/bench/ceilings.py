"""The ceilings the bench reports percentages of.

On CUDA they are measured first, in the same run (BENCHMARKS.md, "Method"): a device-to-device
copy (bytes read + written) and a bf16 8192³ matmul. For the Ascend simulator's estimates they
are the 910B profile's figures, which are assumptions (devices.py lists them as such). On the
CPU there are none: the reference's timings are for orientation, not efficiency."""
from __future__ import annotations

import torch


def probe_cuda(*, matmul_n: int = 8192, runs: int = 20) -> dict:
    from . import timing

    copy = timing.copy_bandwidth_gbs(runs=runs)
    a = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    t = timing.time_cuda(lambda i: torch.mm(a, b), 1, runs=runs, graph=False)
    del a, b
    torch.cuda.empty_cache()
    tflops = 2.0 * matmul_n ** 3 / (t.median_us * 1e-6) / 1e12
    return {"bandwidth_gbs": copy["gbs"], "tflops": tflops,
            "source": f"measured on {torch.cuda.get_device_name()}: device copy "
                      f"{copy['gbs']:.0f} GB/s (read + write), bf16 {matmul_n}³ matmul {tflops:.0f} TFLOPS"}


def from_profile(name: str) -> dict:
    from .. import devices

    p = devices.profile(name)
    assumed = {"hbm_bandwidth_gbs", "peak_bf16_tflops"} & set(p.assumptions)
    label = "assumed" if assumed else "datasheet"
    return {"bandwidth_gbs": p.bandwidth_gbs, "tflops": p.peak_bf16_tflops,
            "source": f"{p.name} profile ({label}): HBM {p.bandwidth_gbs:.0f} GB/s, "
                      f"bf16 peak {p.peak_bf16_tflops:.0f} TFLOPS"}


def for_device(device_type: str, *, probe: bool = True) -> dict | None:
    """Ceilings of the device an implementation runs on (None on the CPU)."""
    if device_type == "cuda":
        if probe:
            return probe_cuda()
        from .. import devices

        p = devices.detect(torch.device("cuda"))
        return {"bandwidth_gbs": p.bandwidth_gbs, "tflops": p.measured_matmul_tflops or p.peak_bf16_tflops,
                "source": f"{p.name} profile (not probed: --no-probe)"}
    if device_type == "npu":
        from .. import devices

        return from_profile(devices.DEFAULT_NPU_PROFILE)
    return None

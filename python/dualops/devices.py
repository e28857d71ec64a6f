"""Device profiles: the facts about a machine that the tiling planners need.

A profile is a frozen (hashable) dataclass, so planners can be cached on it. Figures come
from vendor datasheets (Hopper), from CANN's documentation (Ascend buffer sizes), from our
measurements (BENCHMARKS.md)
or are assumptions; every profile lists the fields that are assumptions in `assumptions`,
so tools that print them (``python -m dualops info``) can say so.
"""

from __future__ import annotations

import functools

import dataclasses
from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

@dataclass(frozen=True)
class IfaCudaRules:
    """Device thresholds of the CUDA IFA launch choices (python/dualops/heuristics/cuda.py;
    docs/tuning.md). GPUs with little DRAM bandwidth per SM (the H100: 25 GB/s per SM) keep
    more bytes in flight per SM (lockstep pipeline, L2 prefetches); GPUs with more (the H200:
    36 GB/s per SM) lose with those and run more, shorter narrow CTAs instead.
    Key counts of 0 mean "never"."""

    narrow_max_unit_bytes_16bit: int   # many short units of a 16-bit cache, D <= 128, run narrow
    narrow_max_unit_bytes_8bit: int    # ... of an 8-bit cache
    narrow_prefetch: bool              # narrow 8-bit grids prefetch their first fill into L2
    second_fill_keys: int              # splits of >= this many keys prefetch their second fill
    lockstep_keys: int                 # multi-wave units of >= this many keys run lockstep
    lockstep_keys_one_wave: int        # single-wave grids, 16-bit caches
    lockstep_keys_one_wave_8bit: int   # single-wave grids, 8-bit caches
    wide_prefetch_min_keys_int8: int   # single-wave wide 8-bit units in [min, max] prefetch
    wide_prefetch_min_keys_fp8: int
    wide_prefetch_max_keys: int        # 0: no upper bound


# Where the rule sets change: DRAM bandwidth per SM (GB/s).
IFA_FAST_DRAM_GBPS_PER_SM = 30.0


def ifa_cuda_rules(dram_gbps_per_sm: float) -> IfaCudaRules:
    """The CUDA IFA thresholds of a GPU with this much DRAM bandwidth per SM."""
    if dram_gbps_per_sm >= IFA_FAST_DRAM_GBPS_PER_SM:  # the H200
        return IfaCudaRules(
            narrow_max_unit_bytes_16bit=1 * MIB, narrow_max_unit_bytes_8bit=2 * MIB, narrow_prefetch=False,
            second_fill_keys=0, lockstep_keys=0, lockstep_keys_one_wave=0, lockstep_keys_one_wave_8bit=0,
            wide_prefetch_min_keys_int8=4096, wide_prefetch_min_keys_fp8=2048, wide_prefetch_max_keys=16384)
    return IfaCudaRules(  # the H100
        narrow_max_unit_bytes_16bit=0, narrow_max_unit_bytes_8bit=256 * KIB, narrow_prefetch=True,
        second_fill_keys=4096, lockstep_keys=2048, lockstep_keys_one_wave=1024, lockstep_keys_one_wave_8bit=4096,
        wide_prefetch_min_keys_int8=1024, wide_prefetch_min_keys_fp8=1024, wide_prefetch_max_keys=0)


# One Ascend cube core does a 16x16x16 fp16 MAC fractal per cycle: 4096 MACs.
ASCEND_CUBE_MACS_PER_CYCLE = 4096


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    kind: str                      # "cuda" | "ascend"
    num_cores: int                 # CUDA: SMs. Ascend: AI cores (= cube cores, AIC)
    num_vector_cores: int          # Ascend: vector cores (AIV, 2 per AI core). CUDA: = SMs
    clock_ghz: float
    hbm_bytes: int
    hbm_bandwidth_gbs: float       # spec / assumed peak, GB/s (1e9 B/s)
    l2_bytes: int
    smem_per_core_bytes: int       # CUDA: opt-in shared memory per block. Ascend: 0 (see ub/l1)
    peak_fp16_tflops: float        # dense, no sparsity
    peak_bf16_tflops: float
    # Ascend on-chip buffers per core (0 on CUDA).
    ub_bytes: int = 0              # unified buffer, per vector core
    l1_bytes: int = 0
    l0a_bytes: int = 0
    l0b_bytes: int = 0
    l0c_bytes: int = 0
    # Alignment rules (bytes). Ascend: UB/L1 32, L0A/L0B 512, L0C 64; GM DataCopy 32.
    # CUDA: TMA wants 16-B aligned global addresses and 128-B aligned swizzled smem.
    gm_align_bytes: int = 16
    smem_align_bytes: int = 128    # CUDA shared memory (swizzle atom); Ascend: = ub_align
    ub_align_bytes: int = 0
    l1_align_bytes: int = 0
    l0ab_align_bytes: int = 0
    l0c_align_bytes: int = 0
    cube_fractal: int = 16         # matrix-unit granule along M/N/K (fp16)
    vector_repeat_bytes: int = 0   # Ascend vector instruction repeat width
    # Our own measurements (BENCHMARKS.md, "Method": copy and matmul probes); 0.0 = not measured.
    measured_copy_gbs: float = 0.0       # device-to-device copy, read + write
    measured_matmul_tflops: float = 0.0  # bf16 8192^3 torch matmul
    assumptions: tuple[str, ...] = ()    # names of fields that are assumptions, not facts
    ifa_cuda: IfaCudaRules | None = None  # CUDA IFA launch thresholds (None on Ascend)

    def __post_init__(self):
        if self.kind not in ("cuda", "ascend"):
            raise ValueError(f"DeviceProfile.kind must be 'cuda' or 'ascend', got {self.kind!r}")
        if self.num_cores < 1:
            raise ValueError(f"DeviceProfile.num_cores must be >= 1, got {self.num_cores}")

    @property
    def is_ascend(self) -> bool:
        return self.kind == "ascend"

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def bandwidth_gbs(self) -> float:
        """Best figure for achievable HBM bandwidth: measured copy when we have one."""
        return self.measured_copy_gbs or self.hbm_bandwidth_gbs

    def describe(self) -> str:
        cores = (f"{self.num_cores} AIC / {self.num_vector_cores} AIV" if self.is_ascend
                 else f"{self.num_cores} SMs")
        extra = f"; assumed: {', '.join(self.assumptions)}" if self.assumptions else ""
        return (f"{self.name} ({self.kind}): {cores} @ {self.clock_ghz:g} GHz, "
                f"HBM {self.hbm_bandwidth_gbs:g} GB/s, bf16 {self.peak_bf16_tflops:.0f} TFLOPS{extra}")


def ascend_peak_fp16_tflops(num_cores: int, clock_ghz: float) -> float:
    """2 FLOPs per MAC x cores x 4096 MACs per cycle x clock."""
    return 2.0 * num_cores * ASCEND_CUBE_MACS_PER_CYCLE * clock_ghz * 1e9 / 1e12


def _hopper(name: str, *, hbm_bytes: int, hbm_gbs: float, copy_gbs: float,
            matmul_tflops: float) -> DeviceProfile:
    # H100 SXM5 / H200 SXM: 132 SMs, 1.98 GHz boost, 50 MB L2, 228 KB smem per SM of which
    # 227 KB can be opted into by one block, 989 TFLOPS dense fp16/bf16 (datasheets).
    return DeviceProfile(
        name=name, kind="cuda", num_cores=132, num_vector_cores=132, clock_ghz=1.98,
        hbm_bytes=hbm_bytes, hbm_bandwidth_gbs=hbm_gbs, l2_bytes=50 * MIB,
        smem_per_core_bytes=227 * KIB, peak_fp16_tflops=989.4, peak_bf16_tflops=989.4,
        gm_align_bytes=16, smem_align_bytes=128, cube_fractal=16,
        measured_copy_gbs=copy_gbs, measured_matmul_tflops=matmul_tflops,
        ifa_cuda=ifa_cuda_rules(hbm_gbs / 132))


def _ascend_910b(name: str, *, num_cores: int, hbm_bytes: int, hbm_gbs: float) -> DeviceProfile:
    # Buffer sizes and alignments are the Atlas A2 facts (docs/incre_flash_attention_ascend.md); clock,
    # bandwidth, L2 size and the peak derived from the clock are not published in our
    # sources: they are assumptions, listed as such.
    clock = 1.8
    peak = ascend_peak_fp16_tflops(num_cores, clock)
    return DeviceProfile(
        name=name, kind="ascend", num_cores=num_cores, num_vector_cores=2 * num_cores,
        clock_ghz=clock, hbm_bytes=hbm_bytes, hbm_bandwidth_gbs=hbm_gbs, l2_bytes=192 * MIB,
        smem_per_core_bytes=0, peak_fp16_tflops=peak, peak_bf16_tflops=peak,
        ub_bytes=196608, l1_bytes=524288, l0a_bytes=65536, l0b_bytes=65536, l0c_bytes=131072,
        gm_align_bytes=32, smem_align_bytes=32, ub_align_bytes=32, l1_align_bytes=32,
        l0ab_align_bytes=512, l0c_align_bytes=64, cube_fractal=16, vector_repeat_bytes=256,
        assumptions=("clock_ghz", "hbm_bandwidth_gbs", "hbm_bytes", "l2_bytes",
                     "peak_fp16_tflops", "peak_bf16_tflops"))


H100 = _hopper("h100", hbm_bytes=80 * GIB, hbm_gbs=3350.0, copy_gbs=3000.0, matmul_tflops=798.0)
H200 = _hopper("h200", hbm_bytes=141 * GIB, hbm_gbs=4800.0, copy_gbs=4250.0, matmul_tflops=699.0)
ASCEND_910B2 = _ascend_910b("ascend910b2", num_cores=24, hbm_bytes=64 * GIB, hbm_gbs=1600.0)
ASCEND_910B3 = _ascend_910b("ascend910b3", num_cores=20, hbm_bytes=64 * GIB, hbm_gbs=1600.0)
ASCEND_910B4 = _ascend_910b("ascend910b4", num_cores=20, hbm_bytes=32 * GIB, hbm_gbs=800.0)

PROFILES: dict[str, DeviceProfile] = {
    p.name: p for p in (H100, H200, ASCEND_910B2, ASCEND_910B3, ASCEND_910B4)}

# What a plan is made for when the tensors are not on an accelerator: the Ascend simulator
# models a 910B2 AI core pair, and CPU tensors (reference backend) take the same default so
# a plan made on CPU is the one the simulator runs.
DEFAULT_NPU_PROFILE = "ascend910b2"
DEFAULT_SIM_PROFILE = "ascend910b2"
DEFAULT_CPU_PROFILE = "ascend910b2"

_ALIASES = {"h100_sxm": "h100", "h100-sxm": "h100", "h200_sxm": "h200", "h200-sxm": "h200",
            "910b2": "ascend910b2", "910b3": "ascend910b3", "910b4": "ascend910b4"}


def profile(name: str) -> DeviceProfile:
    """Profile by name (case-insensitive): h100, h200, ascend910b2, ascend910b3, ascend910b4."""
    if not isinstance(name, str):
        raise TypeError(f"profile name must be a str, got {type(name).__name__}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PROFILES:
        raise ValueError(f"unknown device profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[key]


def with_cores(p: DeviceProfile, n: int) -> DeviceProfile:
    """A copy of `p` with only `n` cores (and the matching vector cores / peak), e.g. to run the
    Ascend simulator on 2 AI cores while keeping every per-core capacity real."""
    if not isinstance(p, DeviceProfile):
        raise TypeError(f"with_cores: profile must be a DeviceProfile, got {type(p).__name__}")
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"with_cores: n must be an int, got {type(n).__name__}")
    if not 1 <= n <= p.num_cores:
        raise ValueError(f"with_cores: n must be in [1, {p.num_cores}] for {p.name}, got {n}")
    if n == p.num_cores:
        return p
    frac = n / p.num_cores
    return dataclasses.replace(
        p, name=f"{p.name}@{n}cores", num_cores=n,
        num_vector_cores=p.num_vector_cores * n // p.num_cores,
        peak_fp16_tflops=p.peak_fp16_tflops * frac, peak_bf16_tflops=p.peak_bf16_tflops * frac)


def from_cuda_properties(props) -> DeviceProfile:
    """Profile for a CUDA device from `torch.cuda.get_device_properties(...)` (or any object
    with its attribute names). A known SKU (H100 / H200 with 132 SMs) gets its full profile;
    anything else a generic one built from the properties, unknown figures marked assumed."""
    name = str(getattr(props, "name", "cuda"))
    sms = int(getattr(props, "multi_processor_count", 0) or 0)
    if sms < 1:
        raise ValueError(f"CUDA device properties report {sms} SMs for {name!r}")
    upper = name.upper()
    for known in (H200, H100):
        if known.name.upper() in upper and sms == known.num_cores:
            return known
    assumed = ["peak_fp16_tflops", "peak_bf16_tflops"]
    clock_khz = int(getattr(props, "clock_rate", 0) or 0)
    clock = clock_khz / 1e6 if clock_khz else 1.5
    if not clock_khz:
        assumed.append("clock_ghz")
    mem_khz = int(getattr(props, "memory_clock_rate", 0) or 0)
    bus_bits = int(getattr(props, "memory_bus_width", 0) or 0)
    if mem_khz and bus_bits:
        # DDR: two transfers per clock.
        hbm_gbs = 2.0 * mem_khz * 1e3 * bus_bits / 8 / 1e9
    else:
        hbm_gbs = 1000.0
        assumed.append("hbm_bandwidth_gbs")
    smem = int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
    if not smem:
        per_sm = int(getattr(props, "shared_memory_per_multiprocessor", 0) or 0)
        # One block can opt into all but 1 KB of an SM's shared memory on sm80+.
        smem = max(per_sm - KIB, int(getattr(props, "shared_memory_per_block", 0) or 0))
    if not smem:
        smem = 48 * KIB
        assumed.append("smem_per_core_bytes")
    # Unknown SKU: scale the H100 figure by SMs and clock (Hopper-class tensor cores assumed).
    peak = H100.peak_bf16_tflops * (sms / H100.num_cores) * (clock / H100.clock_ghz)
    return DeviceProfile(
        name=f"cuda:{name}", kind="cuda", num_cores=sms, num_vector_cores=sms, clock_ghz=clock,
        hbm_bytes=int(getattr(props, "total_memory", 0) or 0), hbm_bandwidth_gbs=hbm_gbs,
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0), smem_per_core_bytes=smem,
        peak_fp16_tflops=peak, peak_bf16_tflops=peak, gm_align_bytes=16, smem_align_bytes=128,
        cube_fractal=16, assumptions=tuple(assumed), ifa_cuda=ifa_cuda_rules(hbm_gbs / sms))


@functools.lru_cache(maxsize=None)
def _cuda_profile(index: int) -> DeviceProfile:
    """A GPU's profile, read once (every kernel call asks)."""
    import torch

    return from_cuda_properties(torch.cuda.get_device_properties(index))


def detect(device=None) -> DeviceProfile:
    """Profile for a device: a torch.device, a device string ("cuda:0", "npu", "cpu",
    "ascend_sim"), a tensor (its device), a profile name ("h200") or a DeviceProfile.

    cuda -> the SKU's profile from torch.cuda.get_device_properties (generic when unknown);
    npu -> the NPU's SoC and AI-core count as CANN's runtime reports them when the npu backend
    runs here (dualops.backends.npu), else 910B2;
    ascend_sim / cpu / None -> the 910B2 the simulator models."""
    import torch

    if isinstance(device, DeviceProfile):
        return device
    if isinstance(device, torch.Tensor):
        device = device.device
    if device is None:
        return profile(DEFAULT_CPU_PROFILE)
    if isinstance(device, str):
        key = device.strip().lower()
        if key in ("ascend_sim", "sim"):
            return profile(DEFAULT_SIM_PROFILE)
        if key in PROFILES or key in _ALIASES:
            return profile(key)
        try:
            device = torch.device(key)
        except RuntimeError:
            if key.split(":")[0] == "npu":   # "npu" without torch_npu installed: the NPU default
                return profile(DEFAULT_NPU_PROFILE)
            raise ValueError(f"detect: device must be a profile name ({', '.join(PROFILES)}), 'ascend_sim', "
                             f"or a torch device string such as 'cuda:0', 'cpu', 'npu'; got {device!r}") from None
    if not isinstance(device, torch.device):
        raise TypeError(f"detect: device must be a torch.device, str, tensor or DeviceProfile, "
                        f"got {type(device).__name__}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"detect: device {device} is CUDA but torch.cuda is not available here")
        return _cuda_profile(device.index if device.index is not None else torch.cuda.current_device())
    if device.type == "cpu":
        return profile(DEFAULT_CPU_PROFILE)
    # "npu" (PrivateUse1 under torch_npu) and anything else.
    if device.type in ("npu", "privateuseone"):
        from .backends import npu

        if npu.status()[0]:
            from .backends.npu import _common

            return _common.profile()
    return profile(DEFAULT_NPU_PROFILE)

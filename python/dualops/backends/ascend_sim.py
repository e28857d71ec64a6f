"""The Ascend simulator backend: the Ascend C kernels of ``backends/ascend`` run on the CPU
against the AscendC simulator in ``dualops._C`` (a model of Atlas A2 AI cores: one cube and two
vector cores per AI core as threads, real buffer capacities, bounds-checked GM).

The glue turns validated CPU tensors into the packed params struct, makes the plan for the
simulated profile, allocates outputs and GM workspace, registers every buffer the kernel may
touch (any other GM access is a fault), launches, and keeps the per-core counters for the cost
model (``last_counters()``, ``estimate()``).

Profile: ``devices.DEFAULT_SIM_PROFILE`` (910B2, 24 AI cores); override with the environment
(``DUALOPS_ASCEND_SIM_PROFILE=ascend910b3``, ``DUALOPS_ASCEND_SIM_CORES=4``) or in code with
``use_profile("ascend910b2", cores=2)``.
"""
from __future__ import annotations

import contextlib
import os
import threading

import torch

from .. import ascend_cost_model, devices, native, schema
from ..tiling.incre_flash_attention import check_plan_for_tensors, plan_for_tensors

NAME = "ascend_sim"

_OP = "incre_flash_attention"
_KV_DTYPES = (torch.float16, torch.bfloat16, torch.int8, torch.float8_e4m3fn)
_QUANT = (torch.int8, torch.float8_e4m3fn)

_state = threading.local()
_LAST: dict = {}


# ----------------------------------------------------------------------------- profile


def _env_profile() -> devices.DeviceProfile:
    name = os.environ.get("DUALOPS_ASCEND_SIM_PROFILE", devices.DEFAULT_SIM_PROFILE)
    p = devices.profile(name)
    if not p.is_ascend:
        raise ValueError(f"DUALOPS_ASCEND_SIM_PROFILE must name an Ascend profile, got {name!r}")
    cores = os.environ.get("DUALOPS_ASCEND_SIM_CORES")
    if cores:
        try:
            n = int(cores)
        except ValueError:
            raise ValueError(f"DUALOPS_ASCEND_SIM_CORES must be an int, got {cores!r}") from None
        p = devices.with_cores(p, n)
    return p


def active_profile() -> devices.DeviceProfile:
    """The profile simulated calls run with: use_profile() > environment > default."""
    p = getattr(_state, "profile", None)
    return p if p is not None else _env_profile()


@contextlib.contextmanager
def use_profile(profile="ascend910b2", cores: int | None = None):
    """Run the simulator with this Ascend profile (a name or DeviceProfile), optionally limited
    to `cores` AI cores (per-core capacities stay real), inside the block."""
    p = profile if isinstance(profile, devices.DeviceProfile) else devices.profile(profile)
    if not p.is_ascend:
        raise ValueError(f"use_profile: {p.name} is not an Ascend profile")
    if cores is not None:
        p = devices.with_cores(p, cores)
    prev = getattr(_state, "profile", None)
    _state.profile = p
    try:
        yield p
    finally:
        _state.profile = prev


def _launch_profile(p: devices.DeviceProfile) -> dict:
    return {"name": p.name, "ub_bytes": p.ub_bytes, "l1_bytes": p.l1_bytes, "l0a_bytes": p.l0a_bytes,
            "l0b_bytes": p.l0b_bytes, "l0c_bytes": p.l0c_bytes,
            "timeout_s": float(os.environ.get("DUALOPS_ASCEND_SIM_TIMEOUT_S", "60"))}


def status():
    mod, reason = native.load()
    if mod is None:
        return False, reason
    if not hasattr(mod, "ascend_sim_launch"):
        return False, "dualops._C was built without the Ascend simulator"
    try:
        p = active_profile()
    except ValueError as e:
        return False, str(e)
    return True, (f"Ascend C kernels on the CPU simulator of {p.name} "
                  f"({p.num_cores} AI cores x 1 cube + 2 vector cores)")


def last_counters() -> dict:
    """The last simulated launch: {"op", "profile", "plan", "report"} (report = per-core counters
    and GM traffic per buffer, as _C.ascend_sim_launch returns them); {} before any call."""
    return dict(_LAST)


def last_estimate() -> dict:
    """Cost-model estimate of the last simulated launch (see dualops.ascend_cost_model)."""
    if not _LAST:
        raise RuntimeError("ascend_sim.last_estimate: no simulated launch yet")
    return ascend_cost_model.estimate(_LAST["report"], _LAST["profile"]).as_dict()


def estimate(op: str, inputs: dict, *, profile: str | None = None) -> dict:
    """Run one call of `op` (public-API keyword arguments, CPU tensors) on the simulator for the
    named profile and return the cost model's estimate: {"seconds", "bound", "profile", ...}."""
    if op != _OP:
        raise NotImplementedError(f"ascend_sim.estimate: {op} has no Ascend C kernel yet")
    import dualops

    kw = {k: v for k, v in inputs.items() if k not in ("backend", "return_lse")}
    with use_profile(profile or devices.DEFAULT_SIM_PROFILE):
        dualops.incre_flash_attention(**kw, backend=NAME)
        return last_estimate()


# ----------------------------------------------------------------------------- helpers


def _ptr(t):
    return 0 if t is None else t.data_ptr()


def _strides4(t):
    return (0, 0, 0, 0) if t is None else tuple(int(s) for s in t.stride())


class _Regions:
    """The GM buffers of a launch: whole storages of the tensors (views included), merged where
    two tensors share memory, so any access outside them is a fault."""

    def __init__(self):
        self.items: list[tuple[int, int, str]] = []

    def add(self, name: str, t):
        if t is None:
            return
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            self.items.append((st.data_ptr(), st.nbytes(), name))
        else:
            raise TypeError(f"_Regions.add: {name} is not a tensor")

    def merged(self) -> list[tuple[int, int, str]]:
        out: list[list] = []
        for addr, n, name in sorted(i for i in self.items if i[1] > 0):
            if out and addr < out[-1][0] + out[-1][1]:
                last = out[-1]
                last[1] = max(last[0] + last[1], addr + n) - last[0]
                if name not in last[2].split("+"):
                    last[2] += "+" + name
            else:
                out.append([addr, n, name])
        return [tuple(i) for i in out]


def _last_dim_unit(t, name):
    """Masks / biases are read a row of keys at a time: the key stride must be 0 or 1."""
    if t is None or t.stride(-1) in (0, 1):
        return t
    return t.contiguous()


def _check_block_ids(block_table, kv_lens, block_size, num_blocks):
    lens = kv_lens.to(torch.int64)
    used = (lens + block_size - 1) // block_size                      # blocks each request reads
    cols = torch.arange(block_table.shape[1]).unsqueeze(0)
    in_use = cols < used.unsqueeze(1)
    bad = in_use & ((block_table < 0) | (block_table >= num_blocks))
    if bool(bad.any()):
        b, j = (int(x) for x in bad.nonzero()[0])
        raise ValueError(f"block_table[{b}, {j}] = {int(block_table[b, j])} is outside [0, {num_blocks}) "
                         f"but request {b} reads it (kv_lens[{b}] = {int(kv_lens[b])})")


# ----------------------------------------------------------------------------- the op


def incre_flash_attention(q, k_cache, v_cache, *, kv_lens, block_table, softmax_scale, causal,
                          atten_mask, pse_shift, k_scale, v_scale, k_offset, v_offset, plan=None):
    """docs/internals.md "Backend module interface". Returns (out, lse)."""
    C = native.require()
    prof = active_profile()
    if q.device.type != "cpu":
        raise ValueError(f"ascend_sim runs on CPU tensors, got q on {q.device}")
    if k_cache.dtype not in _KV_DTYPES:
        raise TypeError(f"ascend_sim: k_cache dtype must be one of {_KV_DTYPES}, got {k_cache.dtype}")
    B, S_q, H_q, D = q.shape
    if plan is None:
        plan = plan_for_tensors(q, k_cache, block_table, prof)
    else:
        check_plan_for_tensors(plan, q, k_cache, block_table)
    tiling = plan.pack().numpy().tobytes()
    why = C.ascend_ifa_check_tiling(tiling)
    if why is not None:
        raise ValueError(f"ascend_sim: the plan cannot run on the Ascend kernel: {why} ({plan.describe()})")
    if (D * k_cache.element_size()) % 32:
        raise ValueError(f"ascend_sim: head_dim * cache element size must be a multiple of 32 bytes, "
                         f"got {D} x {k_cache.element_size()}")

    kv_lens = kv_lens.to(torch.int32).contiguous()
    paged = block_table is not None
    s_kv = int(block_table.shape[1]) * int(k_cache.shape[1]) if paged else int(k_cache.shape[1])
    if kv_lens.numel() != B or bool((kv_lens < 0).any()) or bool((kv_lens > s_kv).any()):
        raise ValueError(f"kv_lens must hold {B} values in [0, {s_kv}], got {kv_lens.tolist()}")
    if paged:
        block_table = block_table.to(torch.int32)
        if block_table.stride(-1) != 1:
            block_table = block_table.contiguous()
        _check_block_ids(block_table, kv_lens, int(k_cache.shape[1]), int(k_cache.shape[0]))
    quant = k_cache.dtype in _QUANT
    scales = [None if (t is None or not quant) else t.to(torch.float32).contiguous()
              for t in (k_scale, v_scale, k_offset, v_offset)]
    if k_cache.dtype != torch.int8:
        scales[2] = scales[3] = None
    mask = None if atten_mask is None else _last_dim_unit(atten_mask, "atten_mask").view(torch.uint8)
    pse = None
    if pse_shift is not None:
        pse = pse_shift if pse_shift.dtype == torch.float32 else pse_shift.float()
        pse = _last_dim_unit(pse, "pse_shift")
    # fp8 caches go to the kernel as their bytes (decoded on the vector cores).
    k_raw = k_cache.view(torch.uint8) if k_cache.dtype == torch.float8_e4m3fn else k_cache
    v_raw = v_cache.view(torch.uint8) if v_cache.dtype == torch.float8_e4m3fn else v_cache

    # Poisoned outputs / workspace: anything the kernel fails to write shows up as NaN.
    out = torch.full((B, S_q, H_q, D), float("nan"), dtype=q.dtype)
    lse = torch.full((B, H_q, S_q), float("nan"), dtype=torch.float32)
    n_o, n_l = plan.workspace_floats()
    o_acc = torch.full((n_o,), float("nan")) if n_o else None
    l_acc = torch.full((n_l,), float("nan")) if n_l else None
    q_code, kv_code = schema.dtype_code(q.dtype), schema.dtype_code(k_cache.dtype)
    ws = torch.full((max(1, C.ascend_ifa_workspace_bytes(tiling, q_code, kv_code)),), 0xFF, dtype=torch.uint8)
    ms, ps = _strides4(mask), _strides4(pse)
    params = schema.pack_params(
        _OP, q=q.data_ptr(), k=k_raw.data_ptr(), v=v_raw.data_ptr(), out=out.data_ptr(),
        lse=lse.data_ptr(), kv_lens=kv_lens.data_ptr(), block_table=_ptr(block_table),
        atten_mask=_ptr(mask), pse_shift=_ptr(pse), k_scale=_ptr(scales[0]), v_scale=_ptr(scales[1]),
        k_offset=_ptr(scales[2]), v_offset=_ptr(scales[3]), o_accum=_ptr(o_acc), lse_accum=_ptr(l_acc),
        q_stride_b=q.stride(0), q_stride_s=q.stride(1), q_stride_h=q.stride(2),
        k_stride_0=k_cache.stride(0), k_stride_1=k_cache.stride(1), k_stride_2=k_cache.stride(2),
        v_stride_0=v_cache.stride(0), v_stride_1=v_cache.stride(1), v_stride_2=v_cache.stride(2),
        out_stride_b=out.stride(0), out_stride_s=out.stride(1), out_stride_h=out.stride(2),
        block_table_stride=block_table.stride(0) if paged else 0,
        mask_stride_b=ms[0], mask_stride_h=ms[1], mask_stride_q=ms[2], mask_stride_k=ms[3],
        pse_stride_b=ps[0], pse_stride_h=ps[1], pse_stride_q=ps[2], pse_stride_k=ps[3],
        num_blocks=int(k_cache.shape[0]) if paged else 0,
        softmax_scale=float(softmax_scale), causal=int(bool(causal)), q_dtype=q_code, kv_dtype=kv_code)
    params_t = torch.frombuffer(bytearray(params), dtype=torch.uint8)
    tiling_t = torch.frombuffer(bytearray(tiling), dtype=torch.uint8)

    regs = _Regions()
    for name, t in (("q", q), ("k_cache", k_raw), ("v_cache", v_raw), ("out", out), ("lse", lse),
                    ("kv_lens", kv_lens), ("block_table", block_table), ("atten_mask", mask),
                    ("pse_shift", pse), ("k_scale", scales[0]), ("v_scale", scales[1]),
                    ("k_offset", scales[2]), ("v_offset", scales[3]), ("o_accum", o_acc),
                    ("lse_accum", l_acc), ("workspace", ws), ("params", params_t), ("tiling", tiling_t)):
        regs.add(name, t)
    report = C.ascend_sim_launch(_OP, plan.num_cores, [params_t.data_ptr(), ws.data_ptr(), tiling_t.data_ptr()],
                                 regs.merged(), _launch_profile(prof))
    _LAST.clear()
    _LAST.update(op=_OP, profile=prof, plan=plan, report=report)
    return out, lse

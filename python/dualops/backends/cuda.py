"""The CUDA backend: Hopper (sm_90a) kernels in ``dualops._C``.

The glue turns validated tensors into the packed params struct (device addresses and strides),
takes the plan (made here from the shapes when the caller passes none), allocates outputs and
the split-KV workspace on the tensors' device and launches on torch's current stream. Nothing
here reads device values or synchronizes, so a call can be captured in a CUDA graph.
"""
from __future__ import annotations

import functools
import struct

import torch

from .. import native, schema
from ..devices import detect
from ..tiling.incre_flash_attention import IfaPlan, check_plan_for_tensors, plan_for_tensors

NAME = "cuda"

_OP = "incre_flash_attention"
_QUANT = (torch.int8, torch.float8_e4m3fn)
# What the kernels are built for (CMake: sm_90a).
_ARCH = (9, 0)


@functools.lru_cache(maxsize=1)
def status():
    """Read once per process (every dispatch asks): the GPU and the build do not change."""
    if not torch.cuda.is_available():
        return False, "torch.cuda is not available (no CUDA device, or a CPU build of torch)"
    mod, reason = native.load()
    if mod is None:
        return False, reason
    if not hasattr(mod, "cuda_incre_flash_attention"):
        return False, "dualops._C was built without CUDA (no nvcc at build time; set DUALOPS_CUDA=on to require it)"
    cap = torch.cuda.get_device_capability()
    if tuple(cap) != _ARCH:
        return False, f"the kernels are built for sm_90a (Hopper); this GPU is sm_{cap[0]}{cap[1]}"
    return True, f"sm_90a kernels on {torch.cuda.get_device_name()}"


# ----------------------------------------------------------------------------- packing


@functools.lru_cache(maxsize=None)
def _params_struct(op: str) -> tuple[struct.Struct, tuple[str, ...]]:
    """One struct.Struct for the op's params (same bytes as schema.pack_params, built once:
    packing runs on every call)."""
    fmt, pos, names = "<", 0, []
    for name, typ, off in schema.params_layout(op):
        fmt += "x" * (off - pos) + schema.PARAM_TYPES[typ][0]
        pos = off + schema.PARAM_TYPES[typ][1]
        names.append(name)
    fmt += "x" * (schema.params_size(op) - pos)
    return struct.Struct(fmt), tuple(names)


def pack_ifa_params(**values) -> bytes:
    """Fast equivalent of ``schema.pack_params("incre_flash_attention", **values)``."""
    st, names = _params_struct(_OP)
    unknown = set(values) - set(names)
    if unknown:
        raise ValueError(f"pack_params({_OP}): unknown field(s) {sorted(unknown)}")
    return st.pack(*(values.get(n, 0) or 0 for n in names))


# One zeroed int32 buffer of in-kernel merge counters per (device, stream): the kernel leaves it
# all zeros after every call, and calls on different streams never share one.
_MERGE_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}


def _merge_counters(C, dev, stream) -> int:
    key = (dev.index if dev.index is not None else torch.cuda.current_device(), stream.cuda_stream)
    buf = _MERGE_COUNTERS.get(key)
    if buf is None:
        if torch.cuda.is_current_stream_capturing():
            return 0  # no allocation inside a capture: this graph uses the combine kernel
        buf = _MERGE_COUNTERS[key] = torch.zeros(C.cuda_ifa_merge_groups, dtype=torch.int32, device=dev)
    return buf.data_ptr()


@functools.lru_cache(maxsize=1024)
def _plan_bytes(plan: IfaPlan) -> bytes:
    return plan.pack().numpy().tobytes()


def _ptr(t):
    return 0 if t is None else t.data_ptr()


def _strides4(t):
    return (0, 0, 0, 0) if t is None else tuple(int(s) for s in t.stride())


def make_ifa_plan(q, k_cache, block_table):
    """The plan for these shapes on q's device (cached by the planner)."""
    return plan_for_tensors(q, k_cache, block_table, detect(q.device))


def _check_cache_layout(name, t):
    es = t.element_size()
    if t.data_ptr() % 16:
        raise ValueError(f"{name} must start on a 16-byte boundary, got address {t.data_ptr():#x}")
    for dim in range(3):
        if (t.stride(dim) * es) % 16:
            raise ValueError(f"{name} strides must be multiples of 16 bytes (head rows are copied 16 B "
                             f"at a time), got stride {t.stride(dim)} elements in dim {dim}")


# ----------------------------------------------------------------------------- the op


def incre_flash_attention(q, k_cache, v_cache, *, kv_lens, block_table, softmax_scale, causal,
                          atten_mask, pse_shift, k_scale, v_scale, k_offset, v_offset, plan=None):
    """docs/internals.md "Backend module interface". Returns (out, lse)."""
    C = native.require()
    B, S_q, H_q, D = q.shape
    if plan is None:
        plan = make_ifa_plan(q, k_cache, block_table)
    else:
        check_plan_for_tensors(plan, q, k_cache, block_table)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        _check_cache_layout(name, t)
    dev = q.device
    if kv_lens.device != dev or kv_lens.dtype != torch.int32 or not kv_lens.is_contiguous():
        kv_lens = kv_lens.to(device=dev, dtype=torch.int32).contiguous()
    bt_stride = 0
    if block_table is not None:
        if block_table.stride(-1) != 1 or block_table.dtype != torch.int32:
            block_table = block_table.to(torch.int32).contiguous()
        bt_stride = block_table.stride(0)
    quant = k_cache.dtype in _QUANT
    scales = [None if t is None else t.to(device=dev, dtype=torch.float32).contiguous()
              for t in (k_scale, v_scale, k_offset, v_offset)]
    if atten_mask is not None and atten_mask.dtype != torch.bool:
        raise TypeError(f"atten_mask must be bool, got {atten_mask.dtype}")
    if pse_shift is not None and pse_shift.dtype != torch.float32:
        pse_shift = pse_shift.float()

    out = torch.empty(B, S_q, H_q, D, dtype=q.dtype, device=dev)
    lse = torch.empty(B, H_q, S_q, dtype=torch.float32, device=dev)
    n_o, n_l = plan.workspace_floats()
    o_acc = torch.empty(n_o, dtype=torch.float32, device=dev) if n_o else None
    l_acc = torch.empty(n_l, dtype=torch.float32, device=dev) if n_l else None
    ms, ps = _strides4(atten_mask), _strides4(pse_shift)
    stream = torch.cuda.current_stream(dev)
    params = pack_ifa_params(
        q=q.data_ptr(), k=k_cache.data_ptr(), v=v_cache.data_ptr(), out=out.data_ptr(),
        lse=lse.data_ptr(), kv_lens=kv_lens.data_ptr(), block_table=_ptr(block_table),
        atten_mask=_ptr(atten_mask), pse_shift=_ptr(pse_shift),
        k_scale=_ptr(scales[0]) if quant else 0, v_scale=_ptr(scales[1]) if quant else 0,
        k_offset=_ptr(scales[2]) if quant else 0, v_offset=_ptr(scales[3]) if quant else 0,
        o_accum=_ptr(o_acc), lse_accum=_ptr(l_acc),
        merge_counters=_merge_counters(C, dev, stream) if plan.num_splits > 1 else 0,
        q_stride_b=q.stride(0), q_stride_s=q.stride(1), q_stride_h=q.stride(2),
        k_stride_0=k_cache.stride(0), k_stride_1=k_cache.stride(1), k_stride_2=k_cache.stride(2),
        v_stride_0=v_cache.stride(0), v_stride_1=v_cache.stride(1), v_stride_2=v_cache.stride(2),
        out_stride_b=out.stride(0), out_stride_s=out.stride(1), out_stride_h=out.stride(2),
        block_table_stride=bt_stride,
        mask_stride_b=ms[0], mask_stride_h=ms[1], mask_stride_q=ms[2], mask_stride_k=ms[3],
        pse_stride_b=ps[0], pse_stride_h=ps[1], pse_stride_q=ps[2], pse_stride_k=ps[3],
        num_blocks=int(k_cache.shape[0]) if block_table is not None else 0,
        softmax_scale=float(softmax_scale), causal=int(bool(causal)),
        q_dtype=schema.dtype_code(q.dtype), kv_dtype=schema.dtype_code(k_cache.dtype))
    C.cuda_incre_flash_attention(params, _plan_bytes(plan), stream.cuda_stream)
    return out, lse

"""CUDA grouped GEMM: the glue of the persistent mma.sync kernel in ``dualops._C``
(backends/cuda/grouped_gemm/, docs/grouped_gemm_cuda.md).

Nothing here reads device values: the kernel finds its work items from group_offsets /
masked_m on the device (clamped, so bad values cannot make it leave x or y), so a call can be
captured in a CUDA graph. Value checks of offsets and masked_m run under validate="full".
Tile M and the kernel come from the CUDA heuristics (average rows per group: M / G, or M_max when
masked): the mma.sync kernel's tile M (`heuristics.cuda.gg_mma_tile_m`), and the persistent
mma.sync kernel (every case) or, for compute-bound groups, the CUTLASS sm90 grouped kernel
(`heuristics.cuda.cuda_kernel_for`); a plan passed in fixes both.
"""
from __future__ import annotations

import torch

from ... import native, schema
from ...devices import detect
from ...heuristics.cuda import (SM90_ALONG_N, SM90_CONFIG, cuda_kernel_for, gg_mma_tile_m, gg_mma_tile_m_of,
                               sm90_supports)
from ...tiling.grouped_gemm import SCALE_MODES, GroupedGemmPlan
from . import status  # noqa: F401
from ._common import current_stream, fields_template, params_struct

_OP = "grouped_gemm"


def pack_gg_params(**values) -> bytes:
    """Fast equivalent of ``schema.pack_params("grouped_gemm", **values)``."""
    return params_struct(_OP)[0].pack(*fields_template(_OP, **values))


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _f32(t, dev, name):
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        t = torch.tensor([float(t)])
    return t.to(device=dev, dtype=torch.float32).contiguous()


def _int32(t, dev, name):
    if t.device != dev and t.device.type != "cpu":
        raise ValueError(f"{name} must be on {dev} (x's device) or the CPU, got {t.device}")
    return t.to(device=dev, dtype=torch.int32).contiguous()


def _pad_k(t, k_pad):
    """Zero-pad the last dim to k_pad (rows must be whole 16-byte pieces for cp.async)."""
    pad = (0, k_pad - t.shape[-1])
    if t.element_size() == 1:
        return torch.nn.functional.pad(t.view(torch.uint8), pad).view(t.dtype)
    return torch.nn.functional.pad(t, pad)


class GroupedGemmLaunch:
    """What a call's shapes and dtypes fix (tile M, padding, sizes); ``__call__`` launches."""

    def __init__(self, x, w, *, group_offsets, masked_m, scale_mode, x_scale, w_scale, out_dtype, plan):
        masked = masked_m is not None
        G, N, K = (int(s) for s in w.shape)
        self.masked, self.G, self.N, self.K = masked, G, N, K
        self.m_max = int(x.shape[1]) if masked else 0
        self.m = int(x.shape[0]) if not masked else G * self.m_max
        if plan is not None:
            if not isinstance(plan, GroupedGemmPlan):
                raise TypeError(f"plan must be a GroupedGemmPlan, got {type(plan).__name__}")
            if (plan.n, plan.k, plan.num_groups) != (N, K, G):
                raise ValueError(f"plan was made for G={plan.num_groups} N={plan.n} K={plan.k}, "
                                 f"this call has G={G} N={N} K={K}")
            self.tile_m = gg_mma_tile_m_of(plan.tile_m)
            self.kernel = plan.cuda_kernel
            self.raster = plan.cuda_raster
            if self.raster not in ("m", "n"):
                raise ValueError(f"plan.cuda_raster must be 'm' or 'n', got {self.raster!r}")
        else:
            avg = self.m_max if masked else -(-self.m // G)
            self.tile_m = gg_mma_tile_m(avg, detect(x.device))
            self.raster = "m"
            self.kernel = cuda_kernel_for(avg, n=N, dtype=_name(x.dtype), scale_mode=scale_mode,
                                          out_dtype=_name(out_dtype), device=detect(x.device))
        self.C = native.require()
        if self.kernel != "mma" and not getattr(self.C, "cuda_gg_sm90_built", False):
            self.kernel = "mma"   # a build without the CUTLASS headers runs every case on mma
        if self.kernel != "mma" and not sm90_supports(self.kernel, N, _name(x.dtype), scale_mode, _name(out_dtype)):
            raise ValueError(f"plan: its CUDA kernel {self.kernel!r} does not cover {_name(x.dtype)} "
                             f"{scale_mode} -> {_name(out_dtype)} with N {N} (plan it with this out_dtype)")
        self.ws_bytes = None
        esize = x.element_size()
        self.k_pad = K if (K * esize) % 16 == 0 else K + (16 // esize - K % (16 // esize))
        self.scale_mode = scale_mode
        self.out_dtype = out_dtype
        self.out_shape = (*x.shape[:-1], N)
        self.tail = params_struct(_OP)[0].pack(*fields_template(
            _OP, m=self.m, n=N, k=self.k_pad, num_groups=G, m_max=self.m_max,
            scale_mode=SCALE_MODES[scale_mode], in_dtype=schema.dtype_code(x.dtype),
            out_dtype=schema.dtype_code(out_dtype)))[7 * 8:]

    def __call__(self, x, w, *, group_offsets, masked_m, x_scale, w_scale, **_fixed):
        dev = x.device
        y = torch.empty(self.out_shape, dtype=self.out_dtype, device=dev)
        if y.numel() == 0:
            return y
        if self.k_pad != self.K:
            x, w = _pad_k(x, self.k_pad), _pad_k(w, self.k_pad)
        x, w = x.contiguous(), w.contiguous()
        offs = _int32(group_offsets, dev, "group_offsets") if not self.masked else None
        mm = _int32(masked_m, dev, "masked_m") if self.masked else None
        xs, ws = _f32(x_scale, dev, "x_scale"), _f32(w_scale, dev, "w_scale")
        ptrs = [t.data_ptr() if t is not None else 0 for t in (x, w, y, offs, mm, xs, ws)]
        params = params_struct(_OP)[0].pack(*fields_template(_OP, **dict(zip(
            ("x", "w", "y", "group_offsets", "masked_m", "x_scale", "w_scale"), ptrs))))[:7 * 8] + self.tail
        if self.kernel != "mma":
            config = SM90_CONFIG[self.kernel] | (SM90_ALONG_N if self.raster == "n" else 0)
            if self.ws_bytes is None:   # depends on the shapes and the device only
                self.ws_bytes = int(self.C.cuda_grouped_gemm_sm90_workspace(params, config))
            ws = torch.empty(self.ws_bytes, dtype=torch.uint8, device=dev)
            self.C.cuda_grouped_gemm_sm90(params, config, ws.data_ptr(), self.ws_bytes,
                                          current_stream(x.get_device()))
        else:
            self.C.cuda_grouped_gemm(params, self.tile_m, current_stream(x.get_device()))
        return y


def prepare_grouped_gemm(x, w, *, plan=None, **kw):
    return GroupedGemmLaunch(x, w, plan=plan, **kw)


def grouped_gemm(x, w, *, group_offsets=None, masked_m=None, scale_mode="none", x_scale=None,
                 w_scale=None, out_dtype=torch.bfloat16, plan=None):
    launch = GroupedGemmLaunch(x, w, group_offsets=group_offsets, masked_m=masked_m,
                               scale_mode=scale_mode, x_scale=x_scale, w_scale=w_scale,
                               out_dtype=out_dtype, plan=plan)
    return launch(x, w, group_offsets=group_offsets, masked_m=masked_m, x_scale=x_scale, w_scale=w_scale)

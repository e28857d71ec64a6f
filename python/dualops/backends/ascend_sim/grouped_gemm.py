"""Ascend C grouped GEMM on the simulator: the glue of ``backends/ascend/grouped_gemm``
(docs/grouped_gemm_ascend.md)."""

from __future__ import annotations

import dataclasses

import torch

from ... import native, schema
from ...tiling.grouped_gemm import IN_DTYPES, LAYOUTS, SCALE_MODES, GroupedGemmPlan, plan_grouped_gemm
from ._common import Regions, active_profile, launch

_OP = "grouped_gemm"
_KERNEL = "grouped_gemm"
BLOCK = 128


def _cdiv(a, b):
    return -(-a // b)


def _group_rows(x, w, group_offsets, masked_m):
    """Rows per group from the host copies of group_offsets / masked_m, checked (a kernel must
    never read past x)."""
    G = int(w.shape[0])
    if masked_m is not None:
        if x.dim() != 3 or int(x.shape[0]) != G:
            raise ValueError(f"x must be [G={G}, M_max, K] with masked_m, got {tuple(x.shape)}")
        if tuple(masked_m.shape) != (G,):
            raise ValueError(f"masked_m must have shape [{G}], got {tuple(masked_m.shape)}")
        m_max = int(x.shape[1])
        rows = [int(v) for v in masked_m.tolist()]
        for g, r in enumerate(rows):
            if not 0 <= r <= m_max:
                raise ValueError(f"masked_m[{g}] = {r} is outside [0, M_max={m_max}]")
        return rows
    if x.dim() != 2:
        raise ValueError(f"x must be [M, K] with group_offsets, got {tuple(x.shape)}")
    if group_offsets is None or tuple(group_offsets.shape) != (G + 1,):
        got = None if group_offsets is None else tuple(group_offsets.shape)
        raise ValueError(f"group_offsets must have shape [{G + 1}] (w has G={G} groups), got {got}")
    offs = [int(v) for v in group_offsets.tolist()]
    if offs[0] != 0:
        raise ValueError(f"group_offsets[0] must be 0, got {offs[0]}")
    for g in range(G):
        if offs[g + 1] < offs[g]:
            raise ValueError(f"group_offsets must not decrease: group_offsets[{g}] = {offs[g]} > "
                             f"group_offsets[{g + 1}] = {offs[g + 1]}")
    if offs[-1] > x.shape[0]:
        raise ValueError(f"group_offsets[{G}] = {offs[-1]} is past the {x.shape[0]} rows of x")
    return [offs[g + 1] - offs[g] for g in range(G)]


def _check_scales(x, w, scale_mode, x_scale, w_scale):
    G, N, K = (int(s) for s in w.shape)
    lead = tuple(int(s) for s in x.shape[:-1])
    kb, nb = _cdiv(K, BLOCK), _cdiv(N, BLOCK)
    want = {"per_tensor": (None, (G,)), "rowwise": (lead, (G, N)),
            "blockwise": (lead + (kb,), (G, nb, kb))}.get(scale_mode)
    if want is None:
        if x_scale is not None or w_scale is not None:
            raise ValueError("scale_mode 'none' takes no x_scale / w_scale")
        return
    xs_shape, ws_shape = want
    if w_scale is None or tuple(w_scale.shape) != ws_shape:
        raise ValueError(f"w_scale must have shape {list(ws_shape)} for scale_mode {scale_mode!r}, got "
                         f"{None if w_scale is None else tuple(w_scale.shape)}")
    if scale_mode == "per_tensor":
        if x_scale is not None and x_scale.numel() != 1:
            raise ValueError(f"per_tensor x_scale must hold one value, got shape {tuple(x_scale.shape)}")
    elif x_scale is None or tuple(x_scale.shape) != xs_shape:
        raise ValueError(f"x_scale must have shape {list(xs_shape)} for scale_mode {scale_mode!r}, got "
                         f"{None if x_scale is None else tuple(x_scale.shape)}")


def _check_plan(plan, rows, *, masked, m_max, n, k, dtype, scale_mode):
    if not isinstance(plan, GroupedGemmPlan):
        raise TypeError(f"plan must be a GroupedGemmPlan, got {type(plan).__name__}")
    want = dict(layout=LAYOUTS["masked" if masked else "contiguous"], num_groups=len(rows), n=n, k=k,
                in_dtype=IN_DTYPES[dtype][0], scale_mode=SCALE_MODES[scale_mode], m_max=m_max if masked else 0)
    for f, v in want.items():
        if getattr(plan, f) != v:
            raise ValueError(f"plan was made for {f} = {getattr(plan, f)}, the call has {v} ({plan.describe()})")
    if not plan.shape_only and plan.m_total != sum(rows):
        raise ValueError(f"plan was made for {plan.m_total} rows, the groups hold {sum(rows)} ({plan.describe()})")
    if not plan.shape_only:
        per = [0] * len(rows)
        for g, mt, _ in plan.item_list():
            per[g] = max(per[g], (mt + 1) * plan.tile_m)
        for g, r in enumerate(rows):
            if _cdiv(r, plan.tile_m) * plan.tile_m != per[g] and not (r == 0 and per[g] == 0):
                raise ValueError(f"plan's m tiles for group {g} do not cover its {r} rows ({plan.describe()})")


def grouped_gemm(x, w, *, group_offsets=None, masked_m=None, scale_mode="none", x_scale=None, w_scale=None,
                 out_dtype=torch.bfloat16, plan=None):
    """docs/internals.md "Backend module interface". Returns y."""
    C = native.require()
    prof = active_profile()
    for name, t in (("x", x), ("w", w)):
        if t.device.type != "cpu":
            raise ValueError(f"ascend_sim runs on CPU tensors, got {name} on {t.device}")
    dtype = str(x.dtype).removeprefix("torch.")
    if dtype not in IN_DTYPES or w.dtype != x.dtype:
        raise TypeError(f"ascend_sim: x and w must share one of {list(IN_DTYPES)}, got {x.dtype} and {w.dtype}")
    G, N, K = (int(s) for s in w.shape)
    masked = masked_m is not None
    rows = _group_rows(x, w, group_offsets, masked_m)
    _check_scales(x, w, scale_mode, x_scale, w_scale)
    m_max = int(x.shape[1]) if masked else 0
    if plan is None:
        if masked:
            plan = plan_grouped_gemm(masked_m=rows, m_max=m_max, layout="masked", n=N, k=K, dtype=dtype,
                                     scale_mode=scale_mode, device=prof)
        else:
            plan = plan_grouped_gemm(rows, n=N, k=K, dtype=dtype, scale_mode=scale_mode, device=prof)
    else:
        _check_plan(plan, rows, masked=masked, m_max=m_max, n=N, k=K, dtype=dtype, scale_mode=scale_mode)
    why = C.ascend_gg_check_tiling(plan.pack().numpy().tobytes(), prof.l1_bytes, prof.l0a_bytes,
                                   prof.l0b_bytes, prof.l0c_bytes)
    if why is not None:
        raise ValueError(f"ascend_sim: the plan cannot run on the Ascend kernel: {why} ({plan.describe()})")
    return run_kernel(x, w, group_offsets=group_offsets, masked_m=masked_m, rows=rows, x_scale=x_scale,
                      w_scale=w_scale, out_dtype=out_dtype, plan=plan, profile=prof)


def run_kernel(x, w, *, group_offsets, masked_m, rows, x_scale, w_scale, out_dtype, plan, profile):
    """Launch with no argument checks (grouped_gemm() makes them): the tests plant faults here."""
    C = native.require()
    masked = masked_m is not None
    N = int(w.shape[1])
    x = x.contiguous()
    w = w.contiguous()
    raw = (lambda t: t.view(torch.uint8)) if x.dtype == torch.float8_e4m3fn else (lambda t: t)
    xr, wr = raw(x), raw(w)
    offs = None if masked else group_offsets.to(torch.int32).contiguous()
    mm = masked_m.to(torch.int32).contiguous() if masked else None
    xs = None if x_scale is None else x_scale.to(torch.float32).contiguous()
    ws_ = None if w_scale is None else w_scale.to(torch.float32).contiguous()
    # Poisoned output: a row of a group the kernel fails to write shows up as NaN; rows outside
    # every group are 0 (the op's contract), written here.
    y = torch.full(tuple(x.shape[:-1]) + (N,), float("nan"), dtype=out_dtype)
    if masked:
        for g, r in enumerate(rows):
            y[g, r:] = 0
    else:
        y[sum(rows):] = 0
    tiling = plan.pack().numpy().tobytes()
    work = torch.full((max(1, C.ascend_gg_workspace_bytes(tiling)),), 0xFF, dtype=torch.uint8)
    params = schema.pack_params(
        _OP, x=xr.data_ptr(), w=wr.data_ptr(), y=y.data_ptr(), group_offsets=0 if offs is None else offs.data_ptr(),
        masked_m=0 if mm is None else mm.data_ptr(), x_scale=0 if xs is None else xs.data_ptr(),
        w_scale=0 if ws_ is None else ws_.data_ptr(), m=int(x.shape[0]) if not masked else int(x.shape[1]),
        n=N, k=int(w.shape[2]), num_groups=int(w.shape[0]), m_max=int(x.shape[1]) if masked else 0,
        scale_mode=plan.scale_mode, in_dtype=plan.in_dtype, out_dtype=schema.dtype_code(out_dtype))
    params_t = torch.frombuffer(bytearray(params), dtype=torch.uint8)
    tiling_t = torch.frombuffer(bytearray(tiling), dtype=torch.uint8)
    regs = Regions()
    for name, t in (("x", xr), ("w", wr), ("y", y), ("group_offsets", offs), ("masked_m", mm), ("x_scale", xs),
                    ("w_scale", ws_), ("workspace", work), ("params", params_t), ("tiling", tiling_t)):
        regs.add(name, t)
    launch(_OP, _KERNEL, plan.num_cores, [params_t.data_ptr(), work.data_ptr(), tiling_t.data_ptr()], regs, profile,
           plan)
    return y


def sliced_plan(plan: GroupedGemmPlan, items: list[tuple[int, int, int]]) -> GroupedGemmPlan:
    """The plan with only `items`, on one AI core (cost-model slices, fault tests)."""
    flat = tuple(v for it in items for v in it)
    return dataclasses.replace(plan, items=flat, num_items=len(items), num_cores=1)

"""Ascend C grouped GEMM on the simulator: the glue of ``backends/ascend/grouped_gemm``
(docs/grouped_gemm_ascend.md)."""

from __future__ import annotations

import dataclasses

import torch

from ... import native, schema
from ...tiling.grouped_gemm import IN_DTYPES, LAYOUTS, SCALE_MODES, GroupedGemmPlan, plan_grouped_gemm
from ._common import SIM, Regions, active_profile

_OP = "grouped_gemm"
_KERNEL = "grouped_gemm"
BLOCK = 128


def _cdiv(a, b):
    return -(-a // b)


def _group_rows(x, w, group_offsets, masked_m):
    """Rows per group from the host copies of group_offsets / masked_m (checked by the API:
    ``CHECK_VALUES``; the planner needs them)."""
    if masked_m is not None:
        return [int(v) for v in masked_m.tolist()]
    offs = [int(v) for v in group_offsets.tolist()]
    return [offs[g + 1] - offs[g] for g in range(int(w.shape[0]))]


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
                 out_dtype=torch.bfloat16, plan=None, _target=SIM):
    """docs/internals.md "Backend module interface". Returns y. (_target: where the kernel runs,
    the simulator or an NPU, backends/npu.) A plan handed in directly (the API has no grouped-GEMM
    plan argument) is checked against the call here."""
    C = native.require()
    target = _target
    for name, t in (("x", x), ("w", w)):
        target.check_device(name, t)
    prof = target.profile()
    dtype = str(x.dtype).removeprefix("torch.")
    G, N, K = (int(s) for s in w.shape)
    masked = masked_m is not None
    rows = _group_rows(x, w, group_offsets, masked_m)
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
        raise ValueError(f"{target.name}: the plan cannot run on the Ascend kernel: {why} ({plan.describe()})")
    return run_kernel(x, w, group_offsets=group_offsets, masked_m=masked_m, rows=rows, x_scale=x_scale,
                      w_scale=w_scale, out_dtype=out_dtype, plan=plan, profile=prof, target=target)


def run_kernel(x, w, *, group_offsets, masked_m, rows, x_scale, w_scale, out_dtype, plan, profile, target=SIM):
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
    y = torch.full(tuple(x.shape[:-1]) + (N,), float("nan"), dtype=out_dtype, device=x.device)
    if masked:
        for g, r in enumerate(rows):
            y[g, r:] = 0
    else:
        y[sum(rows):] = 0
    tiling = plan.pack().numpy().tobytes()
    work = torch.full((max(1, C.ascend_gg_workspace_bytes(tiling)),), 0xFF, dtype=torch.uint8, device=x.device)
    params = schema.pack_params(
        _OP, x=xr.data_ptr(), w=wr.data_ptr(), y=y.data_ptr(), group_offsets=0 if offs is None else offs.data_ptr(),
        masked_m=0 if mm is None else mm.data_ptr(), x_scale=0 if xs is None else xs.data_ptr(),
        w_scale=0 if ws_ is None else ws_.data_ptr(), m=int(x.shape[0]) if not masked else int(x.shape[1]),
        n=N, k=int(w.shape[2]), num_groups=int(w.shape[0]), m_max=int(x.shape[1]) if masked else 0,
        scale_mode=plan.scale_mode, in_dtype=plan.in_dtype, out_dtype=schema.dtype_code(out_dtype))
    params_t = target.gm_bytes(params, x.device)
    tiling_t = target.gm_bytes(tiling, x.device)
    regs = Regions()
    for name, t in (("x", xr), ("w", wr), ("y", y), ("group_offsets", offs), ("masked_m", mm), ("x_scale", xs),
                    ("w_scale", ws_), ("workspace", work), ("params", params_t), ("tiling", tiling_t)):
        regs.add(name, t)
    target.launch(_OP, _KERNEL, plan.num_cores, [params_t.data_ptr(), work.data_ptr(), tiling_t.data_ptr()], regs, profile,
           plan)
    return y


def sliced_plan(plan: GroupedGemmPlan, items: list[tuple[int, int, int]]) -> GroupedGemmPlan:
    """The plan with only `items`, on one AI core (cost-model slices, fault tests)."""
    flat = tuple(v for it in items for v in it)
    return dataclasses.replace(plan, items=flat, num_items=len(items), num_cores=1)


# ----------------------------------------------------------------------------- cost-model estimate
#
# A grouped GEMM's work list is uniform: every item of a balanced call costs the same, and the
# slowest AI core is core 0, which the round-robin deal gives ceil(items / cores) items. So the
# estimate does not run the whole call: it runs two slices of core 0's list on one simulated AI
# core (its first item, then its first two), on a reduced problem holding only the groups those
# items touch, and extrapolates linearly: counters(n items) = fixed + n * per_item. The fp8 decode
# pass is part of `fixed` there; it is scaled to the whole call's bytes and spread over every
# core, as the kernel deals it. HBM bytes are the call's own tensors once (plus, for fp8, the fp16
# copies written and read back); re-reads of x / w tiles by other items are L2 traffic (consecutive
# items share a weight tile), which ascend_cost_model charges at L2 bandwidth.

_COUNTERS = ("cube_macs", "cube_fp32_macs", "vec_repeats", "gm_read_bytes", "gm_write_bytes", "cross_core_waits")


def _slice_inputs(gen, plan, pair, items, rows, *, dtype, scale_mode, n, k, masked, m_max):
    """Random inputs holding only the groups of the `pair` items (renumbered), and `items` renumbered."""
    groups = sorted({g for g, _, _ in pair})
    remap = {g: i for i, g in enumerate(groups)}
    sizes = [rows[g] for g in groups]
    G = len(groups)

    def vals(*shape):
        t = torch.randn(*shape, generator=gen)
        return (t * 40).round().clamp(-127, 127).to(torch.int8) if dtype == torch.int8 else t.to(dtype)

    lead = (G, m_max) if masked else (sum(sizes),)
    x, w = vals(*lead, k), vals(G, n, k)
    kb, nb = _cdiv(k, BLOCK), _cdiv(n, BLOCK)
    xs = ws = None
    if scale_mode == "per_tensor":
        xs, ws = torch.ones(1), torch.ones(G)
    elif scale_mode == "rowwise":
        xs, ws = torch.ones(*lead), torch.ones(G, n)
    elif scale_mode == "blockwise":
        xs, ws = torch.ones(*lead, kb), torch.ones(G, nb, kb)
    kw = dict(x=x, w=w, x_scale=xs, w_scale=ws, rows=sizes)
    if masked:
        kw.update(group_offsets=None, masked_m=torch.tensor(sizes, dtype=torch.int32))
    else:
        kw.update(group_offsets=torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist(), dtype=torch.int32),
                  masked_m=None)
    new_items = [(remap[g], mt, nt) for g, mt, nt in items]
    sub = dataclasses.replace(plan, num_groups=G, m_total=sum(sizes) if not masked else plan.m_total)
    return kw, sliced_plan(sub, new_items)


def _core0_counters(report) -> dict:
    tot = dict.fromkeys(_COUNTERS, 0)
    per_kind = {"AIC": dict(tot), "AIV": dict(tot)}
    for c in report["cores"]:
        kind = c["kind"]
        d = per_kind[kind]
        for f in _COUNTERS:
            d[f] = max(d[f], c[f])
    return per_kind


def estimate_shape(rows, *, n, k, dtype, scale_mode="none", masked=False, m_max=0, out_dtype=torch.bfloat16,
                   profile=None) -> dict:
    """Cost-model estimate (not a measurement) of a grouped GEMM with these group rows, without
    building its tensors: see the comment above. Returns ascend_cost_model's dict plus "method"."""
    from ... import ascend_cost_model

    prof = profile or active_profile()
    dname = str(dtype).removeprefix("torch.")
    if masked:
        plan = plan_grouped_gemm(masked_m=rows, m_max=m_max, layout="masked", n=n, k=k, dtype=dname,
                                 scale_mode=scale_mode, device=prof)
    else:
        plan = plan_grouped_gemm(rows, n=n, k=k, dtype=dname, scale_mode=scale_mode, device=prof)
    core0 = plan.item_list()[0::plan.num_cores]
    n0 = len(core0)
    gen = torch.Generator().manual_seed(0)
    runs = []
    pair = (core0 + core0)[:2]   # both runs hold the groups of both items: the same decode work
    for cnt in (1, 2) if n0 else ():
        kw, sub = _slice_inputs(gen, plan, pair, pair[:cnt], rows, dtype=dtype, scale_mode=scale_mode, n=n, k=k,
                                masked=masked, m_max=m_max)
        run_kernel(kw.pop("x"), kw.pop("w"), out_dtype=out_dtype, plan=sub, profile=prof, **kw)
        from ._common import last_counters
        rep = last_counters()["report"]
        runs.append((_core0_counters(rep), sum(r["read"] for r in rep["regions"] if r["name"] in ("x", "w"))))
    esize = 1 if dtype in (torch.int8, torch.float8_e4m3fn) else 2
    used_rows = sum(rows)
    live = sum(1 for r in rows if r > 0)
    x_rows = len(rows) * m_max if masked else used_rows
    decode_bytes = (x_rows + live * n) * k if dtype == torch.float8_e4m3fn else 0
    cores = []
    for kind in ("AIC", "AIV"):
        c = dict.fromkeys(_COUNTERS, 0.0)
        if len(runs) == 2 and n0 >= 1:
            one, two = runs[0][0][kind], runs[1][0][kind]
            for f in _COUNTERS:
                per = two[f] - one[f]
                fixed = one[f] - per
                if decode_bytes and kind == "AIV":   # the decode pass: whole call's bytes over every core
                    slice_dec = runs[0][1]
                    fixed = fixed * (decode_bytes / max(1, slice_dec)) / plan.num_cores
                c[f] = max(0.0, fixed) + n0 * per
        c.update(block=0, name=f"{kind}0", sync_alls=1 if decode_bytes else 0)
        cores.append(c)
    osize = torch.empty((), dtype=out_dtype).element_size()
    scale_bytes = {"none": 0, "per_tensor": 4 * (len(rows) + 1), "rowwise": 4 * (x_rows + len(rows) * n),
                   "blockwise": 4 * (x_rows * _cdiv(k, BLOCK) + len(rows) * _cdiv(n, BLOCK) * _cdiv(k, BLOCK))}
    hbm = (x_rows * k + live * n * k) * esize + used_rows * n * osize + scale_bytes[scale_mode] + 2 * 2 * decode_bytes
    core_bytes = 0.0
    if len(runs) == 2:   # every item's GM traffic on every core; what HBM does not serve comes from L2
        per_item = sum(runs[1][0][kd][f] - runs[0][0][kd][f] for kd in ("AIC", "AIV")
                       for f in ("gm_read_bytes", "gm_write_bytes"))
        core_bytes = per_item * plan.num_items
    report = {"cores": cores, "regions": [{"name": "x+w+y+scales", "read": hbm, "write": 0},
                                          {"name": "workspace (tile re-reads, L2)", "read": max(0.0, core_bytes - hbm),
                                           "write": 0}]}
    est = ascend_cost_model.estimate(report, prof).as_dict()
    est["method"] = (f"estimate: cost model on counters extrapolated from 2 simulated slices of AI core 0's "
                     f"work list ({n0} of {plan.num_items} items; 1 and 2 items run), {prof.name} x {prof.num_cores}")
    est["plan"] = plan.describe()
    macs = sum(r * n * k for r in rows)
    peak = prof.num_cores * 4096 * prof.clock_ghz * 1e9
    est["cube_peak_fraction"] = macs / peak / est["seconds"] if est["seconds"] else 0.0
    est["hbm_fraction"] = (hbm - 2 * 2 * decode_bytes) / (prof.hbm_bandwidth_gbs * 1e9) / est["seconds"]
    return est


def estimate_grouped_gemm(inputs: dict, profile) -> dict:
    """ascend_sim.estimate's hook for this op: the public-API arguments of one call -> estimate_shape."""
    schema.validate(_OP, {k: v for k, v in inputs.items() if k != "validate"}, full=True)
    x, w = inputs["x"], inputs["w"]
    masked = inputs.get("masked_m") is not None
    rows = _group_rows(x, w, inputs.get("group_offsets"), inputs.get("masked_m"))
    return estimate_shape(rows, n=int(w.shape[1]), k=int(w.shape[2]), dtype=x.dtype,
                          scale_mode=inputs.get("scale_mode", "none"), masked=masked,
                          m_max=int(x.shape[1]) if masked else 0,
                          out_dtype=inputs.get("out_dtype", torch.bfloat16), profile=profile)

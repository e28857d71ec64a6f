"""Ascend C incremental flash attention on the simulator: the glue of ``backends/ascend/incre_flash_attention``."""

from __future__ import annotations

import torch

from ... import native, schema
from ...tiling.incre_flash_attention import check_plan_for_tensors, plan_for_tensors
from ._common import SIM, Regions, last_dim_unit, ptr, strides4

_OP = "incre_flash_attention"
_QUANT = (torch.int8, torch.float8_e4m3fn)

# ----------------------------------------------------------------------------- the op


def incre_flash_attention(q, k_cache, v_cache, *, kv_lens, block_table, softmax_scale, causal,
                          atten_mask, pse_shift, k_scale, v_scale, k_offset, v_offset, plan=None, _target=SIM):
    """docs/internals.md "Backend module interface". Returns (out, lse). (_target: where the
    kernel runs, the simulator or an NPU, backends/npu.) A plan handed in directly (the API has
    no IFA plan argument) is checked against the tensors and the profile here."""
    C = native.require()
    target = _target
    target.check_device("q", q)
    prof = target.profile()
    dev = q.device
    B, S_q, H_q, D = q.shape
    if plan is None:
        plan = plan_for_tensors(q, k_cache, block_table, prof)
    else:
        check_plan_for_tensors(plan, q, k_cache, block_table)
        if plan.num_cores > prof.num_cores:
            raise ValueError(f"{target.name}: plan.num_cores = {plan.num_cores} exceeds the {prof.num_cores} AI "
                             f"cores of {prof.name}: the split-KV combine's SyncAll needs every block resident")
    tiling = plan.pack().numpy().tobytes()
    why = C.ascend_ifa_check_tiling(tiling)
    if why is not None:
        raise ValueError(f"{target.name}: the plan cannot run on the Ascend kernel: {why} ({plan.describe()})")

    kv_lens = kv_lens.to(torch.int32).contiguous()
    paged = block_table is not None
    if paged:
        block_table = block_table.to(torch.int32)
        if block_table.stride(-1) != 1:
            block_table = block_table.contiguous()
    quant = k_cache.dtype in _QUANT
    scales = [None if (t is None or not quant) else t.to(torch.float32).contiguous()
              for t in (k_scale, v_scale, k_offset, v_offset)]
    if k_cache.dtype != torch.int8:
        scales[2] = scales[3] = None
    mask = None if atten_mask is None else last_dim_unit(atten_mask, "atten_mask").view(torch.uint8)
    pse = None
    if pse_shift is not None:
        pse = pse_shift if pse_shift.dtype == torch.float32 else pse_shift.float()
        pse = last_dim_unit(pse, "pse_shift")
    # fp8 caches go to the kernel as their bytes (decoded on the vector cores).
    k_raw = k_cache.view(torch.uint8) if k_cache.dtype == torch.float8_e4m3fn else k_cache
    v_raw = v_cache.view(torch.uint8) if v_cache.dtype == torch.float8_e4m3fn else v_cache

    # Poisoned outputs / workspace: anything the kernel fails to write shows up as NaN.
    out = torch.full((B, S_q, H_q, D), float("nan"), dtype=q.dtype, device=dev)
    lse = torch.full((B, H_q, S_q), float("nan"), dtype=torch.float32, device=dev)
    n_o, n_l = plan.workspace_floats()
    o_acc = torch.full((n_o,), float("nan"), device=dev) if n_o else None
    l_acc = torch.full((n_l,), float("nan"), device=dev) if n_l else None
    q_code, kv_code = schema.dtype_code(q.dtype), schema.dtype_code(k_cache.dtype)
    ws = torch.full((max(1, C.ascend_ifa_workspace_bytes(tiling, q_code, kv_code)),), 0xFF, dtype=torch.uint8,
                    device=dev)
    ms, ps = strides4(mask), strides4(pse)
    params = schema.pack_params(
        _OP, q=q.data_ptr(), k=k_raw.data_ptr(), v=v_raw.data_ptr(), out=out.data_ptr(),
        lse=lse.data_ptr(), kv_lens=kv_lens.data_ptr(), block_table=ptr(block_table),
        atten_mask=ptr(mask), pse_shift=ptr(pse), k_scale=ptr(scales[0]), v_scale=ptr(scales[1]),
        k_offset=ptr(scales[2]), v_offset=ptr(scales[3]), o_accum=ptr(o_acc), lse_accum=ptr(l_acc),
        q_stride_b=q.stride(0), q_stride_s=q.stride(1), q_stride_h=q.stride(2),
        k_stride_0=k_cache.stride(0), k_stride_1=k_cache.stride(1), k_stride_2=k_cache.stride(2),
        v_stride_0=v_cache.stride(0), v_stride_1=v_cache.stride(1), v_stride_2=v_cache.stride(2),
        out_stride_b=out.stride(0), out_stride_s=out.stride(1), out_stride_h=out.stride(2),
        block_table_stride=block_table.stride(0) if paged else 0,
        mask_stride_b=ms[0], mask_stride_h=ms[1], mask_stride_q=ms[2], mask_stride_k=ms[3],
        pse_stride_b=ps[0], pse_stride_h=ps[1], pse_stride_q=ps[2], pse_stride_k=ps[3],
        num_blocks=int(k_cache.shape[0]) if paged else 0,
        softmax_scale=float(softmax_scale), causal=int(bool(causal)), q_dtype=q_code, kv_dtype=kv_code)
    # As CANN kernels receive them: the tensors' GM addresses, the workspace, and one tiling
    # buffer (the plan header, then the packed params whose scalars -- strides, scale, dtypes,
    # flags -- the kernel reads; it takes addresses only from its GM_ADDR arguments).
    tiling_t = target.gm_bytes(tiling + params, dev)
    gm = (("q", q), ("k_cache", k_raw), ("v_cache", v_raw), ("out", out), ("lse", lse), ("kv_lens", kv_lens),
          ("block_table", block_table), ("atten_mask", mask), ("pse_shift", pse), ("k_scale", scales[0]),
          ("v_scale", scales[1]), ("k_offset", scales[2]), ("v_offset", scales[3]), ("o_accum", o_acc),
          ("lse_accum", l_acc))
    regs = Regions()
    for name, t in gm + (("workspace", ws), ("tiling", tiling_t)):
        regs.add(name, t)
    args = [ptr(t) for _, t in gm] + [ws.data_ptr(), tiling_t.data_ptr()]
    target.launch(_OP, _OP, plan.num_cores, args, regs, prof, plan)
    return out, lse

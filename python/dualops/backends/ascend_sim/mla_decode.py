"""Ascend C MLA decode on the simulator: the glue of ``backends/ascend/mla_decode``.

The kernel reads the shared MLA plan (``dualops.tiling.plan_mla_decode``, the schedule the CUDA
kernel reads too; made here for the simulated profile's AI cores when not given) behind the
generated ``MlaDecodeAscendLaunch`` struct (``launch_header``: core count, tile sizes, page sizes,
formats), whose values ``dualops.heuristics.ascend.mla_launch`` chooses from the plan, the tensors
and the profile."""

from __future__ import annotations

import torch

from ... import native, plan_contract, schema
from ...heuristics import ascend as _heuristics
from ...tiling.mla_decode import KV_FORMATS, MlaPlan, plan_mla_decode
from ._common import SIM, Regions, ptr

_OP = "mla_decode"
KV_TILE = _heuristics.MLA_KV_TILE   # keys per tile (a module attribute: a planted-fault test doctors it)
KERNEL = "mla_decode"


def launch_header(plan: MlaPlan, *, num_cores: int, d_qk: int, q_dtype: torch.dtype, page_block_size: int,
                  extra_page_block_size: int = 0, topk_cols: int = 0, extra_topk_cols: int = 0,
                  kv_tile: int | None = None) -> list[int]:
    """The int32 fields of MlaDecodeAscendLaunch (ops/include/dualops/tiling.h), in order."""
    return plan_contract.pack_struct(_OP, "ascend", **_heuristics.mla_launch(
        plan, num_cores=num_cores, d_qk=d_qk, q_dtype=q_dtype, page_block_size=page_block_size,
        extra_page_block_size=extra_page_block_size, topk_cols=topk_cols, extra_topk_cols=extra_topk_cols,
        kv_tile=kv_tile or KV_TILE))


def tiling_bytes(header: list[int], plan: MlaPlan) -> bytes:
    return torch.cat([torch.tensor(header, dtype=torch.int32), plan.pack()]).numpy().tobytes()


def check_tiling(tiling: bytes, target, plan) -> None:
    """The Ascend kernel's own check of a launch (header sizes against the core's buffers, plan
    layout): a ValueError naming what cannot run."""
    why = native.require().ascend_mla_check_tiling(tiling)
    if why is not None:
        raise ValueError(f"{target.name}: the plan cannot run on the Ascend MLA kernel: {why} ({plan.describe()})")


def mla_decode(q, kv_cache, block_table, cache_seqlens, *, head_dim_v, plan, softmax_scale, causal, kv_format,
               indices, topk_length, attn_sink, extra_kv_cache, extra_indices, extra_topk_length, _target=SIM):
    """docs/internals.md "Backend module interface". Returns (out, lse). (_target: where the
    kernel runs, the simulator or an NPU, backends/npu.)"""
    C = native.require()
    target = _target
    target.check_device("q", q)
    prof = target.profile()
    dev = q.device
    if kv_format == "bf16" and kv_cache.dtype != q.dtype:   # a variant the kernel does not have
        raise NotImplementedError(f"{target.name} mla_decode: a 16-bit cache must have q's dtype ({q.dtype}), "
                                  f"got {kv_cache.dtype}")
    B, S_q, H_q, d_qk = (int(x) for x in q.shape)
    pbs = int(kv_cache.shape[1])
    sparse = indices is not None
    extra = extra_kv_cache is not None
    topk = int(indices.shape[-1]) if sparse else None
    extra_topk = int(extra_indices.shape[-1]) if extra else None
    seqlens = cache_seqlens.to(torch.int32).contiguous()
    if plan is None:
        plan = plan_mla_decode(seqlens, num_heads_q=H_q, num_heads_k=1, s_q=S_q, kv_format=kv_format, topk=topk,
                               extra_topk=extra_topk, page_block_size=pbs, device=prof)
    table = block_table.to(torch.int32)
    if table.stride(-1) != 1:
        table = table.contiguous()

    header = launch_header(plan, num_cores=prof.num_cores, d_qk=d_qk, q_dtype=q.dtype, page_block_size=pbs,
                           extra_page_block_size=int(extra_kv_cache.shape[1]) if extra else 0,
                           topk_cols=topk or 0, extra_topk_cols=extra_topk or 0)
    tiling = tiling_bytes(header, plan)
    check_tiling(tiling, target, plan)

    def i32(t):
        return None if t is None else t.to(torch.int32).contiguous()

    idx, idx_len, x_idx, x_len = i32(indices), i32(topk_length), i32(extra_indices), i32(extra_topk_length)
    sink = None if attn_sink is None else attn_sink.to(torch.float32).contiguous()
    kv = kv_cache.contiguous()
    xkv = None if not extra else extra_kv_cache.contiguous()

    # Poisoned outputs / workspace: anything the kernel fails to write shows up as NaN.
    out = torch.full((B, S_q, H_q, head_dim_v), float("nan"), dtype=q.dtype, device=dev)
    lse = torch.full((B, H_q, S_q), float("nan"), dtype=torch.float32, device=dev)
    split = plan.total_splits > plan.batch
    n_o, n_l = plan.workspace_floats(head_dim_v)
    o_acc = torch.full((n_o,), float("nan"), device=dev) if split else None
    l_acc = torch.full((n_l,), float("nan"), device=dev) if split else None
    ws = torch.full((max(1, C.ascend_mla_workspace_bytes(tiling)),), 0xFF, dtype=torch.uint8, device=dev)
    params = schema.pack_params(
        _OP, q=q.data_ptr(), kv_cache=kv.data_ptr(), block_table=table.data_ptr(), cache_seqlens=seqlens.data_ptr(),
        indices=ptr(idx), topk_length=ptr(idx_len), attn_sink=ptr(sink), extra_kv_cache=ptr(xkv),
        extra_indices=ptr(x_idx), extra_topk_length=ptr(x_len), out=out.data_ptr(), lse=lse.data_ptr(),
        o_accum=ptr(o_acc), lse_accum=ptr(l_acc), q_stride_b=q.stride(0), q_stride_s=q.stride(1),
        q_stride_h=q.stride(2), block_table_stride=table.stride(0), num_blocks=int(kv.shape[0]),
        extra_num_blocks=int(xkv.shape[0]) if extra else 0, softmax_scale=float(softmax_scale),
        causal=int(bool(causal)), kv_format=KV_FORMATS[kv_format], q_dtype=schema.dtype_code(q.dtype),
        topk=topk or 0, extra_topk=extra_topk or 0)
    params_t = target.gm_bytes(params, dev)
    tiling_t = target.gm_bytes(tiling, dev)

    regs = Regions()
    for name, t in (("q", q), ("kv_cache", kv), ("block_table", table), ("cache_seqlens", seqlens),
                    ("indices", idx), ("topk_length", idx_len), ("attn_sink", sink), ("extra_kv_cache", xkv),
                    ("extra_indices", x_idx), ("extra_topk_length", x_len), ("out", out), ("lse", lse),
                    ("o_accum", o_acc), ("lse_accum", l_acc), ("workspace", ws), ("params", params_t),
                    ("tiling", tiling_t)):
        regs.add(name, t)
    cores = header[plan_contract.backend_fields(_OP, "ascend").index("num_cores")]
    target.launch(_OP, KERNEL, cores, [params_t.data_ptr(), ws.data_ptr(), tiling_t.data_ptr()], regs, prof, plan)
    return out, lse

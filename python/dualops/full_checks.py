"""Value checks run with ``validate="full"``: they read tensor contents (a device sync), so they
are opt-in. Each takes a ``schema.Validated`` and raises ValueError naming the argument."""
from __future__ import annotations

import torch


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.int64)


def _check_range(op, name, t, lo, hi):
    t = _cpu(t)
    if t.numel() and (int(t.min()) < lo or int(t.max()) > hi):
        bad = ((t < lo) | (t > hi)).nonzero()[0].tolist()
        raise ValueError(f"{op}: {name}{bad} = {int(t[tuple(bad)])} is outside [{lo}, {hi}]")


def kv_lens_in_capacity(v):
    a, d = v.args, v.dims
    if a["kv_lens"] is not None:
        _check_range(v.op, "kv_lens", a["kv_lens"], 0, d["S_kv"])


def _used_blocks_in_range(op, name, table, lens, block_size, num_blocks):
    """Only the blocks a request needs must be valid ids; the rest of the row is padding."""
    table, lens = _cpu(table), _cpu(lens)
    for b in range(table.shape[0]):
        need = -(-int(lens[b]) // block_size)
        row = table[b, :need]
        if row.numel() and (int(row.min()) < 0 or int(row.max()) >= num_blocks):
            j = int(((row < 0) | (row >= num_blocks)).nonzero()[0])
            raise ValueError(f"{op}: {name}[{b}, {j}] = {int(row[j])} is not a block id in "
                             f"[0, {num_blocks}) and request {b} needs {need} blocks")


def block_table_ids_in_range(v):
    a, d = v.args, v.dims
    if a.get("block_table") is None:
        return
    if v.op == "incre_flash_attention":
        _used_blocks_in_range(v.op, "block_table", a["block_table"], a["kv_lens"], d["BS"], d["NB"])
    elif a.get("indices") is None:   # sparse MLA decode reads keys through indices, not the table
        _used_blocks_in_range(v.op, "block_table", a["block_table"], a["cache_seqlens"], d["PBS"], d["NB"])


def seqlens_in_capacity(v):
    d = v.dims
    if v.args.get("indices") is not None:   # sparse: cache_seqlens gives the batch only
        return
    _check_range(v.op, "cache_seqlens", v.args["cache_seqlens"], 0, d["MB"] * d["PBS"])


def group_offsets_monotone(v):
    offs = v.args["group_offsets"]
    if offs is None:
        return
    o = _cpu(offs)
    if int(o[0]) != 0:
        raise ValueError(f"{v.op}: group_offsets[0] must be 0, got {int(o[0])}")
    diff = o[1:] - o[:-1]
    if diff.numel() and int(diff.min()) < 0:
        g = int((diff < 0).nonzero()[0])
        raise ValueError(f"{v.op}: group_offsets must be non-decreasing, but "
                         f"group_offsets[{g + 1}] < group_offsets[{g}]")
    if int(o[-1]) > v.dims["M"]:
        raise ValueError(f"{v.op}: group_offsets[-1] = {int(o[-1])} exceeds x rows M = {v.dims['M']}")


def masked_m_in_range(v):
    if v.args["masked_m"] is not None:
        _check_range(v.op, "masked_m", v.args["masked_m"], 0, v.dims["M_max"])

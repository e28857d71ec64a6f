"""Planner for mla_decode: the FlashMLA-style decode scheduler (``get_mla_metadata``).

The KV of every request is cut into scheduler blocks of `block_tokens` (64) tokens, whatever
the cache's page_block_size (the kernel maps a token range onto pages itself). Every request
costs its blocks plus a fixed overhead (5 blocks; 2 for the memory-bound CUDA rows, see
mla_fixed_overhead); the total is dealt over `num_sm_parts`
parts in request order, each part taking at most `payload` = ceil(total / parts) + overhead.
A part takes whole requests while they fit, else the first `remaining payload - overhead`
blocks of the current request, which is then split across parts.

Packed layout: the header (FIELDS), then `num_sm_parts` part records of PART_STRIDE int32s,
then num_splits[batch + 1].

Part record (token units; `end_req` is inclusive, as FlashMLA's):
  [0] begin_req     first request the part works on (= batch for a part with no work)
  [1] end_req       last request, inclusive (= batch - 1 for a part with no work, so the
                    request loop `for r in begin_req..end_req` runs zero times)
  [2] begin_token   first key of begin_req this part attends (a multiple of block_tokens)
  [3] end_token     one past the last key of end_req this part attends (clipped to the
                    request's length; 0 for a zero-length request)
  [4] begin_split   split index, within begin_req's splits, of this part's piece of begin_req
                    (requests after begin_req start at split 0)
  [5] first_split   1 if begin_req has more than one split (the part writes partials for it)
  [6] last_split    1 if end_req has more than one split
  [7] reserved      0
Request r, for begin_req <= r <= end_req, covers tokens
  [r == begin_req ? begin_token : 0, r == end_req ? end_token : length(r)).
num_splits is a prefix sum: request r owns split slots num_splits[r] .. num_splits[r+1]-1;
a piece of r in part p uses slot num_splits[r] + (r == begin_req ? begin_split : 0).
A request with one split writes out/lse directly; others write fp32 partials to slot rows of
  o_accum[((slot * h_kv + kvh) * q_rows + row) * head_dim_v + d],
  lse_accum[(slot * h_kv + kvh) * q_rows + row],
with q_rows = s_q * h_q / h_kv and row = i * (h_q / h_kv) + g (query token major, as FlashMLA
views q as [b, s_q * group, h_kv, d]), merged by a combine pass with log-sum-exp weights.

Request lengths: dense decode uses cache_seqlens. Sparse decode (topk given) uses the index
list instead of the cache: every request has `topk` positions (the same for all its query
tokens; each 64-row q block gathers its own token's indices at those positions), and with an
extra pool `round_up(topk, block_tokens) + extra_topk` positions, the extra indices starting
on a block boundary. A zero-length request still costs one block and is owned by one part
(which writes out = 0 and lse = +inf for it).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from .. import plan_contract
from ..devices import DeviceProfile
from ..heuristics.cuda import MLA_CUDA_WGMMA_T_ROWS
from .base import PackedPlan, ceil_div, check_choice, check_device, check_int, int_list, round_up

MLA_VERSION = plan_contract.version("mla_decode")
MLA_BLOCK_TOKENS = 64       # scheduler block
MLA_FIXED_OVERHEAD = 5      # blocks of per-request cost (prologue, q load, epilogue)
MLA_CUDA_FIXED_OVERHEAD_FEW_ROWS = 2  # the same on CUDA for calls of at most MLA_CUDA_WGMMA_T_ROWS q rows
MLA_Q_BLOCK_ROWS = 64       # q rows of one CTA / AI core pass (FlashMLA's block M)
PART_STRIDE = 8
KV_FORMATS = plan_contract.enum("mla_decode", "kv_format")   # MlaKvFormat codes


@dataclasses.dataclass(frozen=True)
class MlaPlan(PackedPlan):
    """FlashMLA-style decode schedule; header, then parts [num_sm_parts, 8], then num_splits [batch + 1]."""

    version: int
    batch: int
    s_q: int
    h_q: int
    h_kv: int
    q_rows: int            # s_q * h_q / h_kv rows of one KV head's q
    num_m_blocks: int      # ceil(q_rows / 64): grid is (num_m_blocks, h_kv, num_sm_parts)
    num_sm_parts: int
    block_tokens: int
    fixed_overhead: int
    payload: int
    total_splits: int      # = num_splits[batch]; rows of the partial buffers
    part_stride: int
    kv_format: int         # KV_FORMATS code
    sparse: int            # 0 dense, 1 sparse (lengths from topk)
    topk: int              # sparse: indices per query token; dense: 0
    extra_topk: int        # sparse with an extra pool: its indices per query token; else 0
    page_block_size: int
    parts: tuple[int, ...] = ()       # [num_sm_parts, PART_STRIDE]
    num_splits: tuple[int, ...] = ()  # [batch + 1]

    FIELDS: ClassVar[tuple[str, ...]] = plan_contract.header_fields("mla_decode")  # MlaDecodeTiling
    ARRAYS: ClassVar[tuple[tuple[str, int], ...]] = (("parts", PART_STRIDE), ("num_splits", 1))
    VERSION: ClassVar[int] = MLA_VERSION

    def _array_rows(self, name: str) -> int:
        return self.num_sm_parts if name == "parts" else self.batch + 1

    def part(self, p: int) -> dict[str, int]:
        if not 0 <= p < self.num_sm_parts:
            raise ValueError(f"part must be in [0, {self.num_sm_parts}), got {p}")
        rec = self.parts[p * PART_STRIDE:(p + 1) * PART_STRIDE]
        keys = ("begin_req", "end_req", "begin_token", "end_token", "begin_split",
                "first_split", "last_split")
        return dict(zip(keys, rec))

    def token_ranges(self, lengths) -> list[tuple[int, int, int, int, int]]:
        """(part, request, begin, end, split_slot) of every piece, in part order; `lengths` are
        the per-request lengths the plan was made for (see `request_lengths`)."""
        lengths = list(lengths)
        out = []
        for p in range(self.num_sm_parts):
            rec = self.part(p)
            for r in range(rec["begin_req"], rec["end_req"] + 1):
                begin = rec["begin_token"] if r == rec["begin_req"] else 0
                end = rec["end_token"] if r == rec["end_req"] else lengths[r]
                slot = self.num_splits[r] + (rec["begin_split"] if r == rec["begin_req"] else 0)
                out.append((p, r, begin, end, slot))
        return out

    def splits_of(self, r: int) -> int:
        return self.num_splits[r + 1] - self.num_splits[r]

    def workspace_floats(self, head_dim_v: int = 512) -> tuple[int, int]:
        """(o_accum, lse_accum) fp32 element counts for the partial buffers (total_splits rows
        for every KV head and q row; a request with one split never touches them)."""
        rows = self.total_splits * self.h_kv * self.q_rows
        return rows * head_dim_v, rows

    def describe(self) -> str:
        fmt = {v: k for k, v in KV_FORMATS.items()}[self.kv_format]
        kind = f"sparse topk={self.topk}" + (f"+{self.extra_topk}" if self.extra_topk else "") \
            if self.sparse else "dense"
        return (f"MLA b={self.batch} s_q={self.s_q} h_q={self.h_q}/h_kv={self.h_kv} {fmt} {kind}: "
                f"{self.num_sm_parts} parts x {self.num_m_blocks} m-blocks, payload {self.payload} "
                f"blocks of {self.block_tokens}, {self.total_splits} splits")


def request_lengths(cache_seqlens, *, topk=None, extra_topk=None) -> list[int]:
    """Per-request lengths the scheduler works on (see the module docstring)."""
    lens = int_list("cache_seqlens", cache_seqlens)
    if topk is None:
        for i, v in enumerate(lens):
            if v < 0:
                raise ValueError(f"cache_seqlens must be >= 0, got cache_seqlens[{i}] = {v}")
        return lens
    length = round_up(topk, MLA_BLOCK_TOKENS) + extra_topk if extra_topk else topk
    return [length] * len(lens)


def num_sm_parts_for(device: DeviceProfile, *, s_q: int, h_q: int, h_kv: int) -> int:
    """FlashMLA's rule: cores / h_kv / ceil(q_rows / 64), at least 1 (AI cores on Ascend)."""
    q_rows = s_q * h_q // h_kv
    return max(device.num_cores // h_kv // ceil_div(q_rows, MLA_Q_BLOCK_ROWS), 1)


def mla_fixed_overhead(device: DeviceProfile, *, q_rows: int) -> int:
    """Blocks the scheduler charges per request piece: FlashMLA's 5, and 2 on CUDA for calls of
    at most MLA_CUDA_WGMMA_T_ROWS q rows (memory-bound: a piece's fixed cost is about one block's
    copy time; figures in BENCHMARKS.md)."""
    if device.kind == "cuda" and q_rows <= MLA_CUDA_WGMMA_T_ROWS:
        return MLA_CUDA_FIXED_OVERHEAD_FEW_ROWS
    return MLA_FIXED_OVERHEAD


def schedule(lengths: list[int], parts_n: int, ovh: int = MLA_FIXED_OVERHEAD) -> tuple[int, list[int], list[int]]:
    """FlashMLA's greedy split of the requests' blocks over `parts_n` parts (module docstring),
    `ovh` blocks of fixed cost per piece: (payload, parts [parts_n * PART_STRIDE], num_splits [batch + 1])."""
    batch = len(lengths)
    bt = MLA_BLOCK_TOKENS
    blocks = [max(ceil_div(n, bt), 1) for n in lengths]
    payload = ceil_div(sum(b + ovh for b in blocks), parts_n) + ovh

    parts: list[int] = []
    num_splits = [0] * (batch + 1)
    req, blk, split, cum = 0, 0, 0, 0     # next request, its next block, its next split index
    for _ in range(parts_n):
        begin_req, begin_tok, begin_split = req, blk * bt, split
        room = payload
        while req < batch:
            left = blocks[req] - blk
            if room >= left + ovh:          # the rest of this request fits
                cum += split + 1
                num_splits[req + 1] = cum
                room -= left + ovh
                req, blk, split = req + 1, 0, 0
            else:
                if room - ovh > 0:          # take what fits; the request continues elsewhere
                    blk += room - ovh
                    split += 1
                break
        if blk > 0:                         # ended inside request `req`
            end_req, end_tok = req, blk * bt
        else:                               # ended after request req - 1 (or had no work)
            end_req = req - 1
            end_tok = lengths[end_req] if end_req >= 0 else 0
        if begin_req > end_req:             # no work: canonical empty record
            parts += [batch, batch - 1, 0, 0, 0, 0, 0, 0]
        else:
            parts += [begin_req, end_req, begin_tok, min(end_tok, lengths[end_req]), begin_split,
                      0, 0, 0]
    if req != batch or blk != 0:
        raise AssertionError("MLA scheduler left work unassigned; payload rule broken")
    for p in range(parts_n):
        rec = parts[p * PART_STRIDE:(p + 1) * PART_STRIDE]
        if rec[0] <= rec[1]:
            rec[5] = int(num_splits[rec[0] + 1] - num_splits[rec[0]] > 1)
            rec[6] = int(num_splits[rec[1] + 1] - num_splits[rec[1]] > 1)
            parts[p * PART_STRIDE:(p + 1) * PART_STRIDE] = rec
    return payload, parts, num_splits


def plan_mla_decode(cache_seqlens, *, num_heads_q: int, num_heads_k: int = 1, s_q: int = 1,
                    kv_format: str = "bf16", topk: int | None = None,
                    extra_topk: int | None = None, page_block_size: int = 64,
                    device: DeviceProfile) -> MlaPlan:
    """Schedule one MLA decode step. cache_seqlens: int32 tensor (any device) or list of ints.
    topk (sparse decode): indices per query token; extra_topk: indices per query token into
    the extra pool (sparse only)."""
    device = check_device(device)
    h_q = check_int("num_heads_q", num_heads_q, min_value=1)
    h_kv = check_int("num_heads_k", num_heads_k, min_value=1)
    if h_q % h_kv:
        raise ValueError(f"num_heads_q must be a multiple of num_heads_k, got {h_q} and {h_kv}")
    s_q = check_int("s_q", s_q, min_value=1)
    if not isinstance(kv_format, str):
        raise TypeError(f"kv_format must be a str, got {type(kv_format).__name__}")
    check_choice("kv_format", kv_format, tuple(KV_FORMATS))
    page_block_size = check_int("page_block_size", page_block_size, min_value=1)
    if topk is not None:
        topk = check_int("topk", topk, min_value=1)
    if extra_topk is not None:
        if topk is None:
            raise ValueError("extra_topk needs topk (an extra pool is a sparse-decode feature)")
        extra_topk = check_int("extra_topk", extra_topk, min_value=0)
    lengths = request_lengths(cache_seqlens, topk=topk, extra_topk=extra_topk)
    batch = len(lengths)
    if batch == 0:
        raise ValueError("cache_seqlens must hold at least one request, got an empty sequence")

    parts_n = num_sm_parts_for(device, s_q=s_q, h_q=h_q, h_kv=h_kv)
    q_rows = s_q * h_q // h_kv
    ovh = mla_fixed_overhead(device, q_rows=q_rows)
    payload, parts, num_splits = schedule(lengths, parts_n, ovh)

    plan = MlaPlan(
        version=MLA_VERSION, batch=batch, s_q=s_q, h_q=h_q, h_kv=h_kv, q_rows=q_rows,
        num_m_blocks=ceil_div(q_rows, MLA_Q_BLOCK_ROWS), num_sm_parts=parts_n,
        block_tokens=MLA_BLOCK_TOKENS, fixed_overhead=ovh, payload=payload, total_splits=num_splits[batch], part_stride=PART_STRIDE,
        kv_format=KV_FORMATS[kv_format], sparse=int(topk is not None), topk=topk or 0,
        extra_topk=extra_topk or 0, page_block_size=page_block_size, parts=tuple(parts),
        num_splits=tuple(num_splits))
    plan.pack()
    return plan


_SHAPE_FIELDS = ("batch", "s_q", "h_q", "h_kv", "kv_format", "sparse", "topk", "extra_topk", "page_block_size")


def check_plan_for_call(plan, args: dict, dims: dict, *, full: bool = False) -> None:
    """Raise ValueError naming every shape-level field where ``plan`` (an ``MlaPlan`` or a plan
    made on the GPU) differs from the call (``args``: the validated mla_decode arguments, ``dims``:
    their schema dims); cheap, run on every call that passes a plan. ``full``: also check that a
    host plan's schedule (parts and num_splits) is the one made for this call's request lengths
    (reads cache_seqlens: a sync)."""
    sparse = args.get("indices") is not None
    extra = sparse and args.get("extra_indices") is not None
    want = (dims["B"], dims["S_q"], dims["H_q"], 1, KV_FORMATS.get(args.get("kv_format"), -1), int(sparse),
            dims.get("TOPK", 0) if sparse else 0, dims.get("TOPK2", 0) if extra else 0, dims["PBS"])
    got = tuple(getattr(plan, f) for f in _SHAPE_FIELDS)
    if got != want:
        what = ("the call's batch (q / cache_seqlens)", "the call's s_q (q.shape[1])",
                "the call's query heads (q.shape[2])", "the call's KV heads (kv_cache.shape[2])", "the call's kv_format",
                "whether the call passes indices", "the call's topk (indices.shape[2])",
                "the call's extra topk (extra_indices.shape[2])", "the call's page_block_size (kv_cache.shape[1])")
        names = {v: k for k, v in KV_FORMATS.items()}
        shown = lambda f, v: repr(names.get(v, v)) if f == "kv_format" else (bool(v) if f == "sparse" else v)  # noqa: E731
        diffs = "; ".join(f"plan.{f} = {shown(f, p)} but {w} is {shown(f, c)}"
                          for f, p, c, w in zip(_SHAPE_FIELDS, got, want, what) if p != c)
        raise ValueError(f"mla_decode: the plan was made for another call: {diffs}; make it with "
                         f"dualops.get_mla_metadata for this call's shapes")
    packed = getattr(plan, "packed", None)     # a plan made on the GPU
    if packed is not None and packed.device != args["q"].device:
        raise ValueError(f"mla_decode: the plan lives on {packed.device}, the tensors on {args['q'].device}")
    if full and isinstance(plan, MlaPlan):
        lengths = request_lengths(args["cache_seqlens"], topk=plan.topk if plan.sparse else None,
                                  extra_topk=plan.extra_topk if plan.sparse else None)
        payload, parts, num_splits = schedule(lengths, plan.num_sm_parts, plan.fixed_overhead)
        if tuple(num_splits) != tuple(plan.num_splits) or tuple(parts) != tuple(plan.parts) \
                or payload != plan.payload:
            raise ValueError(f"mla_decode: the plan's schedule was made for other request lengths "
                             f"than this call's cache_seqlens {lengths[:8]}{' ...' if len(lengths) > 8 else ''}"
                             f"; make the plan with dualops.get_mla_metadata(cache_seqlens, ...) "
                             f"for this step")

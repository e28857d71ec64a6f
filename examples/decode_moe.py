"""The mixture-of-experts half of the DeepSeek-shaped layer in decode_step.py: a router, expert
parallelism (all-to-all dispatch and combine) and the routed experts as two dualops grouped GEMMs,
in bf16 or fp8 with DeepSeek's blockwise scales.

Every shape here is fixed by the configuration (no value is read back to the host), so the whole
MoE can be compiled with torch.compile(fullgraph=True) and captured in a CUDA graph. The price is a
fixed-capacity exchange: each rank sends every other rank a buffer with room for all its own
token-expert pairs, padding included (a serving engine would size it from traffic statistics)."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

import dualops

FP8_MAX = 448.0
SCALE_BLOCK = 128  # DeepSeek's blockwise scales: 1x128 for activations, 128x128 for weights


def shard(n: int, world: int, rank: int) -> tuple[int, int]:
    """[start, stop) of rank's share of n items; the shares differ by at most one (128 heads over
    3 ranks: 43, 43, 42)."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def quantize_rows_blockwise(x: torch.Tensor):
    """fp8 e4m3 values and fp32 scales [..., K / 128] of x [..., K] (one scale per 1x128 block)."""
    xb = x.float().unflatten(-1, (-1, SCALE_BLOCK))
    scale = xb.abs().amax(-1).clamp_min(1e-4) / FP8_MAX
    q = (xb / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.flatten(-2), scale


def quantize_weight_blockwise(w: torch.Tensor):
    """fp8 e4m3 values and fp32 scales [G, N / 128, K / 128] of w [G, N, K] (128x128 blocks)."""
    g, n, k = w.shape
    wb = w.float().reshape(g, n // SCALE_BLOCK, SCALE_BLOCK, k // SCALE_BLOCK, SCALE_BLOCK)
    scale = wb.abs().amax(dim=(2, 4)).clamp_min(1e-4) / FP8_MAX
    q = (wb / scale[:, :, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(g, n, k), scale


def _quantize_per_expert(w: torch.Tensor):
    """quantize_weight_blockwise one expert at a time (the fp32 copy of 256 experts would not fit)."""
    q = torch.empty(w.shape, dtype=torch.float8_e4m3fn, device=w.device)
    scale = torch.empty(w.shape[0], w.shape[1] // SCALE_BLOCK, w.shape[2] // SCALE_BLOCK, device=w.device)
    for g in range(w.shape[0]):
        q[g:g + 1], scale[g:g + 1] = quantize_weight_blockwise(w[g:g + 1])
    return q, scale


class Experts:
    """The routed experts a rank owns: gate+up [G, 2F, H] and down [G, H, F] weights, bf16 or fp8
    blockwise, run by dualops.grouped_gemm in the contiguous or the masked layout."""

    def __init__(self, w13: torch.Tensor, w2: torch.Tensor, *, fp8: bool, layout: str, backend: str | None):
        if layout not in ("contiguous", "masked"):
            raise ValueError(f"layout must be 'contiguous' or 'masked', got {layout!r}")
        self.fp8, self.layout, self.backend = fp8, layout, backend
        self.groups, self.hidden = w13.shape[0], w13.shape[2]
        if fp8:
            for name, w in (("gate/up", w13), ("down", w2)):
                if w.shape[1] % SCALE_BLOCK or w.shape[2] % SCALE_BLOCK:
                    raise ValueError(f"fp8 blockwise experts need dims that are multiples of {SCALE_BLOCK}; "
                                     f"the {name} weight is {tuple(w.shape)}")
            self.w13, self.s13 = _quantize_per_expert(w13)
            self.w2, self.s2 = _quantize_per_expert(w2)
        else:
            self.w13, self.s13, self.w2, self.s2 = w13, None, w2, None

    def _gemm(self, x, w, w_scale, **layout):
        if not self.fp8:
            return dualops.grouped_gemm(x, w, backend=self.backend, **layout)
        xq, xs = quantize_rows_blockwise(x)
        return dualops.grouped_gemm(xq, w, scale_mode="blockwise", x_scale=xs, w_scale=w_scale,
                                    backend=self.backend, **layout)

    def _mlp(self, x, **layout):
        gate_up = self._gemm(x, self.w13, self.s13, **layout)
        gate, up = gate_up.chunk(2, dim=-1)
        return self._gemm((F.silu(gate.float()) * up.float()).to(x.dtype), self.w2, self.s2, **layout)

    def __call__(self, x: torch.Tensor, local_ids: torch.Tensor, m_max: int) -> torch.Tensor:
        """y [R, H] for received rows x [R, H] whose local expert is local_ids [R] (-1: a padding
        row, whose y is 0). m_max bounds the rows one expert can receive (masked layout)."""
        G = self.groups
        key = torch.where(local_ids < 0, torch.full_like(local_ids, G), local_ids)
        perm = torch.argsort(key, stable=True)
        key_sorted = key[perm]
        counts = torch.zeros(G + 1, dtype=torch.int32, device=x.device)
        counts.index_add_(0, key, torch.ones_like(key, dtype=torch.int32))
        starts = torch.cumsum(counts, 0, dtype=torch.int32) - counts
        xs = x[perm]
        if self.layout == "contiguous":
            ys = self._mlp(xs, group_offsets=starts)  # [G + 1]: padding rows (after starts[G]) give 0
        else:
            # row i of expert g goes to xm[g, i]; padding rows land in a spare group G that no GEMM reads
            grp = key_sorted.long()
            pos = (torch.arange(x.shape[0], device=x.device) - starts[grp].long()).clamp(0, m_max - 1)
            xm = torch.zeros(G + 1, m_max, x.shape[1], dtype=x.dtype, device=x.device)
            xm[grp, pos] = xs
            ym = self._mlp(xm[:G], masked_m=counts[:G].contiguous())
            valid = (grp < G)[:, None]
            ys = torch.where(valid, ym[grp.clamp_max(G - 1), pos], torch.zeros((), dtype=ym.dtype, device=x.device))
        y = torch.empty_like(ys)
        y[perm] = ys
        return y


class MoE:
    """Router (softmax or DeepSeek-V3's sigmoid with a selection bias) + top-k + expert-parallel
    routed experts + one shared expert. ``group`` is the expert-parallel process group (None: all
    experts on this process); expert e lives on the rank whose ``shard`` of the experts holds it."""

    def __init__(self, *, router_w, router_bias, topk, router, w13, w2, shared_w13, shared_w2, fp8, layout,
                 backend, max_tokens, group=None):
        if router not in ("softmax", "sigmoid"):
            raise ValueError(f"router must be 'softmax' or 'sigmoid', got {router!r}")
        self.router_w, self.router_bias, self.topk, self.router = router_w, router_bias, topk, router
        self.shared_w13, self.shared_w2 = shared_w13, shared_w2
        self.group = group
        self.world = dist.get_world_size(group) if group is not None else 1
        self.rank = dist.get_rank(group) if group is not None else 0
        E = router_w.shape[0]
        owner = torch.empty(E, dtype=torch.int64)
        local = torch.empty(E, dtype=torch.int64)
        for r in range(self.world):
            a, b = shard(E, self.world, r)
            owner[a:b], local[a:b] = r, torch.arange(b - a)
        self.owner, self.local = owner.to(router_w.device), local.to(router_w.device)
        a, b = shard(E, self.world, self.rank)
        if w13.shape[0] != b - a:
            raise ValueError(f"rank {self.rank} owns experts {a}..{b - 1} but was given {w13.shape[0]} of them")
        self.experts = Experts(w13, w2, fp8=fp8, layout=layout, backend=backend)
        self.max_tokens = max_tokens  # most tokens one rank routes in a step (fixes the buffers)

    def route(self, h: torch.Tensor, forced_ids=None):
        """(expert ids [T, k], their weights [T, k] fp32, router scores [T, E] fp32). forced_ids
        replaces the top-k choice (the parity checks use it: a rounding-level difference in the
        scores may swap the k-th and (k+1)-th expert, a discontinuity no tolerance covers)."""
        logits = h.float() @ self.router_w.float().t()
        if self.router == "softmax":
            scores = logits.softmax(-1)
            ids = scores.topk(self.topk, dim=-1).indices if forced_ids is None else forced_ids
            weights = scores.gather(1, ids)
        else:
            scores = logits.sigmoid()
            ids = (scores + self.router_bias).topk(self.topk, dim=-1).indices if forced_ids is None else forced_ids
            weights = scores.gather(1, ids)
            weights = weights / weights.sum(-1, keepdim=True)
        return ids, weights, scores

    def _exchange(self, send: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return send
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        return recv

    def routed(self, h: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, timer=None) -> torch.Tensor:
        T, k = ids.shape
        W, cap = self.world, self.max_tokens * k  # room for all of a rank's pairs at every destination
        dest = self.owner[ids.reshape(-1)]  # [T*k], pair a = t*k + j
        order = torch.argsort(dest, stable=True)
        per_dest = torch.zeros(W, dtype=torch.int64, device=h.device).index_add_(0, dest, torch.ones_like(dest))
        first = torch.cumsum(per_dest, 0) - per_dest
        pos_sorted = torch.arange(T * k, device=h.device) - first[dest[order]]
        slot = torch.empty_like(dest)
        slot[order] = dest[order] * cap + pos_sorted  # where pair a travels in the exchange buffer
        send_x = torch.zeros(W * cap, h.shape[1], dtype=h.dtype, device=h.device)
        send_x[slot] = h.repeat_interleave(k, dim=0)
        send_e = torch.full((W * cap,), -1, dtype=torch.int64, device=h.device)
        send_e[slot] = self.local[ids.reshape(-1)]
        recv_x, recv_e = self._exchange(send_x), self._exchange(send_e)
        if timer is not None:
            timer.lap("moe dispatch")
        y_recv = self.experts(recv_x, recv_e, m_max=W * self.max_tokens)
        if timer is not None:
            timer.lap("grouped_gemm (routed experts)")
        back = self._exchange(y_recv)
        out = (back[slot].view(T, k, -1).float() * weights.unsqueeze(-1)).sum(1)
        if timer is not None:
            timer.lap("moe combine")
        return out

    def shared(self, h: torch.Tensor) -> torch.Tensor:
        gate, up = (h @ self.shared_w13.t()).chunk(2, dim=-1)
        return ((F.silu(gate.float()) * up.float()).to(h.dtype) @ self.shared_w2.t()).float()

    def __call__(self, h: torch.Tensor, timer=None, forced_ids=None):
        """(routed + shared expert output [T, H] fp32, expert ids, router scores)."""
        ids, weights, scores = self.route(h, forced_ids)
        if timer is not None:
            timer.lap("router")
        out = self.routed(h, ids, weights, timer)
        out = out + self.shared(h)
        if timer is not None:
            timer.lap("shared expert")
        return out, ids, scores

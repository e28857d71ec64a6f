"""The two decoder layers of decode_step.py, built from dualops ops with random weights:

* ``MlaMoeLayer``: a DeepSeek-V3-shaped layer. MLA attention in its absorbed (decode) form over a
  paged latent cache (dualops.mla_decode), then a mixture of experts (decode_moe.py).
* ``GqaLayer``: a GQA model's attention block (Llama-3-70B shapes) over a paged K/V cache
  (dualops.incre_flash_attention).

Tensor parallelism shards the attention heads over the ``tp`` group: any head count per rank
(shares differ by at most one, so 128 heads over 3 ranks run 43, 43 and 42). The output
projection is row-parallel: each rank's partial sum in fp32, one all-reduce. RoPE and the
normalisation weights are left out: they change no shape and no dualops call."""
from __future__ import annotations

import dataclasses
import zlib

import torch
import torch.distributed as dist
import torch.nn.functional as F

import dualops
from decode_moe import MoE, shard

D_V = 512  # MLA: the latent part of a token, also its value vector


def mla_formats() -> list[str]:
    """The MLA cache formats of the op schema with DeepSeek-V3's 576-dim latent (a format whose
    token layout is not 576 wide, such as MODEL1's, belongs to another model)."""
    choices = dualops.schema.load("mla_decode").arg("kv_format").raw["choices"]
    return [f for f in choices if dualops.quant.MLA_D_QK.get(f, 576) == 576]


@dataclasses.dataclass(frozen=True)
class Config:
    batch: int = 64            # requests decoded together
    context: int = 4096        # mean cached tokens per request (lengths vary around it)
    page: int = 64             # tokens per cache page
    steps: int = 16            # decode steps the caches have room for
    hidden: int = 7168
    q_lora: int = 1536
    h_q: int = 128
    d_qk: int = 576            # 512 latent + 64 RoPE
    v_head: int = 128          # per-head value dim after the up-projection
    kv_format: str = "bf16"
    experts: int = 256
    topk: int = 8
    expert_dim: int = 2048
    router: str = "sigmoid"    # DeepSeek-V3's; "softmax" as in DeepSeek-V2 / Mixtral
    moe_dtype: str = "bf16"    # or "fp8" (blockwise scales)
    moe_layout: str = "contiguous"  # or "masked"
    gqa_hidden: int = 8192
    gqa_h_q: int = 64
    gqa_h_kv: int = 8
    gqa_d: int = 128


# Realistic sizes, a small GPU / CPU size (odd head counts: 10 heads = 5 per rank on 2 ranks), and
# a tiny one for the slow CPU simulator of the Ascend kernels (on 2 ranks: MLA heads 4 + 3, GQA heads
# 3 + 3, experts 4 + 3, requests 2 + 1).
SIZES = {
    "full": Config(),
    "small": Config(batch=6, context=150, page=32, hidden=512, q_lora=128, h_q=10, v_head=32, experts=16, topk=4,
                    expert_dim=256, gqa_hidden=512, gqa_h_q=10, gqa_h_kv=2, gqa_d=64),
    "tiny": Config(batch=3, context=40, page=16, steps=4, hidden=256, q_lora=64, h_q=7, v_head=16, experts=7, topk=2,
                   expert_dim=128, gqa_hidden=256, gqa_h_q=6, gqa_h_kv=2, gqa_d=64),
}


def capacity(cfg: Config) -> int:
    """Tokens a request's cache has room for: its longest starting length plus the steps."""
    return cfg.context * 3 // 2 + cfg.steps


def start_lengths(cfg: Config, seed: int) -> torch.Tensor:
    """Cached tokens per request before the first step (int32 [batch], on the CPU)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(max(cfg.context // 2, 1), cfg.context * 3 // 2 + 1, (cfg.batch,), generator=g,
                         dtype=torch.int32)


class Init:
    """Seeded random tensors: a tensor's values depend on the seed and its name only, so every rank
    and every backend builds the same model (on ``gen_device``, then moved to ``device``)."""

    def __init__(self, seed: int, device, gen_device=None):
        self.seed, self.device = seed, torch.device(device)
        self.gen_device = torch.device(gen_device) if gen_device is not None else self.device

    def randn(self, name: str, shape, scale=1.0, dtype=torch.bfloat16):
        g = torch.Generator(device=self.gen_device).manual_seed(self.seed * 7919 + zlib.crc32(name.encode()))
        x = torch.randn(shape, generator=g, device=self.gen_device) * scale
        return x.to(device=self.device, dtype=dtype)


class PagedCache:
    """A paged cache [pages, page, *token] for ``batch`` requests with room for ``capacity`` tokens
    each, pages dealt in a random order (as a serving engine's allocator leaves them). ``rows``:
    the requests this process serves (its block-table rows; the example keeps every page)."""

    def __init__(self, init: Init, name: str, batch: int, capacity: int, page: int, token_shape, rows):
        per_req = -(-capacity // page)
        g = torch.Generator().manual_seed(init.seed + zlib.crc32(name.encode()))
        table = torch.randperm(batch * per_req, generator=g).to(torch.int32).view(batch, per_req)
        self.block_table = table[rows[0]:rows[1]].contiguous().to(init.device)
        self.page = page
        self.data = init.randn(name, (batch * per_req, page, *token_shape))

    def append(self, rows: torch.Tensor, seqlens: torch.Tensor):
        """Write one new token per request (rows [B, *token]) at position seqlens[b]; no host sync."""
        pos = seqlens.long()
        page = self.block_table.gather(1, (pos // self.page)[:, None])[:, 0].long()
        flat = self.data.view(-1, *self.data.shape[2:])
        flat.index_copy_(0, page * self.page + pos % self.page, rows.to(flat.dtype))


class Timer:
    """Per-op wall time of an eager step: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.totals: dict[str, float] = {}
        self.marks: list = []

    def start(self):
        self.marks = [(None, self._now())]

    def _now(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        import time
        return time.perf_counter()

    def lap(self, name: str):
        self.marks.append((name, self._now()))

    def stop(self):
        if self.cuda:
            torch.cuda.synchronize()
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            ms = a.elapsed_time(b) if self.cuda else (b - a) * 1e3
            self.totals[name] = self.totals.get(name, 0.0) + ms


def _rms(x):
    return F.rms_norm(x.float(), (x.shape[-1],)).to(x.dtype)


def _row_parallel(x_part: torch.Tensor, w_part: torch.Tensor, group) -> torch.Tensor:
    """x_part @ w_part.T summed over the tp group (fp32 partials, one all-reduce)."""
    y = x_part.float() @ w_part.float().t()
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(y, group=group)
    return y


class MlaMoeLayer:
    """A DeepSeek-V3-shaped decoder layer (absorbed MLA + MoE) on this rank's heads and experts."""

    def __init__(self, cfg: Config, init: Init, *, batch_range, tp_group=None, ep_group=None, backend=None):
        if cfg.kv_format not in mla_formats():
            raise ValueError(f"kv_format must be one of {mla_formats()}, got {cfg.kv_format!r}")
        tp = (dist.get_world_size(tp_group), dist.get_rank(tp_group)) if tp_group is not None else (1, 0)
        ep = (dist.get_world_size(ep_group), dist.get_rank(ep_group)) if ep_group is not None else (1, 0)
        self.cfg, self.backend, self.tp_group = cfg, backend, tp_group
        self.heads = shard(cfg.h_q, *tp)
        h0, h1 = self.heads
        self.h_local = h1 - h0
        H, L, D = cfg.hidden, cfg.q_lora, cfg.d_qk
        self.wq_a = init.randn("mla.wq_a", (L, H), H ** -0.5)
        self.wq_b = init.randn("mla.wq_b", (cfg.h_q, D, L), L ** -0.5)[h0:h1].reshape(-1, L).contiguous()
        self.wkv_a = init.randn("mla.wkv_a", (D, H), H ** -0.5)
        self.w_uv = init.randn("mla.w_uv", (cfg.h_q, D_V, cfg.v_head), D_V ** -0.5)[h0:h1].contiguous()
        self.wo = init.randn("mla.wo", (H, cfg.h_q, cfg.v_head), (cfg.h_q * cfg.v_head) ** -0.5)
        self.wo = self.wo[:, h0:h1].reshape(H, -1).contiguous()
        # the requests of this rank (all of them unless the batch is split over an expert-parallel group)
        self.cache = PagedCache(init, "mla.cache", cfg.batch, capacity(cfg), cfg.page, (1, D), batch_range)
        if cfg.kv_format != "bf16":
            self.cache.data = dualops.quant.pack_mla_kv(self.cache.data, kv_format=cfg.kv_format)
        E, F_ = cfg.experts, cfg.expert_dim
        e0, e1 = shard(E, *ep)
        w13 = torch.empty(e1 - e0, 2 * F_, H, dtype=torch.bfloat16, device=init.device)
        w2 = torch.empty(e1 - e0, H, F_, dtype=torch.bfloat16, device=init.device)
        for e in range(e0, e1):  # expert by expert: the same values whichever rank holds it
            w13[e - e0] = init.randn(f"moe.w13.{e}", (2 * F_, H), H ** -0.5)
            w2[e - e0] = init.randn(f"moe.w2.{e}", (H, F_), F_ ** -0.5)
        max_tokens = -(-cfg.batch // ep[0])
        self.moe = MoE(router_w=init.randn("moe.router", (E, H), H ** -0.5),
                       router_bias=init.randn("moe.bias", (E,), 0.1, torch.float32), topk=cfg.topk,
                       router=cfg.router, w13=w13, w2=w2,
                       shared_w13=init.randn("moe.shared_w13", (2 * F_, H), H ** -0.5),
                       shared_w2=init.randn("moe.shared_w2", (H, F_), F_ ** -0.5),
                       fp8=cfg.moe_dtype == "fp8", layout=cfg.moe_layout, backend=backend, max_tokens=max_tokens,
                       group=ep_group)

    def plan(self, lens_after, device=None, on_device=False):
        """The MLA schedule for this step's lengths (made once per step, reused by every layer)."""
        return dualops.get_mla_metadata(lens_after, num_heads_q=self.h_local, kv_format=self.cfg.kv_format,
                                        page_block_size=self.cfg.page, device=device, on_device=on_device)

    def _append_latent(self, kv, seqlens):
        if self.cfg.kv_format == "bf16":
            rows = kv[:, None, :]
        else:
            rows = dualops.quant.pack_mla_kv(kv[:, None, None, :], kv_format=self.cfg.kv_format)[:, 0]
        self.cache.append(rows, seqlens)

    def __call__(self, x, seqlens, plan=None, timer=None, forced_ids=None):
        """x [B, hidden] bf16, seqlens [B] int32 (tokens cached before this one) -> (x' [B, hidden],
        the MoE's expert ids, the router scores). The step's token is appended to the cache."""
        B, cfg = x.shape[0], self.cfg
        h = _rms(x)
        q = (_rms(h @ self.wq_a.t()) @ self.wq_b.t()).view(B, 1, self.h_local, cfg.d_qk)
        kv = h @ self.wkv_a.t()
        kv = torch.cat([_rms(kv[:, :D_V]), kv[:, D_V:]], dim=-1)
        self._append_latent(kv, seqlens)
        if timer is not None:
            timer.lap("q / latent projections, cache append")
        out, _lse = dualops.mla_decode(q, self.cache.data, self.cache.block_table, seqlens + 1, plan=plan,
                                       kv_format=cfg.kv_format, backend=self.backend)
        if timer is not None:
            timer.lap("mla_decode")
        o = torch.einsum("bhc,hcd->bhd", out[:, 0], self.w_uv).reshape(B, -1)
        x = x + _row_parallel(o, self.wo, self.tp_group).to(x.dtype)
        if timer is not None:
            timer.lap("attention out-projection (+ all-reduce)")
        moe_out, ids, scores = self.moe(_rms(x), timer, forced_ids)
        return (x.float() + moe_out).to(x.dtype), ids, scores


class GqaLayer:
    """A GQA model's attention block (Llama-3-70B shapes) on this rank's KV heads and their query heads."""

    def __init__(self, cfg: Config, init: Init, *, batch_range, tp_group=None, backend=None):
        tp = (dist.get_world_size(tp_group), dist.get_rank(tp_group)) if tp_group is not None else (1, 0)
        if cfg.gqa_h_kv < tp[0]:
            raise ValueError(f"--tp {tp[0]} is more ranks than the GQA model's {cfg.gqa_h_kv} KV heads")
        self.cfg, self.backend, self.tp_group = cfg, backend, tp_group
        group = cfg.gqa_h_q // cfg.gqa_h_kv
        k0, k1 = shard(cfg.gqa_h_kv, *tp)
        self.h_kv, self.h_q = k1 - k0, (k1 - k0) * group
        H, D = cfg.gqa_hidden, cfg.gqa_d
        wq = init.randn("gqa.wq", (cfg.gqa_h_q, D, H), H ** -0.5)[k0 * group:k1 * group]
        wk = init.randn("gqa.wk", (cfg.gqa_h_kv, D, H), H ** -0.5)[k0:k1]
        wv = init.randn("gqa.wv", (cfg.gqa_h_kv, D, H), H ** -0.5)[k0:k1]
        self.wqkv = torch.cat([wq, wk, wv]).reshape(-1, H).contiguous()
        self.wo = init.randn("gqa.wo", (H, cfg.gqa_h_q, D), (cfg.gqa_h_q * D) ** -0.5)
        self.wo = self.wo[:, k0 * group:k1 * group].reshape(H, -1).contiguous()
        self.k, self.v = (PagedCache(init, f"gqa.{n}", cfg.batch, capacity(cfg), cfg.page, (cfg.gqa_h_kv, D),
                                     batch_range) for n in "kv")
        for c in (self.k, self.v):  # this rank's KV heads
            c.data = c.data[:, :, k0:k1].contiguous()
        self.v.block_table = self.k.block_table  # one page table for both caches, as incre_flash_attention reads them

    def __call__(self, x, seqlens, plan=None, timer=None, forced_ids=None):
        B, D = x.shape[0], self.cfg.gqa_d
        q, k, v = (_rms(x) @ self.wqkv.t()).split([self.h_q * D, self.h_kv * D, self.h_kv * D], dim=-1)
        self.k.append(k.view(B, self.h_kv, D), seqlens)
        self.v.append(v.view(B, self.h_kv, D), seqlens)
        if timer is not None:
            timer.lap("qkv projection, cache append")
        out = dualops.incre_flash_attention(q.view(B, 1, self.h_q, D), self.k.data, self.v.data,
                                            kv_lens=seqlens + 1, block_table=self.k.block_table,
                                            backend=self.backend)
        if timer is not None:
            timer.lap("incre_flash_attention")
        x = x + _row_parallel(out.reshape(B, -1), self.wo, self.tp_group).to(x.dtype)
        if timer is not None:
            timer.lap("attention out-projection (+ all-reduce)")
        return x, None, None

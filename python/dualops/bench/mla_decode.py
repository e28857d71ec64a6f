"""Bench workload of MLA decode (protocol: ``bench/workloads.py``).

FLOPs and bytes as FlashMLA counts them: FLOPs = 2 · h_q · s_q · Σ keys ·
(d_qk + d_v), keys = s_k per request (dense) or topk per query token (sparse); bytes = the KV
tokens read once in the cache format + q + out. ``varlen``: request lengths ~ N(s_k, s_k / 2),
clipped to [1, 2 s_k] (a fixed draw per shape), counted as they are."""
from __future__ import annotations

import math

import torch

from .. import quant
from . import workloads

OP = "mla_decode"
KEYS = {"b": 64, "s_q": 1, "h_q": 64, "s_k": 4096, "d_qk": 576, "page": 64, "kv_format": "bf16",
        "topk": 0, "causal": False, "dtype": "bf16", "varlen": False}
X_KEY = "s_k"
D_V = 512
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def normalize(shape: dict) -> dict:
    s = workloads.normalize(KEYS, shape, OP)
    workloads.positive(OP, s, "b", "s_q", "h_q", "s_k", "page")
    workloads.choice(OP, "kv_format", s["kv_format"], ("bf16", "fp8_v32", "fp8_model1", "int8_v32"))
    workloads.choice(OP, "dtype", s["dtype"], tuple(_DT))
    if s["kv_format"] == "fp8_model1":
        s["d_qk"] = 512
    elif s["kv_format"] in ("fp8_v32", "int8_v32"):
        s["d_qk"] = 576
    workloads.choice(OP, "d_qk", s["d_qk"], (576, 512))
    if s["topk"] and s["causal"]:
        raise ValueError(f"{OP} bench shape: causal applies to dense decode (topk=0)")
    if s["varlen"] and s["topk"]:
        raise ValueError(f"{OP} bench shape: varlen applies to dense decode (topk=0)")
    if s["topk"] > s["s_k"]:
        raise ValueError(f"{OP} bench shape: topk ({s['topk']}) must be <= s_k ({s['s_k']})")
    return s


def label(s: dict) -> str:
    mode = f" sparse topk{s['topk']}" if s["topk"] else ""
    fmt = "" if s["kv_format"] == "bf16" else f" {s['kv_format']}"
    sq = f" s_q{s['s_q']}" + (" causal" if s["causal"] else "") if s["s_q"] > 1 else ""
    sq += " varlen" if s["varlen"] else ""
    page = f" page{s['page']}" if s["page"] != 64 else ""
    return f"b{s['b']} h{s['h_q']} s_k{s['s_k']} d{s['d_qk']}{fmt}{mode}{sq}{page}"


def lengths(s: dict) -> list[int]:
    """Per-request cache lengths of a dense shape (all s_k, or the varlen draw)."""
    if not s.get("varlen"):
        return [s["s_k"]] * s["b"]
    g = torch.Generator().manual_seed(s["b"] * 100003 + s["s_k"])
    x = torch.randn(s["b"], generator=g) * (s["s_k"] / 2) + s["s_k"]
    return [int(v) for v in x.round().clamp(1, 2 * s["s_k"]).tolist()]


def _keys_per_query_token(s):
    return s["topk"] if s["topk"] else sum(lengths(s)) / s["b"]


def flops(s: dict) -> float:
    return 2.0 * s["h_q"] * s["s_q"] * s["b"] * _keys_per_query_token(s) * (s["d_qk"] + D_V)


def bytes_moved(s: dict) -> float:
    per_token = quant.mla_bytes_per_token(s["kv_format"], s["d_qk"])
    tokens = s["b"] * s["s_q"] * s["topk"] if s["topk"] else sum(lengths(s))
    qo = s["b"] * s["s_q"] * s["h_q"] * (s["d_qk"] + D_V) * 2
    return float(tokens * per_token + qo)


def build(s: dict, device, g: torch.Generator) -> dict:
    import dualops

    dt = _DT[s["dtype"]]
    B, pbs = s["b"], s["page"]
    lens = lengths(s)
    per = math.ceil(max(lens) / pbs)
    n_blocks = B * per

    def rnd(*shape, dtype=dt):
        if str(device) == "cpu":
            return torch.randn(*shape, generator=g).to(dtype)
        return torch.randn(*shape, device=device, dtype=dtype)

    q = rnd(B, s["s_q"], s["h_q"], s["d_qk"])
    kv = rnd(n_blocks, pbs, 1, s["d_qk"], dtype=torch.bfloat16 if s["kv_format"] != "bf16" else dt)
    if s["kv_format"] != "bf16":
        kv = quant.pack_mla_kv(kv, s["kv_format"])
    table = torch.randperm(n_blocks, generator=g).to(torch.int32).view(B, per).to(device)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=device)
    inputs = dict(q=q, kv_cache=kv, block_table=table, cache_seqlens=seqlens, causal=s["causal"],
                  kv_format=s["kv_format"])
    if s["topk"]:
        # each query token attends topk distinct positions of its request's context, drawn at random
        # (a model's top-k selection), addressed through the request's block table (block id * page +
        # offset), so the keys of a list lie in its request's pages
        pos = torch.stack([torch.randperm(lens[b], generator=g)[: s["topk"]]
                           for b in range(B) for _ in range(s["s_q"])])
        rows = torch.arange(B).repeat_interleave(s["s_q"]).view(-1, 1)
        idx = table.cpu()[rows, pos // pbs] * pbs + pos % pbs
        inputs["indices"] = idx.view(B, s["s_q"], s["topk"]).to(torch.int32).to(device)
    inputs["plan"] = dualops.get_mla_metadata(
        seqlens, num_heads_q=s["h_q"], num_heads_k=1, s_q=s["s_q"], kv_format=s["kv_format"],
        topk=s["topk"] or None, page_block_size=pbs)
    return inputs


# Reduced configurations the Ascend simulator runs for a bench row's estimate (keys per request).
SIM_KEYS = (256, 512)


def sim_estimate(s: dict, profile: str | None = None) -> dict:
    """The Ascend cost model's estimate of shape ``s`` (never a measurement). Simulating the full
    shape on the CPU would take minutes, so the simulator runs the real kernel on two reduced
    configurations (the same heads, s_q, format, page, causal; at most one request per AI core;
    256 and 512 keys per request) for the named profile, and every term of the model (cube,
    vector, DMA, sync, HBM, L2) is extrapolated linearly in the work one AI core is dealt,
    b * (ceil(keys / 64) + 5) scheduler blocks, as the MLA plan deals it."""
    from .. import ascend_cost_model, devices
    from ..backends import ascend_sim

    prof = devices.profile(profile or devices.DEFAULT_SIM_PROFILE)
    keys = s["topk"] or s["s_k"]
    b_small = min(s["b"], prof.num_cores)
    runs = []
    for k in SIM_KEYS:
        small = dict(s, b=b_small, s_k=k, topk=k if s["topk"] else 0)
        inputs = build(small, "cpu", torch.Generator().manual_seed(0))
        inputs.pop("plan")   # made for the simulated profile
        est = ascend_sim.estimate(OP, inputs, profile=prof.name)
        runs.append((b_small * (math.ceil(k / 64) + 5), est))
    work = s["b"] * (math.ceil(keys / 64) + 5)
    return ascend_cost_model.extrapolate(runs, work, prof) | {
        "extrapolated_from": [dict(b=b_small, keys=k) for k in SIM_KEYS]}


def call(inputs: dict, backend: str):
    import dualops

    return lambda: dualops.mla_decode(**inputs, backend=backend)


def peers(s: dict, inputs: dict) -> dict:
    """The peers of this call (``bench/peers.py``): name -> callable, or why not here."""
    from . import peers as peer_mod

    return peer_mod.for_call(OP, s, inputs)

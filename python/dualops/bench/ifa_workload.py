"""Bench workload of incremental flash attention (protocol: ``bench/workloads.py``).

Every request holds ``s_kv`` keys (decode benchmarks use uniform lengths so the peers, which
have no per-request lengths, do the same work). Bytes = K and V read once + q + out."""
from __future__ import annotations

import math

import torch

from .. import quant
from . import workloads

OP = "incre_flash_attention"
KEYS = {"b": 16, "s_q": 1, "h_q": 32, "h_kv": 8, "d": 128, "s_kv": 4096, "layout": "contiguous",
        "block_size": 128, "kv_dtype": "bf16", "dtype": "bf16", "causal": False}
X_KEY = "s_kv"
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def normalize(shape: dict) -> dict:
    s = workloads.normalize(KEYS, shape, OP)
    workloads.positive(OP, s, "b", "s_q", "h_q", "h_kv", "d", "s_kv")
    workloads.choice(OP, "layout", s["layout"], ("contiguous", "paged"))
    workloads.choice(OP, "kv_dtype", s["kv_dtype"], ("bf16", "fp16", "int8", "fp8"))
    workloads.choice(OP, "dtype", s["dtype"], tuple(_DT))
    if s["h_q"] % s["h_kv"]:
        raise ValueError(f"{OP} bench shape: h_q ({s['h_q']}) must be a multiple of h_kv ({s['h_kv']})")
    if s["layout"] == "contiguous":
        s["block_size"] = 0
    elif s["block_size"] < 1:
        raise ValueError(f"{OP} bench shape: block_size must be >= 1 with a paged layout")
    if s["kv_dtype"] in _DT and s["kv_dtype"] != s["dtype"]:
        s["kv_dtype"] = s["dtype"]
    return s


def label(s: dict) -> str:
    lay = "contig" if s["layout"] == "contiguous" else f"paged{s['block_size']}"
    extra = (f" s_q{s['s_q']}" + (" causal" if s["causal"] else "")) if s["s_q"] > 1 else ""
    kv = "" if s["kv_dtype"] == s["dtype"] else f" kv {s['kv_dtype']}"
    return f"b{s['b']} h{s['h_q']}/{s['h_kv']} d{s['d']} s_kv{s['s_kv']} {lay}{kv}{extra}"


def flops(s: dict) -> float:
    return 4.0 * s["b"] * s["h_q"] * s["s_q"] * s["s_kv"] * s["d"]


def _kv_esize(s):
    return 1 if s["kv_dtype"] in ("int8", "fp8") else 2


def bytes_moved(s: dict) -> float:
    kv = 2 * s["b"] * s["s_kv"] * s["h_kv"] * s["d"] * _kv_esize(s)
    qo = 2 * s["b"] * s["s_q"] * s["h_q"] * s["d"] * 2
    return float(kv + qo)


def build(s: dict, device, g: torch.Generator) -> dict:
    dt = _DT[s["dtype"]]
    B, S, H, D = s["b"], s["s_kv"], s["h_kv"], s["d"]

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device="cpu").to(device=device, dtype=dt) \
            if str(device) == "cpu" else torch.randn(*shape, device=device, dtype=dt)

    q = rnd(B, s["s_q"], s["h_q"], D)
    if s["layout"] == "paged":
        bs = s["block_size"]
        per = math.ceil(S / bs)
        n_blocks = B * per
        k, v = rnd(n_blocks, bs, H, D), rnd(n_blocks, bs, H, D)
        perm = torch.randperm(n_blocks, generator=g).to(torch.int32)
        extra = {"block_table": perm.view(B, per).to(device)}
    else:
        k, v = rnd(B, S, H, D), rnd(B, S, H, D)
        extra = {}
    if s["kv_dtype"] == "int8":
        k, ks, ko = quant.quantize_kv_int8(k)
        v, vs, vo = quant.quantize_kv_int8(v)
        extra.update(k_scale=ks, v_scale=vs, k_offset=ko, v_offset=vo)
    elif s["kv_dtype"] == "fp8":
        k, ks = quant.quantize_kv_fp8(k)
        v, vs = quant.quantize_kv_fp8(v)
        extra.update(k_scale=ks, v_scale=vs)
    lens = torch.full((B,), S, dtype=torch.int32, device=device)
    return dict(q=q, k_cache=k, v_cache=v, kv_lens=lens, causal=s["causal"], **extra)


def call(inputs: dict, backend: str):
    import dualops

    return lambda: dualops.incre_flash_attention(**inputs, backend=backend)


def peers(s: dict, inputs: dict) -> dict:
    """The peers of this call (``bench/peers.py``): name -> callable, or why not here."""
    from . import peers as peer_mod

    return peer_mod.for_call(OP, s, inputs)

"""Bench workload of grouped GEMM (protocol: ``bench/workloads.py``).

``g`` groups of ``m`` tokens each (MoE experts with a balanced load), y = x @ w[g]^T with
w [g, n, k]. FLOPs = 2 · g · m · n · k; bytes = x + w + y (+ scales)."""
from __future__ import annotations

import torch

from . import workloads

OP = "grouped_gemm"
KEYS = {"g": 8, "m": 512, "n": 4096, "k": 7168, "recipe": "bf16", "layout": "contiguous"}
X_KEY = "m"
RECIPES = {  # recipe -> (input dtype, scale_mode)
    "bf16": (torch.bfloat16, "none"), "fp16": (torch.float16, "none"),
    "fp8_per_tensor": (torch.float8_e4m3fn, "per_tensor"),
    "fp8_rowwise": (torch.float8_e4m3fn, "rowwise"),
    "fp8_blockwise": (torch.float8_e4m3fn, "blockwise"),
    "int8_rowwise": (torch.int8, "rowwise"),
}


def normalize(shape: dict) -> dict:
    s = workloads.normalize(KEYS, shape, OP)
    workloads.positive(OP, s, "g", "n", "k")
    workloads.choice(OP, "recipe", s["recipe"], tuple(RECIPES))
    workloads.choice(OP, "layout", s["layout"], ("contiguous", "masked"))
    return s


def label(s: dict) -> str:
    lay = "" if s["layout"] == "contiguous" else " masked"
    return f"g{s['g']} m{s['m']} n{s['n']} k{s['k']} {s['recipe']}{lay}"


def flops(s: dict) -> float:
    return 2.0 * s["g"] * s["m"] * s["n"] * s["k"]


def bytes_moved(s: dict) -> float:
    esize = 2 if RECIPES[s["recipe"]][0] in (torch.bfloat16, torch.float16) else 1
    rows = s["g"] * s["m"]
    scales = {"none": 0, "per_tensor": s["g"] + 1, "rowwise": rows + s["g"] * s["n"],
              "blockwise": rows * -(-s["k"] // 128) + s["g"] * -(-s["n"] // 128) * -(-s["k"] // 128)}
    return float((rows * s["k"] + s["g"] * s["n"] * s["k"]) * esize + rows * s["n"] * 2
                 + 4 * scales[RECIPES[s["recipe"]][1]])


def sim_estimate(s: dict, profile: str | None = None) -> dict:
    """The Ascend cost model's estimate of shape ``s`` (never a measurement), without building its
    tensors: the simulator runs the real kernel on two slices of AI core 0's work list (1 and 2 of
    its items, on a problem holding only their groups) and the counters are extrapolated linearly
    to core 0's share of the call (docs/grouped_gemm_ascend.md)."""
    from .. import devices
    from ..backends.ascend_sim import grouped_gemm as gg_sim

    dt, mode = RECIPES[s["recipe"]]
    masked = s["layout"] == "masked"
    res = gg_sim.estimate_shape([s["m"]] * s["g"], n=s["n"], k=s["k"], dtype=dt, scale_mode=mode, masked=masked,
                                m_max=s["m"] if masked else 0,
                                profile=devices.profile(profile or devices.DEFAULT_SIM_PROFILE))
    return res | {"label": "estimate (cost model, extrapolated)"}


def build(s: dict, device, g: torch.Generator) -> dict:
    dt, mode = RECIPES[s["recipe"]]
    G, m, N, K = s["g"], s["m"], s["n"], s["k"]

    def values(*shape):
        if str(device) == "cpu":
            t = torch.randn(*shape, generator=g)
        else:
            t = torch.randn(*shape, device=device)
        if dt == torch.int8:
            return (t * 40).round().clamp(-127, 127).to(torch.int8)
        return t.to(dt)

    def scales(*shape):
        t = torch.rand(*shape, generator=g) if str(device) == "cpu" else torch.rand(*shape, device=device)
        return ((t + 0.5) * 0.05).to(device)

    rows = (G * m,) if s["layout"] == "contiguous" else (G, m)
    x, w = values(*rows, K), values(G, N, K)
    inputs = dict(x=x, w=w, scale_mode=mode)
    if s["layout"] == "contiguous":
        inputs["group_offsets"] = (torch.arange(G + 1, dtype=torch.int32) * m).to(device)
    else:
        inputs["masked_m"] = torch.full((G,), m, dtype=torch.int32, device=device)
    kb, nb = -(-K // 128), -(-N // 128)
    if mode == "per_tensor":
        inputs.update(x_scale=scales(1), w_scale=scales(G))
    elif mode == "rowwise":
        inputs.update(x_scale=scales(*rows), w_scale=scales(G, N))
    elif mode == "blockwise":
        inputs.update(x_scale=scales(*rows, kb), w_scale=scales(G, nb, kb))
    return inputs


def call(inputs: dict, backend: str):
    import dualops

    return lambda: dualops.grouped_gemm(**inputs, backend=backend)


def peers(s: dict, inputs: dict) -> dict:
    """The peers of this call (``bench/peers.py``): name -> callable, or why not here."""
    from . import peers as peer_mod

    return peer_mod.for_call(OP, s, inputs)

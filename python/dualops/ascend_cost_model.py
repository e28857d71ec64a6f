"""Roofline cost model of the Ascend simulator: per-core counters of one launch -> an *estimated*
time on a named 910B profile. Estimates, never measurements: every figure below that is not an
Atlas A2 fact (docs/incre_flash_attention_ascend.md) is an assumption, listed in ``ASSUMPTIONS`` and in docs/ascend_sim.md.

Model (per launch):

* each cube core (AIC): ``cube_macs / (4096 MAC/cycle x clock)``; fp32 inputs at a quarter rate;
* each vector core (AIV): ``vec_repeats / clock`` -- one 256-B repeat per cycle, the simulator
  weighting Exp / Ln / Div / Sqrt / Reciprocal x4 and reductions / Gather x2;
* each core's DMA (MTE2 / MTE3 / FIXPIPE): its GM bytes at ``CORE_DMA_BYTES_PER_CYCLE``;
* each cross-core wait or SyncAll adds ``SYNC_LATENCY_S`` on that core's critical path;
* an AI core's time is the max of its three engines (they overlap) plus its sync latency;
* chip-wide: bytes of the op's own tensors over HBM at the profile's bandwidth, and the
  cube <-> vector workspace / split-KV partial traffic over L2 at ``L2_BW_FACTOR`` x HBM;
* estimate = max(slowest AI core, HBM time, L2 time) + ``LAUNCH_OVERHEAD_S``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .devices import ASCEND_CUBE_MACS_PER_CYCLE, DeviceProfile

VECTOR_BYTES_PER_CYCLE = 256          # one vector repeat (256 B on Atlas A2)
CORE_DMA_BYTES_PER_CYCLE = 128        # assumption: per-core GM port of MTE2 / MTE3 / FIXPIPE
L2_BW_FACTOR = 4.0                    # assumption: L2 bandwidth = 4 x the profile's HBM bandwidth
SYNC_LATENCY_S = 0.5e-6               # assumption: one cross-core flag hand-off / SyncAll
LAUNCH_OVERHEAD_S = 5e-6              # assumption: MIX kernel launch + tiling fetch
FP32_CUBE_SLOWDOWN = 4                # Atlas A2: fp32 cube throughput is 1/4 of fp16

# GM buffers whose traffic stays on chip (L2): the cube <-> vector hand-off workspace and the
# split-KV partials; buffers read by the scalar unit only are too small to matter.
L2_REGIONS = ("workspace", "o_accum", "lse_accum")
IGNORED_REGIONS = ("params", "tiling")

ASSUMPTIONS = (
    "clock, HBM bandwidth and L2 size come from the profile, where devices.py marks them assumed",
    f"cube: {ASCEND_CUBE_MACS_PER_CYCLE} fp16/bf16 MACs per cycle per AI core (16x16x16 fractal), fp32 at 1/4",
    f"vector: one {VECTOR_BYTES_PER_CYCLE}-B repeat per cycle per vector core; Exp/Ln/Div/Sqrt x4, reductions/Gather x2",
    f"per-core DMA: {CORE_DMA_BYTES_PER_CYCLE} B/cycle",
    f"L2 bandwidth: {L2_BW_FACTOR:g} x HBM bandwidth for workspace and split-KV partials",
    f"cross-core flag wait / SyncAll: {SYNC_LATENCY_S * 1e6:g} us each on the waiting core",
    f"launch overhead: {LAUNCH_OVERHEAD_S * 1e6:g} us",
    "engines of one core overlap perfectly; cores run fully in parallel",
)


@dataclass
class CostEstimate:
    seconds: float
    bound: str
    profile: str
    terms: dict
    per_core_s: list

    def as_dict(self) -> dict:
        return {"seconds": self.seconds, "bound": self.bound, "profile": self.profile,
                "terms": dict(self.terms), "per_core_s": list(self.per_core_s),
                "assumptions": list(ASSUMPTIONS), "label": "estimate (cost model)"}


def _region_class(name: str) -> str:
    base = name.split("+")[0]
    if any(base.startswith(r) for r in IGNORED_REGIONS):
        return "ignore"
    if any(base.startswith(r) for r in L2_REGIONS):
        return "l2"
    return "hbm"


def estimate(report: dict, profile: DeviceProfile) -> CostEstimate:
    """``report``: the dict ``_C.ascend_sim_launch`` returns. ``profile``: the Ascend profile the
    estimate is for (its core count should be the one the launch ran with)."""
    if not isinstance(profile, DeviceProfile) or not profile.is_ascend:
        raise TypeError(f"estimate: profile must be an Ascend DeviceProfile, got {profile!r}")
    hz = profile.clock_ghz * 1e9
    cube_rate = ASCEND_CUBE_MACS_PER_CYCLE * hz
    dma_rate = CORE_DMA_BYTES_PER_CYCLE * hz

    by_block: dict[int, dict] = {}
    for c in report["cores"]:
        slot = by_block.setdefault(int(c["block"]), {"cube": 0.0, "vector": 0.0, "mte": 0.0, "sync": 0.0})
        macs = c["cube_macs"] + (FP32_CUBE_SLOWDOWN - 1) * c["cube_fp32_macs"]
        slot["cube"] = max(slot["cube"], macs / cube_rate)
        slot["vector"] = max(slot["vector"], c["vec_repeats"] / hz)
        slot["mte"] = max(slot["mte"], (c["gm_read_bytes"] + c["gm_write_bytes"]) / dma_rate)
        waits = c["cross_core_waits"] + c["sync_alls"]
        slot["sync"] = max(slot["sync"], waits * SYNC_LATENCY_S)
    per_core = []
    engine_max = {"cube": 0.0, "vector": 0.0, "mte": 0.0}
    for blk in sorted(by_block):
        s = by_block[blk]
        per_core.append(max(s["cube"], s["vector"], s["mte"]) + s["sync"])
        for k in engine_max:
            engine_max[k] = max(engine_max[k], s[k])
    core_time = max(per_core) if per_core else 0.0

    hbm = l2 = 0
    for r in report.get("regions", []):
        cls = _region_class(r["name"])
        moved = r["read"] + r["write"]
        if cls == "hbm":
            hbm += moved
        elif cls == "l2":
            l2 += moved
    bw = profile.hbm_bandwidth_gbs * 1e9
    t_hbm = hbm / bw
    t_l2 = l2 / (L2_BW_FACTOR * bw)
    terms = {"core_s": core_time, "hbm_s": t_hbm, "l2_s": t_l2, "launch_s": LAUNCH_OVERHEAD_S,
             "cube_s": engine_max["cube"], "vector_s": engine_max["vector"], "mte_s": engine_max["mte"],
             "hbm_bytes": hbm, "l2_bytes": l2}
    body = max(core_time, t_hbm, t_l2)
    if body == t_hbm and t_hbm > 0:
        bound = "hbm"
    elif body == t_l2 and t_l2 > 0:
        bound = "l2"
    else:
        bound = max(engine_max, key=engine_max.get) if core_time > 0 else "launch"
        slowest = max(by_block.values(), key=lambda s: max(s["cube"], s["vector"], s["mte"]) + s["sync"],
                      default=None)
        if slowest is not None and slowest["sync"] > max(slowest["cube"], slowest["vector"], slowest["mte"]):
            bound = "sync"
    return CostEstimate(body + LAUNCH_OVERHEAD_S, bound, profile.name, terms, per_core)


def extrapolate(runs, work: float, profile: DeviceProfile) -> dict:
    """An estimate for a problem too big to simulate: ``runs`` = [(work_1, estimate_1 dict),
    (work_2, estimate_2 dict)] of two reduced runs of the same kernel configuration, ``work`` the
    full problem's work in the same unit (one AI core's share grows linearly with it). Each term
    (per-engine times and sync of the slowest core, HBM, L2) is extrapolated linearly, then
    combined as ``estimate`` does. Still an estimate of the cost model, labelled so."""
    (w1, e1), (w2, e2) = runs
    if w2 == w1:
        raise ValueError("extrapolate: the two runs must differ in work")

    def at(key, sync=False):
        a = e1["terms"][key] if not sync else _sync(e1)
        b = e2["terms"][key] if not sync else _sync(e2)
        return max(0.0, a + (b - a) * (work - w1) / (w2 - w1))

    eng = {k: at(f"{k}_s") for k in ("cube", "vector", "mte")}
    sync = at(None, sync=True)
    core = max(eng.values()) + sync
    t_hbm, t_l2 = at("hbm_s"), at("l2_s")
    body = max(core, t_hbm, t_l2)
    if body == t_hbm:
        bound = "hbm"
    elif body == t_l2:
        bound = "l2"
    else:
        bound = "sync" if sync > max(eng.values()) else max(eng, key=eng.get)
    terms = {"core_s": core, "sync_s": sync, "hbm_s": t_hbm, "l2_s": t_l2, "launch_s": LAUNCH_OVERHEAD_S,
             **{f"{k}_s": v for k, v in eng.items()}}
    return {"seconds": body + LAUNCH_OVERHEAD_S, "bound": bound, "profile": profile.name, "terms": terms,
            "assumptions": list(ASSUMPTIONS) + ["terms extrapolated linearly from two simulated reduced runs"],
            "label": "estimate (cost model, extrapolated)"}


def _sync(e: dict) -> float:
    t = e["terms"]
    return max(0.0, t["core_s"] - max(t["cube_s"], t["vector_s"], t["mte_s"]))

"""Runs bench sweeps: every config on every selected backend (and the peers present here),
timed on its device or, for the Ascend simulator, estimated by its cost model; FLOPs, bytes and
the share of the device's ceilings derived from the time."""
from __future__ import annotations

import sys
import zlib
from dataclasses import asdict, dataclass, field

import torch

from .. import schema
from . import ceilings as ceil_mod
from . import measure as measure_mod
from . import sim_estimate, workloads
from .environment import accelerator, backend_device, machine, now
from .sweeps import Sweep


@dataclass
class Row:
    sweep: str
    op: str
    label: str
    shape: dict
    impl: str                  # a backend name, or a peer's name
    source: str                # "dualops" | "peer"
    device: str                # device type it ran on
    status: str                # ok | n/a | error | skipped
    x: int | None = None       # the sweep's x-axis value (context length, tokens per expert)
    method: str = ""
    kind: str = ""             # measured | estimate
    time_s: float | None = None
    p10_s: float | None = None
    p90_s: float | None = None
    runs: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    tflops: float | None = None
    gbs: float | None = None
    pct_bw: float | None = None
    pct_peak: float | None = None
    ceiling: str | None = None  # key into BenchRun.ceilings
    reason: str = ""
    old_time_s: float | None = None
    ratio: float | None = None  # new time / old time (--compare)
    regression: bool = False

    @property
    def key(self) -> tuple:
        return (self.op, self.label, self.impl, self.kind or "measured")

    @property
    def spread(self) -> float | None:
        if self.time_s and self.p10_s is not None and self.p90_s is not None:
            return (self.p90_s - self.p10_s) / self.time_s
        return None

    def to_json(self) -> dict:
        d = asdict(self)
        d["spread"] = self.spread
        return d


@dataclass
class BenchRun:
    settings: dict
    backends: dict
    rows: list[Row] = field(default_factory=list)
    ceilings: dict = field(default_factory=dict)   # key -> {"bandwidth_gbs", "tflops", "source"}
    sweeps: dict = field(default_factory=dict)     # name -> {"op", "description", "x_key"}
    compare: dict | None = None                    # --compare summary
    created: str = field(default_factory=now)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.regression]

    @property
    def errors(self) -> list[Row]:
        """Our implementations' failures (a peer that fails is reported, not an error of ours)."""
        return [r for r in self.rows if r.status == "error" and r.source == "dualops"]

    def to_json(self) -> dict:
        return {"format": "dualops-bench-report", "version": 1, "created": self.created,
                "machine": machine(), "settings": self.settings, "backends": self.backends,
                "ceilings": self.ceilings, "sweeps": self.sweeps, "compare": self.compare,
                "rows": [r.to_json() for r in self.rows]}


def select_backends(requested=None) -> tuple[list[str], dict]:
    """``requested`` (all must be available), else every available backend except the reference
    when an accelerator backend is there (timing pure torch on the CPU next to a GPU says nothing)."""
    import dualops

    status = dualops.backends()
    if requested:
        for b in requested:
            if b not in status:
                raise ValueError(f"--backend must be among {sorted(status)}, got {b!r}")
            if not status[b]["available"]:
                raise RuntimeError(f"backend {b!r} is not available here: {status[b]['reason']}")
        return list(dict.fromkeys(requested)), status
    names = [b for b, s in status.items() if s["available"]]
    if any(backend_device(b) != "cpu" for b in names):
        names = [b for b in names if b != "reference"]
    return names, status


def _progress(i, n, label, stream=None):
    stream = stream or sys.stderr  # looked up now: it may have been replaced since import
    if not stream.isatty():
        return
    done = int(24 * i / max(n, 1))
    stream.write(f"\r[{'#' * done}{'.' * (24 - done)}] {i}/{n} {label[:56]:<56}")
    if i == n:
        stream.write("\n")
    stream.flush()


class _Config:
    """One shape of one sweep: builds (and caches) input sets per device."""

    def __init__(self, sweep: Sweep, mod, shape: dict, seed: int):
        self.sweep, self.mod, self.shape = sweep, mod, shape
        self.label = mod.label(shape)
        self.flops, self.bytes = mod.flops(shape), mod.bytes_moved(shape)
        self.seed = (seed * 1_000_003 + zlib.crc32(f"{sweep.op}/{self.label}".encode())) % 2 ** 63
        self._sets: dict[str, list] = {}

    def inputs(self, device: str, n: int = 1) -> list[dict]:
        have = self._sets.setdefault(device, [])
        while len(have) < n:
            g = torch.Generator().manual_seed(self.seed + len(have))
            have.append(self.mod.build(self.shape, device, g))
        return have[:n]

    def row(self, impl, source, device, status, **kw) -> Row:
        x = self.shape.get(self.sweep.x_key) if self.sweep.x_key else None
        return Row(self.sweep.name, self.sweep.op, self.label, dict(self.shape), impl, source, device,
                   status, x=x, flops=self.flops, bytes=self.bytes, **kw)

    def release(self):
        self._sets.clear()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _finish(row: Row, m: measure_mod.Measurement, ceiling_key, ceilings) -> Row:
    row.time_s, row.runs = m.time_s, m.runs
    if m.kind == "measured":  # an estimate has no spread
        row.p10_s, row.p90_s = m.p10_s, m.p90_s
    row.method, row.kind, row.reason = m.method, m.kind, m.note
    if m.time_s > 0:
        row.tflops = row.flops / m.time_s / 1e12
        row.gbs = row.bytes / m.time_s / 1e9
    c = ceilings.get(ceiling_key) if ceiling_key else None
    if c and row.gbs is not None:
        row.ceiling = ceiling_key
        row.pct_bw = 100.0 * row.gbs / c["bandwidth_gbs"]
        row.pct_peak = 100.0 * row.tflops / c["tflops"]
    return row


def _too_big_for_cpu(cfg: _Config, limit_gflop: float) -> str | None:
    if cfg.flops > limit_gflop * 1e9:
        return (f"{cfg.flops / 1e9:.1f} GFLOP is over the CPU limit of {limit_gflop:g} GFLOP "
                f"(raise --cpu-limit to run it)")
    return None


def _fail(e: Exception) -> str:
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first}"[:300]


def _bench_backend(cfg: _Config, backend: str, opts: dict, ceilings: dict) -> Row:
    dev = backend_device(backend)
    if backend == "ascend_sim" and hasattr(cfg.mod, "sim_estimate"):
        return _bench_sim_scaled(cfg, backend, dev, opts, ceilings)
    if dev == "cpu":
        why = _too_big_for_cpu(cfg, opts["cpu_limit"])
        if why:
            return cfg.row(backend, "dualops", dev, "skipped", reason=why)
    try:
        first = cfg.inputs(dev)[0]
        features = schema.validate(cfg.sweep.op, dict(first)).features
    except Exception as e:
        return cfg.row(backend, "dualops", dev, "error", reason=_fail(e))
    reason = schema.support_reason(cfg.sweep.op, backend, **features)
    if reason is not None:
        return cfg.row(backend, "dualops", dev, "n/a", reason=reason)
    try:
        if backend == "ascend_sim":
            ok, why = sim_estimate.available()
            if not ok:
                return cfg.row(backend, "dualops", dev, "n/a", reason=why)
            est = sim_estimate.estimate(cfg.sweep.op, first, opts["sim_profile"])
            key = f"profile:{est.profile}"
            if key not in ceilings:
                ceilings[key] = ceil_mod.from_profile(est.profile)
            return _finish(cfg.row(backend, "dualops", dev, "ok"), est.as_measurement(), key, ceilings)
        n = measure_mod.rotation_sets(dev, cfg.bytes)
        fns = [cfg.mod.call(inp, backend) for inp in cfg.inputs(dev, n)]
        m = measure_mod.measure(fns, dev, graph=opts["graph"], runs=opts["runs"], budget_s=opts["budget_s"])
    except Exception as e:
        return cfg.row(backend, "dualops", dev, "error", reason=_fail(e))
    return _finish(cfg.row(backend, "dualops", dev, "ok"), m, dev, ceilings)


def _bench_sim_scaled(cfg: _Config, backend: str, dev: str, opts: dict, ceilings: dict) -> Row:
    """The simulator's estimate of a shape through its bench module's reduced-run extrapolation
    (no CPU limit: the simulated runs are small)."""
    ok, why = sim_estimate.available()
    if not ok:
        return cfg.row(backend, "dualops", dev, "n/a", reason=why)
    try:
        est = sim_estimate.estimate_shape(cfg.mod, cfg.shape, opts["sim_profile"])
    except NotImplementedError as e:
        return cfg.row(backend, "dualops", dev, "n/a", reason=_fail(e))
    except Exception as e:
        return cfg.row(backend, "dualops", dev, "error", reason=_fail(e))
    key = f"profile:{est.profile}"
    if key not in ceilings:
        ceilings[key] = ceil_mod.from_profile(est.profile)
    return _finish(cfg.row(backend, "dualops", dev, "ok"), est.as_measurement(), key, ceilings)


def _bench_peers(cfg: _Config, dev: str, opts: dict, ceilings: dict) -> list[Row]:
    if dev == "cpu" and _too_big_for_cpu(cfg, opts["cpu_limit"]):
        return []
    rows = []
    try:
        n = measure_mod.rotation_sets(dev, cfg.bytes)
        sets = [cfg.mod.peers(cfg.shape, inp) for inp in cfg.inputs(dev, n)]
    except Exception as e:
        return [cfg.row("peers", "peer", dev, "error", reason=_fail(e))]
    for name, first in sets[0].items():
        if isinstance(first, str):
            rows.append(cfg.row(name, "peer", dev, "n/a", reason=first))
            continue
        try:
            fns = [s[name] for s in sets]
            m = measure_mod.measure(fns, dev, graph=opts["graph"], runs=opts["runs"], budget_s=opts["budget_s"])
        except Exception as e:
            rows.append(cfg.row(name, "peer", dev, "error", reason=_fail(e)))
            continue
        rows.append(_finish(cfg.row(name, "peer", dev, "ok"), m, dev, ceilings))
    return rows


def _median_rows(rounds: list[list[Row]]) -> list[Row]:
    """Per implementation, the row of the median time over the rounds (rows without a time: the
    first round's)."""
    out = []
    for i, first in enumerate(rounds[0]):
        timed = sorted((r[i] for r in rounds if r[i].time_s is not None), key=lambda r: r.time_s)
        out.append(timed[(len(timed) - 1) // 2] if timed and len(timed) == len(rounds) else first)
    return out


def run(sweep_list: list[Sweep], *, backends=None, graph: bool = True, runs: int = 30,
        budget_s: float = 1.0, probe: bool = True, with_peers: bool = True, cpu_limit: float = 2.0,
        sim_profile: str | None = None, seed: int = 0, rounds: int = 1) -> BenchRun:
    """Run the sweeps. ``cpu_limit``: GFLOP above which CPU backends (reference, simulator) and
    CPU peers skip a config. ``sim_profile``: the 910B profile the simulator's estimate is for.
    ``rounds``: each config's implementations are timed in turn this many times (inputs built
    anew each round) and each keeps its median round, so the order they run in and the GPU's
    clock drift between them weigh less on same-run ratios."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    from .. import devices

    names, status = select_backends(backends)
    devs = [backend_device(b) for b in names]
    # Peers run beside our accelerator backend; with backends chosen by the machine, on the
    # accelerator torch sees even when no dualops backend for it is built; with only CPU
    # backends asked for by name, on the CPU (CPU-sized shapes, like for like).
    accel = next((d for d in devs if d != "cpu"), None)
    peer_device = accel or ("cpu" if backends is not None else (accelerator() or "cpu"))
    accelerated = peer_device != "cpu"
    opts = dict(graph=graph, runs=runs, budget_s=budget_s, cpu_limit=cpu_limit,
                sim_profile=sim_profile or devices.DEFAULT_SIM_PROFILE)
    result = BenchRun(settings={"backends": names, "graph": graph, "runs": runs, "budget_s": budget_s,
                                "peers": with_peers, "cpu_limit_gflop": cpu_limit, "seed": seed,
                                "sim_profile": opts["sim_profile"], "accelerated": accelerated, "rounds": rounds,
                                "sweeps": [s.name for s in sweep_list]},
                      backends=status)
    for d in sorted(set(devs + ([peer_device] if with_peers else []))):
        c = ceil_mod.for_device(d, probe=probe)
        if c:
            result.ceilings[d] = c
    configs = [(s, shape) for s in sweep_list for shape in s.for_machine(accelerated)]
    for s in sweep_list:
        result.sweeps[s.name] = {"op": s.op, "description": s.description, "x_key": s.x_key}
    for i, (sweep, shape) in enumerate(configs):
        mod = workloads.module(sweep.op)
        try:
            norm = mod.normalize(shape)
        except ValueError as e:
            result.rows.append(Row(sweep.name, sweep.op, str(shape), dict(shape), "-", "dualops", "-",
                                   "error", reason=str(e)))
            continue
        per_round = []
        for rnd in range(rounds):
            cfg = _Config(sweep, mod, norm, seed)
            _progress(i, len(configs), f"{sweep.name}: {cfg.label}")
            # (a cost-model estimate is the same every round: made once)
            rows = [per_round[0][j] if rnd and per_round[0][j].kind == "estimate" else
                    _bench_backend(cfg, b, opts, result.ceilings) for j, b in enumerate(names)]
            if with_peers:
                rows += _bench_peers(cfg, peer_device, opts, result.ceilings)
            cfg.release()
            per_round.append(rows)
        same = all(len(r) == len(per_round[0]) for r in per_round)
        result.rows += _median_rows(per_round) if same else per_round[0]
    _progress(len(configs), len(configs), "done")
    return result

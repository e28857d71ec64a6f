"""Runs parity cases: every case on every selected backend against the fp32 reference on the
dequantized inputs, every pair of non-reference backends against each other, and (with a saved
case set) this machine's backends against another machine's outputs."""
from __future__ import annotations

import itertools
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .. import schema
from ..bench.environment import backend_device
from ..testing import compare
from . import builders, cross_format, expected
from .cases import FORMAT_PAIRS, OPS, Case, cases


@dataclass
class Result:
    """One row: ``backend`` checked against ``against`` ("reference", another backend, or
    "saved:<backend>" for outputs stored by ``parity --save``) on one case."""
    op: str
    case: str
    backend: str
    against: str
    status: str                       # pass | fail | error | n/a
    outputs: dict = field(default_factory=dict)   # output name -> Comparison fields
    reason: str = ""
    seconds: float = 0.0
    exercises: tuple = ()
    features: dict = field(default_factory=dict)
    repro: str = ""

    @property
    def failed(self) -> bool:
        return self.status in ("fail", "error")

    def headline(self) -> dict:
        """The comparison shown in a table: the first failing output, else the main one."""
        for c in self.outputs.values():
            if not c["ok"]:
                return c
        return next(iter(self.outputs.values()), {})

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class ParityRun:
    seed: int
    selection: dict
    backends: dict                    # name -> {"available", "reason"}
    results: list[Result] = field(default_factory=list)
    cases: dict = field(default_factory=dict)   # "op/case" -> {"exercises", "features"}
    against: dict | None = None       # manifest summary of a saved set
    cross_format: list = field(default_factory=list)  # cross_format.measure rows (MLA format pairs)

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.failed]

    def summary(self) -> dict:
        out = {"pass": 0, "fail": 0, "error": 0, "n/a": 0}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out


def select_backends(requested=None) -> tuple[list[str], dict]:
    """The backends to run: ``requested`` (names; all of them must be available here) or every
    available one. Returns (names, status of every backend)."""
    import dualops

    status = dualops.backends()
    if not requested:
        return [b for b, s in status.items() if s["available"]], status
    names = []
    for b in requested:
        if b not in status:
            raise ValueError(f"--backend must be among {sorted(status)}, got {b!r}")
        if not status[b]["available"]:
            raise RuntimeError(f"backend {b!r} is not available here: {status[b]['reason']}")
        if b not in names:
            names.append(b)
    return names, status


def on_device(inputs: dict, device: str, strided=()) -> dict:
    """The case's inputs on ``device``; the arguments named in ``strided`` as non-contiguous views."""
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            if k in strided:
                v = builders.strided_view(v)
        out[k] = v
    return out


def repro_command(op, case, backends, seed, against_dir=None) -> str:
    cmd = f"python -m dualops parity --op {op} --case {case} --backend {','.join(backends)}"
    if against_dir:
        return cmd + f" --against {against_dir}"
    return cmd + f" --seed {seed}"


def _comparisons(op, got: dict, want: dict, inputs: dict, budgets: dict, pair=False) -> dict:
    """The contract per output; ``pair``: ``want`` is another backend's output (the sum of two
    backends' bounds)."""
    out = {}
    for name in expected.OUTPUTS[op]:
        atol, rtol, cos_eps = expected.tolerance(op, name, inputs)
        c = compare(got[name], want[name], atol=atol, rtol=rtol, cos_eps=cos_eps, budget=budgets[name], pair=pair)
        out[name] = {**asdict(c), "atol": atol, "rtol": rtol, "cos_eps": cos_eps, "pair": pair}
    return out


def _status(comparisons: dict) -> tuple[str, str]:
    bad = [f"{n}: {c['reason']}" for n, c in comparisons.items() if not c["ok"]]
    return ("fail", "; ".join(bad)) if bad else ("pass", "")


def _run_backend(op, inputs, strided, backend):
    """(outputs on CPU, seconds) of one backend on one case; raises what the backend raises."""
    dev_inputs = on_device(inputs, backend_device(backend), strided)
    if op == "mla_decode":  # backends run the shared planner's plan, made as a user makes it
        dev_inputs["plan"] = expected.mla_plan(dev_inputs)
    t0 = time.perf_counter()
    outs = expected.call(op, dev_inputs, backend)
    if backend_device(backend) == "cuda":
        torch.cuda.synchronize()
    elif backend_device(backend) == "npu":
        torch.npu.synchronize()
    secs = time.perf_counter() - t0
    return {k: v.detach().to("cpu") for k, v in outs.items()}, secs


def check_case(op: str, name: str, inputs: dict, strided, backends, *, seed, exercises=(),
               saved_outputs=None, against_dir=None):
    """All rows of one case. Returns (results, outputs by backend)."""
    features = schema.validate(op, dict(inputs)).features
    want, budgets = expected.expected_with_budget(op, inputs)
    rows, outs = [], {}
    base = dict(op=op, case=name, exercises=tuple(exercises), features=features)
    for b in backends:
        repro = repro_command(op, name, [b], seed, against_dir)
        reason = schema.support_reason(op, b, **features)
        if reason is not None:
            rows.append(Result(backend=b, against="reference", status="n/a", reason=reason, **base))
            continue
        try:
            got, secs = _run_backend(op, inputs, strided, b)
        except Exception as e:  # a crash or a refusal of a supported variant is a failure
            msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            rows.append(Result(backend=b, against="reference", status="error", reason=msg,
                               repro=repro, **base))
            continue
        outs[b] = got
        comps = _comparisons(op, got, want, inputs, budgets)
        status, why = _status(comps)
        rows.append(Result(backend=b, against="reference", status=status, outputs=comps, reason=why,
                           seconds=secs, repro=repro if status != "pass" else "", **base))
        for other, stored in (saved_outputs or {}).items():
            comps = _comparisons(op, got, stored, inputs, budgets, pair=True)
            status, why = _status(comps)
            rows.append(Result(backend=b, against=f"saved:{other}", status=status, outputs=comps,
                               reason=why, repro=repro if status != "pass" else "", **base))
    kernels = [b for b in backends if b in outs and b != "reference"]
    for a, b in itertools.combinations(kernels, 2):
        comps = _comparisons(op, outs[a], outs[b], inputs, budgets, pair=True)
        status, why = _status(comps)
        rows.append(Result(backend=a, against=b, status=status, outputs=comps, reason=why,
                           repro=repro_command(op, name, [a, b], seed, against_dir) if status != "pass" else "",
                           **base))
    return rows, outs


def _case_info(exercises, rows) -> dict:
    return {"exercises": list(exercises), "features": rows[0].features if rows else {}}


def _progress(i, n, label, stream=None):
    stream = stream or sys.stderr  # looked up now: it may have been replaced since import
    if not stream.isatty():
        return
    width = 24
    done = int(width * i / max(n, 1))
    stream.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label[:50]:<50}")
    if i == n:
        stream.write("\n")
    stream.flush()


def run(*, ops=None, backends=None, full=False, seed=0, case_names=None, save_dir=None) -> ParityRun:
    """Run the selected cases. ``save_dir``: also store each case's inputs and outputs there."""
    from . import store

    names, status = select_backends(backends)
    ops = list(ops or OPS)
    selected: list[Case] = []
    for op in ops:
        if case_names:
            mine = [n for n in case_names if n in {c.name for c in cases(op, full=True)}]
            selected += cases(op, names=mine) if mine else []
        else:
            selected += cases(op, full=full)
    if case_names:
        found = {c.name for c in selected}
        missing = [n for n in case_names if n not in found]
        if missing:
            raise ValueError(f"--case: unknown case(s) {missing} for op(s) {ops}")
    result = ParityRun(seed=seed, backends=status,
                       selection={"ops": ops, "backends": names, "full": full,
                                  "cases": list(case_names or [])})
    saver = store.Saver(save_dir, seed) if save_dir else None
    paired = {c.name for pair in FORMAT_PAIRS.values() for c in pair[:2]}
    ran = {}   # inputs and outputs of the cases of cross_format's pairs
    for i, case in enumerate(selected):
        _progress(i, len(selected), f"{case.op}/{case.name}")
        inputs = case.inputs(seed)
        rows, outs = check_case(case.op, case.name, inputs, case.strided, names, seed=seed,
                                exercises=case.exercises)
        result.results += rows
        result.cases[f"{case.op}/{case.name}"] = _case_info(case.exercises, rows)
        if saver:
            saver.add(case.op, case.name, inputs, case.strided, outs, case.exercises)
        if case.name in paired:
            ran[case.name] = (inputs, outs)
    _progress(len(selected), len(selected), "done")
    result.cross_format = cross_format.measure(ran, seed)
    if saver:
        saver.finish()
    return result


def run_against(saved_dir, *, ops=None, backends=None, case_names=None) -> ParityRun:
    """Re-run a saved case set on this machine's backends; compare with the stored outputs of
    every backend that produced them and with the reference computed here."""
    from . import store

    names, status = select_backends(backends)
    manifest = store.load_manifest(saved_dir)
    entries = [e for e in manifest["cases"]
               if (not ops or e["op"] in ops) and (not case_names or e["case"] in case_names)]
    if case_names:
        missing = set(case_names) - {e["case"] for e in entries}
        if missing:
            raise ValueError(f"--case: {sorted(missing)} not in the saved set {saved_dir}")
    result = ParityRun(seed=manifest["seed"], backends=status,
                       selection={"ops": list(ops or OPS), "backends": names, "full": None,
                                  "cases": list(case_names or [])},
                       against={"dir": str(Path(saved_dir)), "machine": manifest.get("machine"),
                                "created": manifest.get("created")})
    for i, entry in enumerate(entries):
        _progress(i, len(entries), f"{entry['op']}/{entry['case']}")
        data = store.load_case(saved_dir, entry)
        rows, _ = check_case(entry["op"], entry["case"], data["inputs"], data["strided"], names,
                             seed=manifest["seed"], exercises=data.get("exercises", ()),
                             saved_outputs=data["outputs"], against_dir=str(saved_dir))
        result.results += rows
        result.cases[f"{entry['op']}/{entry['case']}"] = _case_info(data.get("exercises", ()), rows)
    _progress(len(entries), len(entries), "done")
    return result

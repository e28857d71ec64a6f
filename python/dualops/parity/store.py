"""Saved case sets for cross-machine parity (``parity --save DIR`` / ``parity --against DIR``).

DIR holds ``manifest.json`` and one ``<op>__<case>.pt`` per case (``torch.save`` of CPU tensors):
the call's logical inputs, which of them were passed as non-contiguous views, and the outputs of
every backend that ran it. A user saves on one machine (say a GPU host) and checks another (an
NPU host) against it: the second machine needs no case definitions, only the files."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..bench.environment import machine, now

FORMAT = "dualops-parity-set"
VERSION = 1


class Saver:
    def __init__(self, directory, seed: int):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.seed = seed
        self.entries: list[dict] = []

    def add(self, op: str, case: str, inputs: dict, strided, outputs: dict, exercises=()):
        cpu = {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        fname = f"{op}__{case}.pt"
        torch.save({"op": op, "case": case, "inputs": cpu, "strided": list(strided),
                    "outputs": {b: {n: t.cpu() for n, t in o.items()} for b, o in outputs.items()},
                    "exercises": list(exercises)}, self.dir / fname)
        self.entries.append({"op": op, "case": case, "file": fname, "backends": sorted(outputs)})

    def finish(self) -> Path:
        path = self.dir / "manifest.json"
        path.write_text(json.dumps({"format": FORMAT, "version": VERSION, "seed": self.seed,
                                    "created": now(), "machine": machine(), "cases": self.entries},
                                   indent=2))
        return path


def load_manifest(directory) -> dict:
    path = Path(directory) / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"--against: {path} does not exist; make a case set with "
                                f"`python -m dualops parity --save {directory}`")
    m = json.loads(path.read_text())
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        raise ValueError(f"--against: {path} is not a dualops parity set of version {VERSION} "
                         f"(format {m.get('format')!r}, version {m.get('version')!r})")
    return m


def load_case(directory, entry: dict) -> dict:
    data = torch.load(Path(directory) / entry["file"], map_location="cpu", weights_only=True)
    for key in ("inputs", "outputs", "strided"):
        if key not in data:
            raise ValueError(f"--against: {entry['file']} lacks {key!r}; it was not written by parity --save")
    return data

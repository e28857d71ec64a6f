"""Saved case sets for cross-machine parity (``parity --save DIR`` / ``parity --against DIR``).

DIR holds ``manifest.json`` and one ``<op>__<case>.pt`` per case (``torch.save`` of CPU tensors):
the call's logical inputs, which of them were passed as non-contiguous views, and the outputs of
every backend that ran it. A user saves on one machine (say a GPU host) and checks another (an
NPU host) against it: the second machine needs no case definitions, only the files.

Saving is atomic: every file is written under a temporary name and renamed into place, and the
manifest -- the only file ``--against`` starts from -- is removed when a save starts and written
last, so an interrupted save leaves no set that ``--against`` would trust. Loading checks every
file it reads and says, in one line naming the file, what is wrong with it.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import torch

from ..bench.environment import machine, now

FORMAT = "dualops-parity-set"
VERSION = 1
MANIFEST = "manifest.json"


class SavedSetError(ValueError):
    """A saved case set that cannot be used; the message names the file and what is wrong."""


def write_atomic(path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename, so
    the path holds either its old content or the whole new one, never a part."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file 0600; a report or saved set is as readable as any file the
        # user writes (0644 under the usual umask).
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Saver:
    def __init__(self, directory, seed: int):
        self.dir = Path(directory)
        if self.dir.exists() and not self.dir.is_dir():
            raise SavedSetError(f"--save: {self.dir} is an existing file, not a folder")
        self.dir.mkdir(parents=True, exist_ok=True)
        # An older set in DIR stops being a set now: its manifest goes first, ours comes last.
        (self.dir / MANIFEST).unlink(missing_ok=True)
        self.seed = seed
        self.entries: list[dict] = []

    def add(self, op: str, case: str, inputs: dict, strided, outputs: dict, exercises=()):
        cpu = {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        fname = f"{op}__{case}.pt"
        buf = io.BytesIO()
        torch.save({"op": op, "case": case, "inputs": cpu, "strided": list(strided),
                    "outputs": {b: {n: t.cpu() for n, t in o.items()} for b, o in outputs.items()},
                    "exercises": list(exercises)}, buf)
        write_atomic(self.dir / fname, buf.getvalue())
        self.entries.append({"op": op, "case": case, "file": fname, "backends": sorted(outputs)})

    def finish(self) -> Path:
        return write_atomic(self.dir / MANIFEST, json.dumps(
            {"format": FORMAT, "version": VERSION, "seed": self.seed, "created": now(),
             "machine": machine(), "cases": self.entries}, indent=2))


def _bad(path, what: str) -> SavedSetError:
    return SavedSetError(f"--against: {path}: {what}")


def load_manifest(directory) -> dict:
    """The manifest of a saved set, every entry checked and every case file present."""
    from .cases import OPS

    d = Path(directory)
    path = d / MANIFEST
    if not d.is_dir():
        raise FileNotFoundError(f"--against: {d} is not a folder; make a case set with "
                                f"`python -m dualops parity --save {directory}`")
    if not path.is_file():
        raise FileNotFoundError(f"--against: {path} does not exist (no saved set there, or its save was "
                                f"interrupted); make one with `python -m dualops parity --save {directory}`")
    try:
        m = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise _bad(path, "is not text (expected the JSON manifest written by parity --save)") from None
    except json.JSONDecodeError as e:
        raise _bad(path, f"is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    if not isinstance(m, dict):
        raise _bad(path, f"holds a JSON {type(m).__name__}, expected an object with format, version, "
                         f"seed and cases")
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        raise _bad(path, f"is not a dualops parity set of version {VERSION} "
                         f"(format {m.get('format')!r}, version {m.get('version')!r})")
    if "cases" not in m:
        raise _bad(path, "has no 'cases' list")
    if not isinstance(m["cases"], list):
        raise _bad(path, f"'cases' is a {type(m['cases']).__name__}, expected a list")
    if isinstance(m.get("seed"), bool) or not isinstance(m.get("seed"), int):
        raise _bad(path, f"'seed' must be an int, got {m.get('seed')!r}")
    for i, e in enumerate(m["cases"]):
        where = f"cases[{i}]"
        if not isinstance(e, dict):
            raise _bad(path, f"{where} is a {type(e).__name__}, expected an object with op, case and file")
        for key in ("op", "case", "file"):
            if not isinstance(e.get(key), str) or not e[key]:
                raise _bad(path, f"{where} has no {key!r} string" + (f" (got {e[key]!r})" if key in e else ""))
        if e["op"] not in OPS:
            raise _bad(path, f"{where} names op {e['op']!r}; known ops: {', '.join(OPS)}")
        f = d / e["file"]
        if Path(e["file"]).is_absolute() or ".." in Path(e["file"]).parts:
            raise _bad(path, f"{where} file {e['file']!r} is not a plain name inside {d}")
        if not f.is_file():
            raise _bad(f, f"is missing (listed in {path} as {where})")
    return m


def _first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of an error message (torch's run on for several), whole words only."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = first.split(". ")[0].rstrip(".")
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0] + " ..."
    return first


def load_case(directory, entry: dict) -> dict:
    path = Path(directory) / entry["file"]
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise _bad(path, "is missing") from None
    except Exception as e:  # truncated zip, a pickle that is not tensors, random bytes, ...
        raise _bad(path, f"cannot be read as a saved case (truncated or not written by parity --save): "
                         f"{type(e).__name__}: {_first_sentence(str(e))}") from None
    if not isinstance(data, dict):
        raise _bad(path, f"holds a {type(data).__name__}, expected the dict parity --save writes")
    for key in ("inputs", "outputs", "strided"):
        if key not in data:
            raise _bad(path, f"lacks {key!r}; it was not written by parity --save")
    if not isinstance(data["inputs"], dict):
        raise _bad(path, f"'inputs' is a {type(data['inputs']).__name__}, expected a dict of arguments")
    if not isinstance(data["strided"], (list, tuple)):
        raise _bad(path, f"'strided' is a {type(data['strided']).__name__}, expected a list of names")
    outs = data["outputs"]
    if not isinstance(outs, dict) or not all(
            isinstance(o, dict) and all(isinstance(t, torch.Tensor) for t in o.values()) for o in outs.values()):
        raise _bad(path, "'outputs' must map each backend to its output tensors")
    if data.get("op", entry["op"]) != entry["op"] or data.get("case", entry["case"]) != entry["case"]:
        raise _bad(path, f"holds {data.get('op')}/{data.get('case')}, but the manifest lists it as "
                         f"{entry['op']}/{entry['case']}")
    return data

"""Run FlashMLA's own decode tests through dualops.compat.flash_mla (see docs/compat.md).

    python scripts/flashmla_tests.py --src .flashmla_src [--tests dense,sparse] [--shard I/N] [--list]

``--src`` is a FlashMLA source checkout (or the folder ``scripts/flashmla_tests.sh prepare``
makes): its ``tests/`` folder is used as it is. A package ``flash_mla`` that re-exports
``dualops.compat.flash_mla`` goes first on the path, so ``import flash_mla`` in FlashMLA's test
scripts resolves to dualops. The test functions and their case lists are FlashMLA's; this driver
only

* turns off their timing parts (the dense test's ``test_performance``, the sparse test's
  ``num_runs``), which look up FlashMLA's own kernel names in a profile;
* runs every case even after a failure and counts passes and failures (``--shard I/N`` runs
  cases I, I+N, I+2N, ... with the seeds of a full run, to split a run over several jobs);
* stands in for ``triton`` and ``rich`` where they are not installed: FlashMLA's kernelkit
  imports triton for its timing marker only, and the sparse test imports rich for its table.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
import types

SHIM = "from dualops.compat.flash_mla import *  # noqa: F401,F403\nfrom dualops.compat.flash_mla import __all__  # noqa: F401\n"


def _flash_mla_package() -> str:
    root = tempfile.mkdtemp(prefix="flash_mla_shim_")
    os.makedirs(os.path.join(root, "flash_mla"))
    with open(os.path.join(root, "flash_mla", "__init__.py"), "w") as f:
        f.write('__version__ = "dualops"\n' + SHIM)
    return root


def _stand_ins() -> list[str]:
    made = []
    try:
        import triton  # noqa: F401
    except ImportError:
        # only while kernelkit imports: torch itself treats an importable triton as the real one
        triton = types.ModuleType("triton")
        triton.jit = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
        sys.modules["triton"] = triton
        try:
            import kernelkit  # noqa: F401
        finally:
            del sys.modules["triton"]
        made.append("triton")
    try:
        import rich.console  # noqa: F401
        import rich.table  # noqa: F401
    except ImportError:
        class _Any:
            def __init__(self, *a, **k):
                pass

            def __getattr__(self, name):
                return lambda *a, **k: None
        rich = types.ModuleType("rich")
        for sub in ("console", "table"):
            m = types.ModuleType(f"rich.{sub}")
            m.Console = m.Table = _Any
            setattr(rich, sub, m)
            sys.modules[f"rich.{sub}"] = m
        sys.modules["rich"] = rich
        made.append("rich")
    return made


def _cpu_emulation():
    """Run the CUDA-only test scripts on the CPU (dualops' reference backend): a check of the
    shim against FlashMLA's test logic where no GPU is at hand; slow, so use small cases."""
    import torch

    for name in ("synchronize", "manual_seed", "manual_seed_all", "set_device", "empty_cache"):
        setattr(torch.cuda, name, lambda *a, **k: None)
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.Tensor.cuda = lambda self, *a, **k: self
    set_default = torch.set_default_device
    torch.set_default_device = lambda dev: set_default("cpu")


class Tally:
    def __init__(self, name, shard, shards, match=None, max_cases=None, deadline=None, first=0):
        self.name, self.shard, self.shards, self.first = name, shard, shards, first
        self.match, self.max_cases, self.deadline = match, max_cases, deadline
        self.index = -1
        self.passed, self.failed, self.timing_off, self.not_started = 0, [], 0, 0

    def mine(self, case=None) -> bool:
        self.index += 1
        if self.max_cases is not None and self.passed + len(self.failed) >= self.max_cases:
            return False
        if self.match and not all(m in repr(case) for m in self.match):
            return False
        if self.index % self.shards != self.shard or self.index < self.first:
            return False
        if self.deadline is not None and time.time() > self.deadline:
            self.not_started += 1
            return False
        return True

    def run(self, fn, case, *args):
        try:
            result = fn(case, *args)
            ok = getattr(result, "is_correct", True)
        except Exception:  # a failed assertion or an error: counted, and the run goes on
            traceback.print_exc()
            ok, result = False, None
        if ok:
            self.passed += 1
        else:
            self.failed.append((self.index, repr(case)))
            print(f"FAILED {self.name} case {self.index}: {case!r}", flush=True)
        return result

    def summary(self) -> str:
        n = self.passed + len(self.failed)
        late = f"; {self.not_started} cases of the shard not started (--time-limit)" if self.not_started else ""
        return (f"{self.name}: {self.passed} passed, {len(self.failed)} failed, of {n} cases "
                f"(shard {self.shard}/{self.shards}; timing turned off in {self.timing_off} of them{late})")


def run_dense(tally: Tally, dtype_name: str, list_only: bool):
    import torch

    mod = importlib.import_module("test_flash_mla_dense_decoding")
    original = mod.test_flash_mla

    def one(t):
        if not tally.mine(t) or list_only:
            return None
        if t.test_performance:
            t.test_performance = False
            tally.timing_off += 1
        return tally.run(original, t)

    mod.test_flash_mla = one
    mod.main(torch.float16 if dtype_name == "fp16" else torch.bfloat16)
    return tally.index + 1


def run_sparse(tally: Tally, list_only: bool):
    import torch

    mod = importlib.import_module("test_flash_mla_sparse_decoding")
    cases = [raw.to_test_param() for raw in mod.gen_testcase()]
    seed = 0
    for p in cases:  # the seeds the test's own counter gives in a full run, in order
        if p.seed == -1:
            p.seed, seed = seed, seed + 1
    if list_only:
        return len(cases)
    # main()'s setup
    torch.set_default_dtype(torch.bfloat16)
    torch.set_default_device("cuda:0")
    torch.cuda.set_device("cuda:0")
    torch.set_float32_matmul_precision("high")
    for p in cases:
        if not tally.mine(p):
            continue
        print(f"[{tally.index + 1}/{len(cases)}]  ", end="")
        if p.num_runs:
            p.num_runs = 0
            tally.timing_off += 1
        tally.run(mod.test_flash_mla, p)
    return len(cases)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.environ.get("FLASHMLA_SRC", ".flashmla_src"),
                    help="FlashMLA source folder holding tests/ (default $FLASHMLA_SRC or .flashmla_src)")
    ap.add_argument("--tests", default="dense,sparse", help="dense, sparse or both (comma-separated)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"], help="the dense test's --dtype")
    ap.add_argument("--shard", default="0/1", help="I/N: run cases I, I+N, ... (default 0/1: all)")
    ap.add_argument("--match", action="append", help="run only cases whose repr contains this text (repeatable)")
    ap.add_argument("--max-cases", type=int, help="stop after this many cases")
    ap.add_argument("--first", type=int, default=0,
                    help="skip the cases before this index (to resume a run that hit --time-limit)")
    ap.add_argument("--time-limit", type=float, help="start no case after this many seconds (then summarize)")
    ap.add_argument("--cpu", action="store_true", help="emulate on the CPU (reference backend; small cases)")
    ap.add_argument("--list", action="store_true", help="count the cases and exit")
    args = ap.parse_args(argv)
    tests_dir = os.path.join(os.path.abspath(args.src), "tests")
    if not os.path.isfile(os.path.join(tests_dir, "test_flash_mla_sparse_decoding.py")):
        ap.error(f"--src {args.src}: no tests/test_flash_mla_sparse_decoding.py there (a FlashMLA checkout "
                 f"at 9241ae3, or the folder 'scripts/flashmla_tests.sh prepare' makes)")
    shard, shards = (int(x) for x in args.shard.split("/"))
    sys.path[:0] = [_flash_mla_package(), tests_dir]
    made = _stand_ins()
    if args.cpu:
        _cpu_emulation()
    import flash_mla

    print(f"flash_mla -> {flash_mla.flash_mla_with_kvcache.__module__}; FlashMLA tests from {tests_dir}"
          + (f"; stand-ins for {', '.join(made)}" if made else ""), flush=True)
    start, lines, failed = time.time(), [], 0
    for name in args.tests.split(","):
        deadline = start + args.time_limit if args.time_limit else None
        tally = Tally(name, shard, shards, args.match, args.max_cases, deadline, args.first)
        total = run_dense(tally, args.dtype, args.list) if name == "dense" else run_sparse(tally, args.list)
        lines.append(f"{name}: {total} cases" if args.list else tally.summary())
        failed += len(tally.failed)
        for idx, case in tally.failed[:20]:
            lines.append(f"  failed case {idx}: {case}")
    print("\n".join(lines) + f"\n({time.time() - start:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

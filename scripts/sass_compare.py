"""Compare the SASS of the CUDA IFA kernels of two source trees (no GPU needed).

    python3 scripts/sass_compare.py OLD_TREE NEW_TREE [FAMILY ...] [--arg-shift LO:DELTA]

For each dtype family (default: all six, e.g. bf16_bf16 bf16_int8 ...) it compiles
backends/cuda/incre_flash_attention/ifa_<family>.cu of both trees to a cubin with the library's
flags, disassembles both (cuobjdump -sass; needs cuobjdump and nvdisasm on PATH) and compares
every kernel modulo addresses and encodings: identical, or per kernel the instruction counts and
whether the main-loop region (first to last HMMA) changed, and which opcodes it gained or lost.
--arg-shift LO:DELTA maps the new tree's constant-bank offsets >= LO down by DELTA (both hex),
for kernel arguments that moved because a struct before them grew (the IFA plan header grew by
40 bytes = 0x28 between plan versions 2 and 3: --arg-shift 0x3c0:0x28).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

FAMILIES = ("bf16_bf16", "f16_f16", "bf16_int8", "f16_int8", "bf16_fp8", "f16_fp8")
FLAGS = ["-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
         "--use_fast_math", "-lineinfo"]


def sass(tree: Path, family: str, out: Path) -> list[str]:
    cubin = out / f"{tree.name}_{family}.cubin"
    src = tree / "backends/cuda/incre_flash_attention" / f"ifa_{family}.cu"
    subprocess.run(["nvcc", *FLAGS, f"-I{tree / 'ops/include'}", f"-I{tree / 'backends'}", "-cubin", "-o",
                    str(cubin), str(src)], check=True)
    text = subprocess.run(["cuobjdump", "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    lines = []
    for line in text.splitlines():
        line = re.sub(r"/\*[0-9a-fx]+\*/|/\* 0x[0-9a-f]+ \*/", "", line)
        line = re.sub(r"\s+", " ", line).strip()
        if line:
            lines.append(line)
    return lines


def shift(lines: list[str], lo: int, delta: int) -> list[str]:
    def f(m):
        v = int(m.group(1), 16)
        return f"c[0x0][{hex(v - delta) if v >= lo else hex(v)}]"
    return [re.sub(r"c\[0x0\]\[(0x[0-9a-f]+)\]", f, s) for s in lines]


def functions(lines: list[str]) -> dict[str, list[str]]:
    out, name = {}, None
    for line in lines:
        m = re.match(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name and re.match(r"^[@A-Z]", line):
            out[name].append(line)
    return out


def main_loop(ins: list[str]) -> list[str]:
    idx = [i for i, s in enumerate(ins) if "HMMA" in s]
    return ins[idx[0]:idx[-1] + 1] if idx else []


def opcode(s: str) -> str:
    return s.split()[1] if s.startswith("@") else s.split()[0]


def compare(old: list[str], new: list[str]) -> bool:
    a, b = functions(old), functions(new)
    same = True
    for name, x in a.items():
        y = b.get(name)
        if y is None:
            print(f"  missing in new: {name}")
            same = False
            continue
        if x == y:
            continue
        same = False
        lx, ly = main_loop(x), main_loop(y)
        delta = Counter(map(opcode, ly))
        delta.subtract(Counter(map(opcode, lx)))
        ops = {k: v for k, v in delta.items() if v}
        print(f"  {name[:100]}: {len(x)} -> {len(y)} instructions; main loop "
              + ("identical" if lx == ly else f"{len(lx)} -> {len(ly)}, opcodes {ops or 'same multiset'}"))
    return same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--arg-shift", default="", metavar="LO:DELTA")
    args = ap.parse_args(argv)
    lo, delta = (int(x, 16) for x in args.arg_shift.split(":")) if args.arg_shift else (1 << 30, 0)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for fam in args.families:
            old = sass(args.old, fam, Path(tmp))
            new = shift(sass(args.new, fam, Path(tmp)), lo, delta)
            same = compare(old, new)
            print(f"{fam}: {'identical' if same else 'differs'} ({len(functions(old))} kernels)")
            ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The C headers the kernels include are generated from the schema and the planners; the
committed copies must be exactly what the generator makes (one source of truth)."""
import shutil
import subprocess
from pathlib import Path

import pytest

from dualops import codegen, schema

# The checkout these tests belong to (the package may be installed elsewhere).
ROOT = Path(__file__).resolve().parents[1]


def test_committed_generated_files_are_up_to_date():
    for path, text in codegen.generated(ROOT).items():
        assert path.read_text() == text, f"{path} is stale: run python -m dualops.codegen"
    assert codegen.main(["--check", "--root", str(ROOT)]) == 0


def test_params_struct_matches_pack_params(tmp_path):
    """Compile a probe against params.h/tiling.h and compare C offsets with schema.params_layout."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler on this machine")
    lines = ['#include <cstdio>', '#include <cstddef>', '#include "dualops/params.h"',
             '#include "dualops/tiling.h"', "int main() {"]
    for op in schema.OPS:
        struct = codegen._camel(op) + "Params"
        for name, _, _ in schema.params_layout(op):
            lines.append(f'  std::printf("{op} {name} %zu\\n", offsetof(dualops::{struct}, {name}));')
        lines.append(f'  std::printf("{op} sizeof %zu\\n", sizeof(dualops::{struct}));')
    for op, cls in codegen.plan_classes().items():
        lines.append(f'  std::printf("{op} tiling %zu\\n", sizeof(dualops::{codegen._camel(op)}Tiling));')
    lines.append("  return 0; }")
    src = tmp_path / "probe.cpp"
    src.write_text("\n".join(lines))
    exe = tmp_path / "probe"
    subprocess.run([cxx, "-std=c++17", f"-I{codegen.include_dir(ROOT).parent}", str(src), "-o", str(exe)],
                   check=True)
    got = dict(((a, b), int(c)) for a, b, c in (l.split() for l in subprocess.check_output([str(exe)], text=True).splitlines()))
    for op in schema.OPS:
        for name, _, off in schema.params_layout(op):
            assert got[(op, name)] == off, (op, name)
        assert got[(op, "sizeof")] == schema.params_size(op)
    for op, cls in codegen.plan_classes().items():
        assert got[(op, "tiling")] == 4 * len(cls.FIELDS)


def test_op_docs_come_from_the_schema():
    text = codegen.ops_markdown()
    for op in schema.OPS:
        assert f"## {op}" in text
        for a in schema.load(op).args:
            assert f"`{a.name}`" in text, (op, a.name)
    assert "| cuda | any | any | any | [64, 128, 256]" in text  # the IFA capability row


def test_readme_support_matrix_comes_from_the_capabilities():
    """The README's support matrix is generated from ops/<op>.yaml `capabilities:`; a matrix that
    no longer matches the schema makes `python -m dualops.codegen --check` fail."""
    readme = (ROOT / "README.md").read_text()
    assert codegen.SUPPORT_BEGIN in readme and codegen.SUPPORT_END in readme
    matrix = codegen.support_matrix_markdown()
    assert matrix in readme
    for op in schema.OPS:
        assert f"| `{op}` |" in matrix
        for backend in schema.load(op).capabilities:
            assert f"`{backend}`" in matrix.splitlines()[0], (op, backend)
    stale = readme.replace(matrix, matrix.replace("| `incre_flash_attention` |", "| `incre_flash_attention` | x |"))
    assert codegen.readme_with_support_matrix(stale) == readme
    with pytest.raises(ValueError, match="support-matrix"):
        codegen.readme_with_support_matrix("# no markers\n")

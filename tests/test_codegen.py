"""The C headers the kernels include are generated from the schema and the planners; the
committed copies must be exactly what the generator makes (one source of truth)."""
import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from dualops import codegen, plan_contract, schema

# The checkout these tests belong to (the package may be installed elsewhere).
ROOT = Path(__file__).resolve().parents[1]


def test_committed_generated_files_are_up_to_date():
    for path, text in codegen.generated(ROOT).items():
        assert path.read_text() == text, f"{path} is stale: run python -m dualops.codegen"
    assert codegen.main(["--check", "--root", str(ROOT)]) == 0


def _params_structs():
    """(op, backend or None, C struct name) of every params struct: the shared one of each op and
    one per backend with fields of its own."""
    for op in schema.OPS:
        yield op, None, schema.params_struct_name(op)
        for backend in schema.load(op).backend_kernel_params:
            yield op, backend, schema.params_struct_name(op, backend)


def test_params_struct_matches_pack_params(tmp_path):
    """Compile a probe against params.h/tiling.h and compare C offsets with schema.params_layout:
    every field of every params struct (shared and per backend), each struct's size, and that each
    is standard-layout (so offsetof is well-defined, and a backend struct's shared head is laid out
    exactly as the shared struct)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler on this machine")
    lines = ['#include <cstdio>', '#include <cstddef>', '#include <type_traits>', '#include "dualops/params.h"',
             '#include "dualops/tiling.h"', "int main() {"]
    structs = list(_params_structs())
    assert {b for _, b, _ in structs} >= {None, "cuda"}
    for op, backend, struct in structs:
        lines.append(f"  static_assert(std::is_standard_layout<dualops::{struct}>::value, \"{struct}\");")
        for name, _, _ in schema.params_layout(op, backend):
            lines.append(f'  std::printf("{struct} {name} %zu\\n", offsetof(dualops::{struct}, {name}));')
        lines.append(f'  std::printf("{struct} sizeof %zu\\n", sizeof(dualops::{struct}));')
    for op in schema.OPS:
        sp = plan_contract.spec(op)
        for st in (sp.header, *sp.backends.values()):
            lines.append(f'  std::printf("{op} {st.struct} %zu\\n", sizeof(dualops::{st.struct}));')
    for name, _, codes in plan_contract.all_enums():
        for value in codes:
            cname = codegen._value_name(value)
            lines.append(f'  std::printf("enum {name}.{value} %d\\n", static_cast<int>(dualops::{name}::{cname}));')
    lines.append("  return 0; }")
    src = tmp_path / "probe.cpp"
    src.write_text("\n".join(lines))
    exe = tmp_path / "probe"
    subprocess.run([cxx, "-std=c++17", f"-I{codegen.include_dir(ROOT).parent}", str(src), "-o", str(exe)],
                   check=True)
    got = dict(((a, b), int(c)) for a, b, c in (l.split() for l in subprocess.check_output([str(exe)], text=True).splitlines()))
    for op, backend, struct in structs:
        lay = schema.params_layout(op, backend)
        for name, _, off in lay:
            assert got[(struct, name)] == off, (struct, name)
        assert got[(struct, "sizeof")] == schema.params_size(op, backend), struct
    for op, backend, struct in structs:
        if backend is not None:     # the shared fields head the backend's struct, at the same offsets
            shared = schema.params_layout(op)
            assert schema.params_layout(op, backend)[:len(shared)] == shared, struct
            assert {n for n, _, _ in schema.params_layout(op, backend)[len(shared):]}.isdisjoint(
                n for n, _, _ in shared), struct
    for op in schema.OPS:
        sp = plan_contract.spec(op)
        assert got[(op, sp.header.struct)] == 4 * len(sp.header.fields)
        for b in sp.backends.values():
            extra = len(sp.header.fields) if b.placement == "extends" else 0
            assert got[(op, b.struct)] == 4 * (extra + len(b.fields)), (op, b.struct)
    for name, _, codes in plan_contract.all_enums():
        for value, code in codes.items():
            assert got[("enum", f"{name}.{value}")] == code, (name, value)


def test_plan_classes_pack_the_contract():
    """Each planner's plan class packs exactly the fields of its op's plan contract (shared header
    and the backend structs that extend it), and Python reads the contract's codes."""
    from dualops.heuristics import cuda as H
    from dualops.tiling import GroupedGemmPlan, IfaPlan, MlaPlan
    from dualops.tiling import grouped_gemm as gg, mla_decode as mla

    for op, cls in (("incre_flash_attention", IfaPlan), ("mla_decode", MlaPlan), ("grouped_gemm", GroupedGemmPlan)):
        sp = plan_contract.spec(op)
        assert cls.FIELDS == tuple(sp.header.fields) and cls.VERSION == sp.header.version, op
        extends = {b: tuple(st.fields) for b, st in sp.backends.items() if st.placement == "extends"}
        assert cls.BACKEND_FIELDS == extends, op
        names = {f.name for f in dataclasses.fields(cls)}
        assert set(cls.FIELDS).union(*cls.BACKEND_FIELDS.values()) <= names, op
    assert mla.KV_FORMATS == plan_contract.enum("mla_decode", "kv_format")
    assert H.MLA_CUDA_KERNELS == plan_contract.enum("mla_decode", "cuda_kernel")
    assert gg.LAYOUTS == plan_contract.enum("grouped_gemm", "layout")
    assert gg.SCALE_MODES == plan_contract.enum("grouped_gemm", "scale_mode")
    assert {H.VARIANT_NAMES[v] for v in plan_contract.enum("incre_flash_attention", "cuda_variant").values()} \
        == set(H.VARIANT_NAMES.values())
    with pytest.raises(ValueError, match="missing"):
        plan_contract.pack_struct("mla_decode", "ascend", num_cores=1)


def test_native_code_reads_plan_versions_from_the_contract():
    """Native code compares a plan's version with the generated constant (``<Struct>::kVersion``),
    never with a number of its own, which would go stale when the schema's version moves on (a
    CUDA host once kept reading version 3 after the contract had moved to 4)."""
    import re

    literal = re.compile(r"\bversion\s*[!=]=\s*\d|\d\s*[!=]=\s*[\w.>-]*version\b")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "backends").rglob("*")) if path.suffix in (".cu", ".cuh", ".cpp", ".h")
             for n, line in enumerate(path.read_text().splitlines(), 1) if literal.search(line)]
    assert not found, "plan versions compared with literals:\n" + "\n".join(found)
    hosts = [ROOT / "backends" / "cuda" / op / f"{op}_host.cu" for op in ("incre_flash_attention", "mla_decode")]
    for path in hosts:
        assert "::kVersion" in path.read_text(), path


def test_check_fails_on_drift(tmp_path):
    """`codegen --check` reports a generated file that differs from what the schema makes."""
    root = tmp_path / "checkout"
    for path, text in codegen.generated(ROOT).items():
        dest = root / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    (root / "ops" / "incre_flash_attention.yaml").write_text((ROOT / "ops" / "incre_flash_attention.yaml").read_text())
    assert codegen.main(["--check", "--root", str(root)]) == 0
    tiling = root / "ops" / "include" / "dualops" / "tiling.h"
    tiling.write_text(tiling.read_text().replace("int32_t whole_groups;", "int32_t whole_groups, pad;"))
    assert codegen.main(["--check", "--root", str(root)]) == 1


def test_op_docs_come_from_the_schema():
    text = codegen.ops_markdown()
    for op in schema.OPS:
        assert f"## {op}" in text
        for a in schema.load(op).args:
            assert f"`{a.name}`" in text, (op, a.name)
    assert "| cuda | any | any | any | [64, 128, 256]" in text  # the IFA capability row
    # value checks: every call to the backends whose kernels trust device values, else validate="full"
    assert text.count("The API runs them on every call to `ascend_sim`, `npu`") == len(schema.OPS)
    assert "With `validate=\"full\"` also" not in text


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

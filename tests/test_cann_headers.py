"""The Ascend C kernels compiled against CANN's own AscendC headers, not our simulator's: every
backends/ascend/<op>/<op>_kernel.cpp must compile (syntax and every template instantiation it
reaches) with g++ and clang++, where present, in CANN's CPU-debug mode for dav-2201 (Atlas A2).

The headers are those of an installed CANN when ASCEND_HOME_PATH is set, else the bundle named by
DUALOPS_CANN_HEADERS (tests/helpers/cann_headers.py; CI sets it). Where neither is set the tests are
skipped and say so.

The planted cases show the check has teeth: a correct use of the API compiles, and the same code
with one mistake (a struct field that does not exist, a call with an argument too many or too few,
a function that does not exist) fails with CANN's headers. The same planted code compiled against
the simulator's headers (backends/ascend/sim/include) must fail too: where the simulator accepted
something CANN rejects, the simulator was wrong.
"""
from __future__ import annotations

import functools

import pytest

import cann_headers as ch

HEADERS, WHY = ch.headers()
needs_headers = pytest.mark.skipif(HEADERS is None, reason=WHY)
COMPILERS = ch.compilers()
# The planted cases run with one compiler (g++, else clang++): a compile parses all of CANN's
# headers (~5 s of CPU), and what they show does not depend on the compiler.
PLANT_CC = next((cc for cc, path in COMPILERS.items() if path), None)
SIM_FLAGS = ["-std=c++17", "-DDUALOPS_ASCEND_SIM=1", f"-I{ch.ROOT / 'backends/ascend/sim/include'}", *ch.PROJECT]

# One function that uses the API the kernels use: GM <-> UB copies with DataCopyParams, a cube
# Mmad with MmadParams. Each planted case is a copy of it with one line replaced; all copies go
# into one translation unit (one parse of the headers), and each must get an error on its line.
BODY = """__aicore__ inline void NAME(AscendC::LocalTensor<half>& ub, AscendC::GlobalTensor<half>& gm,
                            AscendC::LocalTensor<float>& c, AscendC::LocalTensor<half>& a,
                            AscendC::LocalTensor<half>& b) {
  AscendC::DataCopyParams p;
  p.blockCount = 1;
  p.blockLen = 2;
  AscendC::DataCopy(ub, gm, p);
  AscendC::Mmad(c, a, b, AscendC::MmadParams(16, 16, 16, 0, false, true));
}
"""
PLANTED = {
    "wrong_struct_field": ("p.blockLen = 2;", "p.blockLength = 2;"),
    "extra_argument": ("AscendC::DataCopy(ub, gm, p);", "AscendC::DataCopy(ub, gm, p, 1);"),
    "missing_params": ("AscendC::Mmad(c, a, b, AscendC::MmadParams(16, 16, 16, 0, false, true));",
                       "AscendC::Mmad(c, a, b);"),
    "unknown_function": ("AscendC::Mmad(c, a, b,", "AscendC::MmadEx(c, a, b,"),
}


def planted_source() -> tuple[str, dict]:
    """(the translation unit with every planted copy, {case: line of its mistake})."""
    text, lines = '#include "kernel_operator.h"\n', {}
    for name, (good, bad) in PLANTED.items():
        body = BODY.replace("NAME", f"Planted_{name}")
        assert good in body, name
        lines[name] = text.count("\n") + 1 + body[:body.index(good)].count("\n")
        text += body.replace(good, bad)
    return text, lines


# What the error must name, so a failure for another reason (a broken include path) is not taken
# for the planted mistake.
NAMED = {"wrong_struct_field": "blockLength", "extra_argument": "DataCopy", "missing_params": "Mmad",
         "unknown_function": "MmadEx"}


@functools.lru_cache(maxsize=1)
def _results(tmp: str):
    import pathlib

    d = pathlib.Path(tmp)
    (d / "good.cpp").write_text('#include "kernel_operator.h"\n' + BODY.replace("NAME", "Good"))
    (d / "planted.cpp").write_text(planted_source()[0])
    jobs = {}
    for cc, path in COMPILERS.items():
        if path is None:
            continue
        if HEADERS is not None:
            for k in ch.KERNELS:
                jobs[("cann", cc, k)] = [path, "-fsyntax-only", *HEADERS.flags(), str(ch.ROOT / k)]
        for name in ("good", "planted") if cc == PLANT_CC else ():
            if HEADERS is not None:
                jobs[("cann", cc, name)] = [path, "-fsyntax-only", *HEADERS.flags(), str(d / f"{name}.cpp")]
            jobs[("sim", cc, name)] = [path, "-fsyntax-only", *SIM_FLAGS, str(d / f"{name}.cpp")]
    return ch.compile_many(jobs)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _results(str(tmp_path_factory.mktemp("cann_planted")))


def _compiler(cc):
    if COMPILERS[cc] is None:
        pytest.skip(f"{cc} not installed (scripts/test.sh installs clang)")


needs_compiler = pytest.mark.skipif(PLANT_CC is None, reason="neither g++ nor clang++ is installed")


def _errors(stderr: str) -> str:
    return "\n".join(ln for ln in stderr.splitlines() if "error" in ln)[:3000] or stderr[-3000:]


def test_every_kernel_is_listed():
    assert {k.split("/")[-1] for k in ch.KERNELS} >= {"incre_flash_attention_kernel.cpp", "mla_decode_kernel.cpp",
                                                      "grouped_gemm_kernel.cpp"}, ch.KERNELS


@needs_headers
@pytest.mark.parametrize("cc", sorted(COMPILERS))
@pytest.mark.parametrize("kernel", ch.KERNELS)
def test_kernel_compiles_against_cann_headers(results, cc, kernel):
    _compiler(cc)
    rc, err = results[("cann", cc, kernel)]
    assert rc == 0, f"{kernel} with {cc} against {HEADERS.source}:\n{_errors(err)}"


# The planted code against CANN's headers and against the simulator's (backends/ascend/sim).
AGAINST = [pytest.param("cann", marks=needs_headers), "sim"]


@needs_compiler
@pytest.mark.parametrize("against", AGAINST)
def test_correct_api_use_compiles(results, against):
    rc, err = results[(against, PLANT_CC, "good")]
    assert rc == 0, _errors(err)


@needs_compiler
@pytest.mark.parametrize("against", AGAINST)
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_fails(results, against, name):
    """CANN's headers reject it, and so must the simulator's: an error on the mistake's line that
    names what is wrong."""
    rc, err = results[(against, PLANT_CC, "planted")]
    line = planted_source()[1][name]
    here = [ln for ln in err.splitlines() if f"planted.cpp:{line}:" in ln and "error" in ln]
    assert rc != 0 and here, f"{name}: the {against} headers accept {PLANTED[name][1]!r} (line {line}):\n{_errors(err)}"
    assert any(NAMED[name] in ln for ln in here), f"{name}: line {line} failed, but not on {NAMED[name]}:\n{here}"


def test_planted_lines_are_the_mistakes():
    text, lines = planted_source()
    rows = text.splitlines()
    for name, (_, bad) in PLANTED.items():
        assert bad.strip() in rows[lines[name] - 1], (name, rows[lines[name] - 1])


def test_headers_found_or_skip_reason_is_clear():
    """Either headers were found, or the reason names what to set."""
    if HEADERS is None:
        assert "ASCEND_HOME_PATH" in WHY or ch.ENV_BUNDLE in WHY, WHY
    else:
        assert all(d.is_dir() for d in HEADERS.system_dirs[:2]), HEADERS.system_dirs

"""The compiler's view of the Ascend C kernels on the CPU: every kernel translation unit
(backends/ascend/<op>/<op>_kernel.cpp) type-checks with clang in the simulator's strict qualifier
mode (ASCEND_SIM_STRICT_QUALIFIERS), where `__gm__` is a distinct address space and `__aicore__`
functions may call only `__aicore__` functions and the AscendC API -- what bisheng enforces when
CANN builds them. The planted cases show that the mode rejects a host-only call from kernel code
and a generic pointer cast to a GM pointer, and accepts the integer-address conversion kernels use.
scripts/test.sh installs clang (Debian's package) where it is missing."""
from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLANG = shutil.which("clang++")
FLAGS = ["-std=c++17", "-fsyntax-only", "-Werror=tcb-enforcement", "-DASCEND_SIM_STRICT_QUALIFIERS",
         f"-I{ROOT / 'backends/ascend/sim/include'}", f"-I{ROOT / 'ops/include'}", f"-I{ROOT / 'backends'}",
         f"-I{ROOT}"]
KERNELS = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("backends/ascend/*/*_kernel.cpp"))

needs_clang = pytest.mark.skipif(CLANG is None, reason="clang++ not installed (scripts/test.sh installs it)")

PLANTED = {
    "integer_address": ("__aicore__ inline void K(GM_ADDR a) { AscendC::GlobalTensor<float> g;\n"
                        "  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(reinterpret_cast<uint64_t>(a))); }",
                        None),
    "host_only_call": ("inline int HostOnly(int x) { return x + 1; }\n"
                       "__aicore__ inline int K(int x) { return HostOnly(x); }",
                       "violation of trusted computing base 'aicore'"),
    "void_to_gm_cast": ("__aicore__ inline void K(void* p) { AscendC::GlobalTensor<float> g;\n"
                        "  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(p)); }",
                        "reinterpret_cast from 'void *' to '__gm__ float *' is not allowed"),
    "generic_pointer_as_gm": ("__aicore__ inline void K(float* p) { AscendC::GlobalTensor<float> g;\n"
                              "  g.SetGlobalBuffer(p); }",
                              "no matching member function for call to 'SetGlobalBuffer'"),
}


def _check(args, **kw):
    return subprocess.run([CLANG, *FLAGS, *args], capture_output=True, text=True, timeout=300, **kw)


def test_every_kernel_is_listed():
    assert {k.split("/")[3] for k in KERNELS} >= {"incre_flash_attention_kernel.cpp", "mla_decode_kernel.cpp",
                                                  "grouped_gemm_kernel.cpp"}, KERNELS


@needs_clang
@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_type_checks_with_strict_qualifiers(kernel):
    r = _check([str(ROOT / kernel)])
    errors = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert r.returncode == 0 and not errors, "\n".join(errors[:20]) or r.stderr[-3000:]


@needs_clang
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_strict_qualifiers_catch_planted_faults(name, tmp_path):
    body, expected = PLANTED[name]
    src = tmp_path / f"{name}.cpp"
    src.write_text('#include "kernel_operator.h"\n' + body + "\n")
    r = _check([str(src)])
    if expected is None:
        assert r.returncode == 0, r.stderr[-3000:]
    else:
        assert r.returncode != 0 and expected in r.stderr, r.stderr[-3000:]

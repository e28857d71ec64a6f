"""The NPU host code (backends/ascend/bind_npu.cpp and every backends/ascend/<op>/<op>_npu_launch.cpp)
compiles (-fsyntax-only) against CANN's runtime headers, and each launcher passes its kernel
exactly the kernel's GM_ADDR arguments.

CANN's acl headers come from, in order: an installed CANN (ASCEND_HOME_PATH/include); a torch_npu
wheel downloaded into build/torch_npu_wheel/ (it carries CANN's acl headers under
torch_npu/include/third_party/acl/inc; never installed: `python -m pip download --no-deps
torch_npu==2.8.0 -d build/torch_npu_wheel`); else our own minimal declarations of the few acl
functions the code calls (tests/helpers/acl_min, which checks the code's own consistency but not
CANN's signatures). The aclrtlaunch_<kernel>.h headers that CANN's ascendc_library generates at
build time are written here from the kernels' entry signatures, in the form CANN generates them
(`extern "C" uint32_t aclrtlaunch_<kernel>(uint32_t numBlocks, void* stream, void* arg...)`)."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sysconfig
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CXX = shutil.which("g++") or shutil.which("clang++")
pytestmark = pytest.mark.skipif(CXX is None, reason="neither g++ nor clang++ is installed")
KERNELS = sorted(ROOT.glob("backends/ascend/*/*_kernel.cpp"))
ENTRY = re.compile(r'extern "C" __global__ __aicore__ void (\w+)\(([^)]*)\)', re.S)


def _acl_include() -> tuple[pathlib.Path, str]:
    home = os.environ.get("ASCEND_HOME_PATH")
    if home and (pathlib.Path(home) / "include/acl/acl.h").is_file():
        return pathlib.Path(home) / "include", f"installed CANN at {home}"
    wheels = sorted((ROOT / "build/torch_npu_wheel").glob("torch_npu-*.whl"))
    if wheels:
        dest = ROOT / "build/torch_npu_headers" / wheels[-1].stem
        inc = dest / "torch_npu/include/third_party/acl/inc"
        if not (dest / ".complete").is_file():
            with zipfile.ZipFile(wheels[-1]) as z:
                members = [n for n in z.namelist() if n.startswith("torch_npu/include/third_party/acl/inc/")]
                z.extractall(dest, members)
            (dest / ".complete").touch()
        if (inc / "acl/acl.h").is_file():
            return inc, f"CANN's acl headers from {wheels[-1].name}"
    return ROOT / "tests/helpers/acl_min", "our minimal acl declarations (tests/helpers/acl_min)"


ACL_INC, ACL_FROM = _acl_include()


def entries() -> dict[str, list[str]]:
    """kernel name -> its argument names, from each kernel's extern "C" entry."""
    out = {}
    for k in KERNELS:
        m = ENTRY.search(k.read_text())
        assert m, f"{k} has no extern \"C\" __global__ __aicore__ entry"
        args = [a.split() for a in m.group(2).split(",")]
        assert all(len(a) == 2 and a[0] == "GM_ADDR" for a in args), (k, args)
        out[m.group(1)] = [a[1] for a in args]
    return out


def launch_header(name: str, args: list[str]) -> str:
    params = ", ".join(["uint32_t numBlocks", "void* stream"] + [f"void* {a}" for a in args])
    return (f'#ifndef HEADER_ACLRTLAUNCH_{name.upper()}_H\n#define HEADER_ACLRTLAUNCH_{name.upper()}_H\n'
            f'#include "acl/acl_base.h"\n#ifndef ACLRT_LAUNCH_KERNEL\n'
            f'#define ACLRT_LAUNCH_KERNEL(kernel_func) aclrtlaunch_##kernel_func\n#endif\n'
            f'extern "C" uint32_t aclrtlaunch_{name}({params});\n#endif\n')


def _compile(src: pathlib.Path, gen: pathlib.Path):
    import pybind11

    argv = [CXX, "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", f"-I{gen}", f"-I{ACL_INC}",
            f"-I{ROOT / 'ops/include'}", f"-I{ROOT / 'backends'}", f"-I{ROOT}", f"-I{pybind11.get_include()}",
            f"-I{sysconfig.get_paths()['include']}", str(src)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    d = tmp_path_factory.mktemp("aclrtlaunch")
    for name, args in entries().items():
        (d / f"aclrtlaunch_{name}.h").write_text(launch_header(name, args))
    return d


def test_every_kernel_has_a_launcher():
    names = set(entries())
    launchers = {p.name.replace("_npu_launch.cpp", "") for p in ROOT.glob("backends/ascend/*/*_npu_launch.cpp")}
    assert names == launchers == {"incre_flash_attention", "mla_decode", "grouped_gemm"}, (names, launchers)
    bind = (ROOT / "backends/ascend/bind_npu.cpp").read_text()
    assert all(f'{{"{n}", &npu::Launch' in bind for n in names), "bind_npu.cpp must list every launcher"


@pytest.mark.parametrize("src", sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("backends/ascend/*/*_npu_launch.cpp"))
                         + ["backends/ascend/bind_npu.cpp"])
def test_host_code_compiles_against_acl_headers(gen, src):
    r = _compile(ROOT / src, gen)
    assert r.returncode == 0, f"{src} against {ACL_FROM}:\n{r.stderr[-3000:]}"


def test_launcher_refuses_a_non_address_argument(tmp_path):
    """A kernel entry whose arguments are not all GM_ADDR (void* in the generated launch
    function) fails to compile in its launcher."""
    header = launch_header("mla_decode", entries()["mla_decode"]).replace("void* workspace", "uint32_t workspace")
    assert "uint32_t workspace" in header
    (tmp_path / "aclrtlaunch_mla_decode.h").write_text(header)
    r = _compile(ROOT / "backends/ascend/mla_decode/mla_decode_npu_launch.cpp", tmp_path)
    assert r.returncode != 0 and "must be a GM_ADDR" in r.stderr, r.stderr[-2000:]


def test_launch_checks_the_argument_count(tmp_path):
    """Launch() refuses an address list of the wrong length (the Python glue's bug) before the
    kernel is launched: compiled and run here with a stand-in launch function."""
    src = tmp_path / "count.cpp"
    src.write_text("""#include "ascend/npu_launch.h"
#include <cstdio>
static int calls = 0;
extern "C" uint32_t fake(uint32_t, void*, void*, void*, void*) { ++calls; return 0; }
int main() {
  using dualops::npu::Launch;
  if (Launch("k", &fake, 1, nullptr, {1, 2, 3}) != 0 || calls != 1) return 1;
  try { Launch("k", &fake, 1, nullptr, {1, 2}); } catch (const std::invalid_argument& e) {
    std::puts(e.what()); return calls == 1 ? 0 : 3;
  }
  return 2;
}
""")
    exe = tmp_path / "count"
    r = subprocess.run([CXX, "-std=c++17", f"-I{ROOT / 'backends'}", str(src), "-o", str(exe)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, (run.returncode, run.stdout)
    assert "kernel k takes 3 GM addresses, got 2" in run.stdout, run.stdout

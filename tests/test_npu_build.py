"""The NPU build branch of CMakeLists.txt, configured here against a stand-in for CANN: a folder
laid out like an installed CANN in the parts CMake reads (ascendc.cmake under
compiler/tikcpp/ascendc_kernel_cmake, include/, lib64/), whose ascendc.cmake turns the arguments
of ascendc_library / ascendc_include_directories / ascendc_compile_definitions into one printed
"device compile" command per kernel. The tests read what reaches the commands: the kernel
sources and the SoC of the device compiles, the host launchers in compile_commands.json with
CANN's include folder and the generated launch headers, and the link line of dualops._C with the
kernel library and libascendcl. Nothing is compiled; CANN's real compiler is never run here."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CMAKE = shutil.which("cmake")
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(CMAKE is None or MAKE is None, reason="cmake and make are needed to configure the build")

KERNELS = sorted(p.name for p in ROOT.glob("backends/ascend/*/*_kernel.cpp"))
LAUNCHERS = sorted(p.name for p in ROOT.glob("backends/ascend/*/*_npu_launch.cpp"))

FAKE_ASCENDC_CMAKE = r"""
# Stand-in for CANN's ascendc.cmake (tests/test_npu_build.py): the functions dualops calls.
if(NOT DEFINED SOC_VERSION)
  message(FATAL_ERROR "SOC_VERSION value not set.")
endif()
if(NOT EXISTS "${ASCEND_CANN_PACKAGE_PATH}")
  message(FATAL_ERROR "ASCEND_CANN_PACKAGE_PATH does not exist")
endif()
function(ascendc_library target type)
  add_library(${target}_interface INTERFACE)
  set(objs)
  foreach(src ${ARGN})
    get_filename_component(name ${src} NAME_WE)
    set(obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.o)
    add_custom_command(OUTPUT ${obj}
      COMMAND ${CMAKE_COMMAND} -E echo fake-ccec --soc=${SOC_VERSION}
        "-I$<JOIN:$<TARGET_PROPERTY:${target}_interface,INTERFACE_INCLUDE_DIRECTORIES>, -I>"
        "-D$<JOIN:$<TARGET_PROPERTY:${target}_interface,INTERFACE_COMPILE_DEFINITIONS>, -D>" -c ${src}
      COMMAND ${CMAKE_COMMAND} -E touch ${obj})
    list(APPEND objs ${obj})
  endforeach()
  add_custom_target(${target}_device DEPENDS ${objs})
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/${target}_stub.cpp "int ${target}_stub() { return 0; }\n")
  add_library(${target} ${type} ${CMAKE_CURRENT_BINARY_DIR}/${target}_stub.cpp)
  add_dependencies(${target} ${target}_device)
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/include/${target})
endfunction()
function(ascendc_include_directories target scope)
  target_include_directories(${target}_interface INTERFACE ${ARGN})
endfunction()
function(ascendc_compile_definitions target scope)
  target_compile_definitions(${target}_interface INTERFACE ${ARGN})
endfunction()
"""


def _fake_cann(d: pathlib.Path) -> pathlib.Path:
    cmake_dir = d / "compiler/tikcpp/ascendc_kernel_cmake"
    cmake_dir.mkdir(parents=True)
    (cmake_dir / "ascendc.cmake").write_text(FAKE_ASCENDC_CMAKE)
    (d / "include/acl").mkdir(parents=True)
    (d / "include/acl/acl.h").write_text("/* stand-in */\n")
    (d / "lib64").mkdir()
    return d


def _configure(tmp: pathlib.Path, cann: pathlib.Path, *extra: str):
    import pybind11

    build = tmp / "build"
    env = dict(os.environ, ASCEND_HOME_PATH=str(cann))
    r = subprocess.run([CMAKE, "-S", str(ROOT), "-B", str(build), "-G", "Unix Makefiles", "-DDUALOPS_CUDA=off",
                        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                        f"-DPython_EXECUTABLE={sys.executable}", *extra],
                       env=env, capture_output=True, text=True, timeout=300)
    return r, build


@pytest.fixture(scope="module")
def configured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("npu_build")
    cann = _fake_cann(tmp / "cann")
    r, build = _configure(tmp, cann, "-DDUALOPS_SOC=Ascend910B3")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # -k: a dry run stops where _C's link wants the kernel library, which a dry run never makes.
    dry = subprocess.run([MAKE, "-n", "-k", "-C", str(build)], capture_output=True, text=True, timeout=300)
    commands = json.loads((build / "compile_commands.json").read_text())
    return dict(cann=cann, build=build, configure=r.stdout, dry=dry.stdout, commands=commands)


def test_every_op_has_a_kernel_and_a_launcher():
    assert len(KERNELS) == 3 and len(LAUNCHERS) == 3, (KERNELS, LAUNCHERS)
    assert [k.replace("_kernel.cpp", "") for k in KERNELS] == [k.replace("_npu_launch.cpp", "") for k in LAUNCHERS]


def test_configure_reports_cann_and_soc(configured):
    assert "NPU kernels for ascend910b3" in configured["configure"], configured["configure"][-2000:]


def test_device_compiles_get_every_kernel_the_soc_and_the_includes(configured):
    lines = [ln for ln in configured["dry"].splitlines() if "fake-ccec" in ln]
    for k in KERNELS:
        hit = [ln for ln in lines if ln.rstrip().endswith(k)]
        assert len(hit) == 1, (k, lines)
        ln = hit[0]
        assert "--soc=ascend910b3" in ln, ln
        assert f"-I{ROOT}/ops/include" in ln and f"-I{ROOT}/backends" in ln, ln
        assert "-DDUALOPS_ASCEND_NPU=1" in ln, ln
        assert "sim/include" not in ln, ln   # CANN's headers, not the simulator's


def test_host_launchers_compile_with_cann_includes(configured):
    by_file = {pathlib.Path(c["file"]).name: c["command"] for c in configured["commands"]}
    for name in LAUNCHERS + ["bind_npu.cpp"]:
        cmd = by_file.get(name)
        assert cmd is not None, (name, sorted(by_file))
        assert f"-I{configured['cann']}/include" in cmd, cmd
        assert f"-I{configured['build']}/include/dualops_npu_kernels" in cmd, cmd
        assert "-DDUALOPS_WITH_CANN=1" in cmd and 'DUALOPS_NPU_SOC=\\"ascend910b3\\"' in cmd, cmd
    # The simulator build of the same kernels stays in the module.
    for k in KERNELS:
        assert "-DDUALOPS_ASCEND_SIM=1" in by_file[k], by_file[k]


def test_module_links_the_kernel_library_and_ascendcl(configured):
    txt = (configured["build"] / "CMakeFiles/_C.dir/link.txt").read_text()
    assert "libdualops_npu_kernels.so" in txt and "-lascendcl" in txt, txt
    assert f"-L{configured['cann']}/lib64" in txt, txt


def test_unknown_soc_is_refused(tmp_path):
    cann = _fake_cann(tmp_path / "cann")
    r, _ = _configure(tmp_path, cann, "-DDUALOPS_SOC=ascend310p1")
    assert r.returncode != 0
    assert "DUALOPS_SOC=ascend310p1 is not an Atlas A2/A3 SoC" in r.stderr, r.stderr[-2000:]

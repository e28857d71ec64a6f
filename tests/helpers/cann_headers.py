"""Where the tests find CANN's headers, and the compiler flags that compile an Ascend C kernel
against them on the host (CANN's CPU-debug mode: `__CCE_KT_TEST__`, dav-2201 / Atlas A2).

Two sources, in this order:
- an installed CANN: ``ASCEND_HOME_PATH`` set (``source <CANN>/set_env.sh``); the include list
  follows asc-devkit's cmake/asc/asc_modules/CMakeASCInformation.cmake, run mode ``cpu``;
- the header bundle: the folder named by ``DUALOPS_CANN_HEADERS`` (holding ``cann-headers.tar.xz``;
  CI's ``.ci/run`` sets it where the bundle is at hand). It is unpacked once into
  ``build/cann-headers/<hash>/`` and reused; nothing of it is committed.

``headers()`` says which one is used, or why there is none (the tests then skip with that reason).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import shutil
import subprocess
import tarfile
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV_BUNDLE = "DUALOPS_CANN_HEADERS"
TARBALL = "cann-headers.tar.xz"

# CANN's CPU-debug defines for dav-2201 (Atlas A2 / Ascend910B, the AIC+AIV core of the kernels).
DEFINES = ["-D_GLIBCXX_USE_CXX11_ABI=0", "-D__CCE_KT_TEST__=1", "-DASCENDC_CPU_DEBUG=1", "-DASCENDC_DEBUG=1",
           "-D__CCE_AICORE__=220", "-D__DAV_C220__", "-D__NPU_ARCH__=2201"]
_ASC_DIRS = ("impl/adv_api", "impl/basic_api", "impl/c_api", "impl/micro_api", "impl/simt_api", "impl/utils",
             "include", "include/adv_api", "include/adv_api/matmul", "include/aicpu_api", "include/basic_api",
             "include/c_api", "include/interface", "include/micro_api", "include/simt_api", "include/tiling",
             "include/utils")
PROJECT = [f"-I{ROOT / 'ops/include'}", f"-I{ROOT / 'backends'}", f"-I{ROOT}"]
KERNELS = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("backends/ascend/*/*_kernel.cpp"))


@dataclasses.dataclass(frozen=True)
class Headers:
    source: str                 # "installed CANN at ..." or "bundle ..."
    system_dirs: tuple          # -isystem folders, in order

    def flags(self) -> list[str]:
        out = ["-std=c++17", *DEFINES]
        for d in self.system_dirs:
            out += ["-isystem", str(d)]
        return out + PROJECT


def _installed(home: pathlib.Path) -> Headers:
    asc = home / "asc"
    dirs = [home / "tools/tikicpulib/lib/include", home / "include"]
    dirs += [asc / d for d in _ASC_DIRS] + [asc]
    return Headers(f"installed CANN at {home} (ASCEND_HOME_PATH)", tuple(dirs))


def _bundle(root: pathlib.Path, where: str) -> Headers:
    asc = root / "asc-devkit"
    dirs = [root / "stub", root / "asc-tools/cpudebug/include"] + [asc / d for d in _ASC_DIRS] + [asc, root / "gen"]
    return Headers(f"bundle {where} unpacked at {root}", tuple(dirs))


def unpack(tarball: pathlib.Path) -> pathlib.Path:
    """The bundle's root folder under build/cann-headers/<hash>/ (unpacked on first use)."""
    h = hashlib.sha256(tarball.read_bytes()).hexdigest()[:16]
    dest = ROOT / "build" / "cann-headers" / h
    if not (dest / ".complete").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(dir=dest.parent, prefix=".unpack."))
        try:
            with tarfile.open(tarball, "r:xz") as tf:
                tf.extractall(tmp, filter="data")
            (tmp / "cann-headers" / ".complete").touch()
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp / "cann-headers", dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def headers() -> tuple[Headers | None, str]:
    """(the headers to compile against, or None; a line saying which or why none)."""
    home = os.environ.get("ASCEND_HOME_PATH")
    if home:
        h = pathlib.Path(home)
        if not (h / "asc" / "include").is_dir():
            return None, f"ASCEND_HOME_PATH={home} has no asc/include (not a CANN toolkit with asc-devkit)"
        found = _installed(h)
        return found, found.source
    given = os.environ.get(ENV_BUNDLE)
    if not given:
        return None, (f"no CANN headers: neither ASCEND_HOME_PATH nor {ENV_BUNDLE} is set; set "
                      f"{ENV_BUNDLE}=/path/to/cann-headers (a folder holding {TARBALL}) to check the kernels "
                      f"against CANN's AscendC headers")
    folder = pathlib.Path(given)
    if not (folder / TARBALL).is_file():
        return None, f"{ENV_BUNDLE}={given} holds no {TARBALL}"
    found = _bundle(unpack(folder / TARBALL), str(folder / TARBALL))
    return found, found.source


def compilers() -> dict[str, str | None]:
    return {name: shutil.which(name) for name in ("g++", "clang++")}


def compile_many(jobs: dict, *, workers: int = 2, timeout: int = 600) -> dict:
    """Run the {key: argv} compiles, `workers` at a time; {key: (returncode, stderr)}."""
    from concurrent.futures import ThreadPoolExecutor

    def one(argv):
        r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
        return r.returncode, r.stderr

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(one, argv) for key, argv in jobs.items()}
        return {key: f.result() for key, f in futures.items()}

#!/usr/bin/env bash
# Installs everything dualops needs on a fresh machine and builds the package (dualops._C).
# - torch: keeps an installed torch (CUDA or CPU build, or one with torch_npu); otherwise installs
#   the CPU build torch==2.13.0 (never lets pip pull a CUDA build by accident).
# - CUDA kernels are compiled when nvcc is present (DUALOPS_CUDA=auto|on|off), with the
#   CUTLASS/CuTe headers from the nvidia-cutlass package.
# - Offline machines (the GPU box): put wheels in .whl/ and set DUALOPS_OFFLINE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PIP=("$PY" -m pip install -q --disable-pip-version-check)
if [ "${DUALOPS_OFFLINE:-0}" = 1 ]; then PIP+=(--no-index --find-links .whl); fi

if ! "$PY" -c "import torch" 2>/dev/null; then
  "${PIP[@]}" "torch==2.13.0"
fi
need=()
for mod in yaml:pyyaml numpy:numpy pytest:pytest scikit_build_core:scikit-build-core pybind11:pybind11; do
  "$PY" -c "import ${mod%%:*}" 2>/dev/null || need+=("${mod##*:}")
done
if command -v nvcc >/dev/null && [ "${DUALOPS_CUDA:-auto}" != off ]; then
  "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('cutlass_library') is None)" 2>/dev/null \
    || "${PIP[@]}" --no-deps nvidia-cutlass
fi
if [ ${#need[@]} -gt 0 ]; then "${PIP[@]}" "${need[@]}"; fi

# Parallel compile jobs: the machine's cores (CMake's default would be 1 with make).
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"${PIP[@]}" --no-build-isolation --no-deps ${DUALOPS_EDITABLE:+-e} .
"$PY" -c "import dualops, dualops.native as n; print('dualops', dualops.__version__, '-', n.load()[1])"

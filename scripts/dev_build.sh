#!/usr/bin/env bash
# Development build of dualops._C inside this checkout (no pip install): build/dev-<flavour>/,
# which dualops.native finds when the package runs from python/ (tests/conftest.py does that).
#   DUALOPS_CUDA=off|on (default off here: the simulator alone builds fast)
#   DUALOPS_CUDA_OPS="all" | "mla_decode grouped_gemm" (with DUALOPS_CUDA=on: only these ops' kernels)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
cuda=${DUALOPS_CUDA:-off}
ops=${DUALOPS_CUDA_OPS:-all}
flavour=sim
[ "$cuda" = off ] || flavour="cuda-${ops// /-}"
dir=build/dev-$flavour
mkdir -p build
cmake -S . -B "$dir" -G "${CMAKE_GENERATOR:-Unix Makefiles}" -DCMAKE_BUILD_TYPE=Release \
  -DDUALOPS_CUDA="$cuda" -DDUALOPS_CUDA_OPS="$ops" -DPython_EXECUTABLE="$(command -v "$PY")" \
  -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" > "$dir.cmake.log" 2>&1 || { cat "$dir.cmake.log"; exit 1; }
cmake --build "$dir" -j "${JOBS:-2}" 2>&1 | grep -E "error|warning: |Error" || true
test -n "$(ls "$dir"/_C*.so 2>/dev/null)" || { echo "build failed (see above; rerun: cmake --build $dir)"; exit 1; }
# Newest build wins in dualops.native's lookup: touch ours.
touch "$dir"/_C*.so
echo "built $(ls "$dir"/_C*.so)"

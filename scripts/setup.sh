#!/usr/bin/env bash
# Installs everything dualops needs on a fresh machine and builds the package (dualops._C).
# Prints only what it installed, what it built and where the reports go; pip's and CMake's own
# output goes to build/setup.log (shown when a step fails).
# - torch: keeps an installed torch (CUDA or CPU build, or one with torch_npu); otherwise installs
#   the CPU build torch==2.13.0 (never lets pip pull a CUDA build by accident).
# - The main job's dependencies (matplotlib for its plots) and the build / test tools.
# - CUDA kernels are compiled when nvcc is present (DUALOPS_CUDA=auto|on|off), with the
#   CUTLASS/CuTe headers of the nvidia-cutlass wheel, unpacked (headers only) into
#   build/deps/cutlass: installing that wheel would make pip report dependencies it never needs.
# - Ascend NPU kernels when CANN is there (ASCEND_HOME_PATH); the simulator always.
# - Offline machines (the GPU box): put wheels in .whl/ and set DUALOPS_OFFLINE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p build
LOG=$PWD/build/setup.log
: > "$LOG"
PIP=("$PY" -m pip install -q --disable-pip-version-check --no-warn-script-location)
PIPSRC=()
if [ "${DUALOPS_OFFLINE:-0}" = 1 ]; then PIPSRC=(--no-index --find-links .whl); fi
cuda_mode=${DUALOPS_CUDA:-auto}
case "$cuda_mode" in auto|on|off) ;; *)
  echo "setup: DUALOPS_CUDA=$cuda_mode is not allowed: auto, on or off (unset it for auto)"; exit 2 ;;
esac

say() { printf '  %s\n' "$*"; }
# run LABEL CMD...: the command's output into the log; on failure its tail and the log's path.
run() {
  local label=$1; shift
  echo "== $label" >> "$LOG"
  if ! "$@" >> "$LOG" 2>&1; then
    echo "setup: $label failed; the last lines of $LOG:"
    tail -25 "$LOG" | cut -c1-300 | sed 's/^/    /'
    exit 1
  fi
}
have() { "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$1') is None)" 2>/dev/null; }

echo "dualops set-up ($("$PY" -c 'import sys; print("Python", sys.version.split()[0])'))"
installed=()
if ! have torch; then
  run "install torch" "${PIP[@]}" "${PIPSRC[@]}" "torch==2.13.0"
  installed+=("torch==2.13.0 (CPU build)")
fi
need=()
for mod in yaml:pyyaml numpy:numpy pytest:pytest scikit_build_core:scikit-build-core pybind11:pybind11 \
           matplotlib:matplotlib; do
  have "${mod%%:*}" || need+=("${mod##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  run "install ${need[*]}" "${PIP[@]}" "${PIPSRC[@]}" "${need[@]}"
  installed+=("${need[@]}")
fi

# CUDA: nvcc and the CUTLASS/CuTe headers (unpacked from the nvidia-cutlass wheel, no install).
cuda_note=""
export DUALOPS_CUDA=$cuda_mode
if [ "$cuda_mode" != off ] && command -v nvcc > /dev/null; then
  if ! have cutlass_library; then
    deps=$PWD/build/deps
    if [ ! -f "$deps/cutlass/cutlass_library/source/include/cute/tensor.hpp" ]; then
      rm -rf "$deps/wheel" && mkdir -p "$deps/wheel"
      run "download the nvidia-cutlass wheel (headers)" "$PY" -m pip download -q --disable-pip-version-check \
        --no-deps --only-binary=:all: -d "$deps/wheel" "${PIPSRC[@]}" nvidia-cutlass
      run "unpack the CUTLASS/CuTe headers" "$PY" - "$deps" <<'EOF'
import glob, os, sys, zipfile
deps = sys.argv[1]
whl = glob.glob(os.path.join(deps, "wheel", "nvidia_cutlass-*.whl"))[0]
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            z.extract(name, os.path.join(deps, "cutlass"))
EOF
      rm -rf "$deps/wheel"
      installed+=("CUTLASS/CuTe headers (build/deps/cutlass)")
    fi
    # cutlass_library as a namespace package on the build's path: CMake finds source/include there.
    export PYTHONPATH=$deps/cutlass${PYTHONPATH:+:$PYTHONPATH}
  fi
elif [ "$cuda_mode" = on ]; then
  echo "setup: DUALOPS_CUDA=on but nvcc is not on PATH: install the CUDA toolkit (12.8 or newer) and put its bin/ on PATH"
  exit 1
elif [ "$cuda_mode" = auto ]; then
  cuda_note="no nvcc on PATH (to build them: install the CUDA toolkit 12.8+, put nvcc on PATH, rerun bash scripts/setup.sh)"
else
  cuda_note="DUALOPS_CUDA=off (unset it to build them where nvcc is)"
fi

if [ ${#installed[@]} -gt 0 ]; then say "installed: ${installed[*]}"; else say "installed: nothing new (all present)"; fi
say "torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"

# Parallel compile jobs: the machine's cores (CMake's default would be 1 with make).
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
start=$(date +%s)
run "build and install dualops" "${PIP[@]}" --no-build-isolation --no-deps ${DUALOPS_EDITABLE:+-e} .
built=$(cd /tmp && "$PY" -c "
import dualops.native as n
m, why = n.load()
b = getattr(m, 'built', {}) if m else {}
print('yes' if b.get('ascend_sim') else 'no', 'yes' if b.get('cuda') else 'no', 'yes' if b.get('cann') else 'no', __import__('dualops').__version__)
" 2>> "$LOG") || { echo "setup: dualops was installed but does not import; see $LOG"; exit 1; }
read -r sim cuda cann version <<< "$built"
say "built dualops $version in $(( $(date +%s) - start )) s:"
say "  Ascend C kernels on the CPU simulator: $sim"
if [ "$cuda" = yes ]; then
  say "  CUDA kernels (sm_90a): yes (ops: ${DUALOPS_CUDA_OPS:-all})"
else
  say "  CUDA kernels: no - ${cuda_note:-see $LOG}"
fi
if [ "$cann" = yes ]; then
  soc=$(cd /tmp && "$PY" -c "import dualops.native as n; print(n.load()[0].built.get('npu_soc', '?'))" 2>> "$LOG")
  say "  Ascend NPU kernels (CANN): built for ${soc:-?} by CANN's ascendc_library; not yet run on NPU hardware (bash scripts/npu_job.sh on an Atlas A2 runs them: docs/npu.md)"
else
  say "  Ascend NPU kernels: no - CANN not found (on an Ascend host: source <CANN>/set_env.sh so that ASCEND_HOME_PATH is set, then rerun)"
fi
have matplotlib || say "plots: off - matplotlib did not install (python3 -m pip install matplotlib)"
say "reports: python3 -m dualops writes reports/ (open reports/index.html); pip and build output: $LOG"

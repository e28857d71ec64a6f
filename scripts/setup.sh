#!/usr/bin/env bash
# Installs everything dualops needs on a fresh machine and builds the package (dualops._C).
# Prints only what it installed, what it built and where the reports go; pip's and CMake's own
# output goes to build/setup.log (shown when a step fails).
# - torch: keeps an installed torch (CUDA or CPU build, or one with torch_npu); otherwise installs
#   the CPU build torch==2.13.0 (never lets pip pull a CUDA build by accident).
# - The main job's dependencies (matplotlib for its plots) and the build / test tools.
# - CUDA kernels (DUALOPS_CUDA=auto|on|off): auto compiles them when nvcc is present AND an
#   NVIDIA GPU is visible (`nvidia-smi -L` lists one, or /dev/nvidia0 exists), i.e. when they can
#   run here; on compiles them wherever nvcc is (CI does, to prove the build); off never. They use
#   the CUTLASS/CuTe headers of the nvidia-cutlass wheel, unpacked (headers only) into
#   build/deps/cutlass: installing that wheel would make pip report dependencies it never needs.
# - Every step that can take long says what it does and how long it usually takes, and a long
#   build prints a line each minute while it runs.
# - Ascend NPU kernels when CANN is there (ASCEND_HOME_PATH); the simulator always.
# - Offline machines (the GPU box): put wheels in .whl/ and set DUALOPS_OFFLINE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=$PWD/build/setup.log
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
# run_long LABEL ESTIMATE CMD...: like run, saying first what it does and how long it usually
# takes, then a line each minute while it runs.
run_long() {
  local label=$1 estimate=$2; shift 2
  say "$label ($estimate) ..."
  local t0=$SECONDS
  run "$label" "$@" &
  local pid=$! next=60
  while kill -0 "$pid" 2> /dev/null; do
    sleep 2
    if (( SECONDS - t0 >= next )) && kill -0 "$pid" 2> /dev/null; then
      say "  ... still $label: $(( (SECONDS - t0) / 60 )) min so far"
      next=$(( next + 60 ))
    fi
  done
  wait "$pid" || exit 1
  say "  done in $(( SECONDS - t0 )) s"
}
# gpu_visible: an NVIDIA GPU this machine's user can run kernels on (the driver lists one, or its
# device node exists). A machine with nvcc but no GPU (a CPU build box) builds no CUDA kernels by
# default: they could not run here.
gpu_visible() {
  if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then return 0; fi
  [ -e /dev/nvidia0 ]
}
# cuda_files: how many CUDA translation units the build compiles (DUALOPS_CUDA_OPS picks ops).
cuda_files() {
  local ops=${DUALOPS_CUDA_OPS:-all} n=0 d
  for d in backends/cuda/*/; do
    d=${d%/}; d=${d##*/}
    if [ "$ops" != all ] && [[ " ${ops//;/ } " != *" $d "* ]]; then continue; fi
    n=$(( n + $(find "backends/cuda/$d" -name '*.cu' | wc -l) ))
  done
  echo "$n"
}
# cuda_minutes: the usual time of the CUDA build here. About 32 s of one core per CUDA file
# (CUTLASS templates; 30 files took 502 s on a quiet 2-core machine, 34 s of it the C++ part).
cuda_minutes() {
  local cores=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} m
  m=$(( ($(cuda_files) * 32 + cores * 30 + 30) / (cores * 60) ))
  echo "about $(( m > 0 ? m : 1 )) min on $cores idle cores"
}
# decide_cuda MODE: "yes" or "no: why" for building the CUDA kernels.
decide_cuda() {
  case "$1" in
    off) echo "no: DUALOPS_CUDA=off (unset it, or DUALOPS_CUDA=on, to build them)" ;;
    on)  if command -v nvcc > /dev/null; then echo yes; else echo "error"; fi ;;
    auto)
      if ! command -v nvcc > /dev/null; then
        echo "no: no nvcc on PATH (to build them: install the CUDA toolkit 12.8+, put nvcc on PATH, rerun bash scripts/setup.sh)"
      elif ! gpu_visible; then
        echo "no: nvcc is here but no NVIDIA GPU is visible (nvidia-smi -L lists none, no /dev/nvidia0), so they could not run; DUALOPS_CUDA=on compiles them anyway ($(cuda_minutes))"
      else
        echo yes
      fi ;;
  esac
}
if [ "${1:-}" = --cuda-decision ]; then  # what auto/on/off decides here, without building
  decide_cuda "$cuda_mode"; exit 0
fi
mkdir -p build
: > "$LOG"
have() { "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$1') is None)" 2>/dev/null; }

echo "dualops set-up ($("$PY" -c 'import sys; print("Python", sys.version.split()[0])'))"
installed=()
if ! have torch; then
  run_long "installing torch==2.13.0, CPU build" "a 200 MB download, 1-3 min" "${PIP[@]}" "${PIPSRC[@]}" "torch==2.13.0"
  installed+=("torch==2.13.0 (CPU build)")
fi
need=()
for mod in yaml:pyyaml numpy:numpy pytest:pytest scikit_build_core:scikit-build-core pybind11:pybind11 \
           matplotlib:matplotlib; do
  have "${mod%%:*}" || need+=("${mod##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  run_long "installing ${need[*]}" "under a minute" "${PIP[@]}" "${PIPSRC[@]}" "${need[@]}"
  installed+=("${need[@]}")
fi

# CUDA: nvcc and the CUTLASS/CuTe headers (unpacked from the nvidia-cutlass wheel, no install).
cuda_decision=$(decide_cuda "$cuda_mode")
if [ "$cuda_decision" = error ]; then
  echo "setup: DUALOPS_CUDA=on but nvcc is not on PATH: install the CUDA toolkit (12.8 or newer) and put its bin/ on PATH"
  exit 1
fi
cuda_note=${cuda_decision#no: }
# CMake gets the decision itself (on / off), not auto: it would build wherever nvcc is.
if [ "$cuda_decision" = yes ]; then export DUALOPS_CUDA=on; else export DUALOPS_CUDA=off; fi
if [ "$cuda_decision" = yes ]; then
  if ! have cutlass_library; then
    deps=$PWD/build/deps
    if [ ! -f "$deps/cutlass/cutlass_library/source/include/cute/tensor.hpp" ]; then
      rm -rf "$deps/wheel" && mkdir -p "$deps/wheel"
      run_long "downloading the nvidia-cutlass wheel for the CUTLASS/CuTe headers" "under a minute" "$PY" -m pip download -q --disable-pip-version-check \
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
fi

if [ ${#installed[@]} -gt 0 ]; then say "installed: ${installed[*]}"; else say "installed: nothing new (all present)"; fi
say "torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"

# Parallel compile jobs: the machine's cores (CMake's default would be 1 with make).
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
start=$(date +%s)
cores=$CMAKE_BUILD_PARALLEL_LEVEL
if [ "$cuda_decision" = yes ]; then
  ncu=$(cuda_files)
  what="compiling the C++ module and $ncu CUDA files for sm_90a"
  how=$(cuda_minutes)
else
  say "CUDA kernels: not compiled - $cuda_note"
  what="compiling the C++ module and the Ascend C kernels for the CPU simulator (no CUDA)"
  how="about $(( 60 / cores + 5 )) s on $cores idle cores"
fi
run_long "building dualops: $what" "$how" "${PIP[@]}" --no-build-isolation --no-deps ${DUALOPS_EDITABLE:+-e} .
built=$(cd /tmp && "$PY" -c "
import dualops.native as n
m, why = n.load()
b = getattr(m, 'built', {}) if m else {}
print('yes' if b.get('ascend_sim') else 'no', 'yes' if b.get('cuda') else 'no', 'yes' if b.get('cann') else 'no', __import__('dualops').__version__)
" 2>> "$LOG") || { echo "setup: dualops was installed but does not import; see $LOG"; exit 1; }
read -r sim cuda cann version <<< "$built"
say "built dualops $version in $(( $(date +%s) - start )) s:"
say "  Ascend C kernels on the CPU simulator: $sim"
if [ "$cuda" = yes ] && gpu_visible; then
  say "  CUDA kernels (sm_90a): yes (ops: ${DUALOPS_CUDA_OPS:-all})"
elif [ "$cuda" = yes ]; then
  say "  CUDA kernels (sm_90a): built (ops: ${DUALOPS_CUDA_OPS:-all}), but they cannot run here: no NVIDIA GPU is visible (the CUDA tests skip)"
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

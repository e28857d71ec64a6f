#!/usr/bin/env bash
# One job for an Atlas A2 / A3 host (Ascend 910B / 910_93xx) with CANN: from a fresh clone to the
# Ascend C kernels built by CANN, the NPU tests, parity against the reference and against a GPU
# machine's saved case set, and the benchmark with torch_npu's kernels as peers (docs/npu.md).
#
#   scripts/npu_job.sh [build] [test] [suite] [parity] [bench]   (default: build test parity bench)
#   build:  torch + torch_npu (TORCH_NPU_VERSION, default 2.8.0) unless torch_npu imports, the SoC
#           from torch_npu (DUALOPS_SOC overrides), scripts/setup.sh (builds with CANN), dualops.backends()
#   test:   tests/test_npu_device.py, test_npu_backend.py, test_cann_headers.py (installed CANN)
#   suite:  the whole test suite
#   parity: parity --full on the npu backend; with PARITY_DIR (saved on a GPU machine by
#           `python -m dualops parity --save DIR`): parity --against PARITY_DIR
#   bench:  python -m dualops bench --backend npu (peers: torch_npu's IFA, FIA, MLA and grouped matmul)
#
# Logs and reports go to $NPU_OUT (default ./npu_out). Extra pytest arguments: $PYTEST_ARGS.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${NPU_OUT:-$PWD/npu_out}
mkdir -p "$OUT"
STAGES=${*:-build test parity bench}
has() { [[ " $STAGES " == *" $1 "* ]]; }
PY=${PYTHON:-python3}
status=0

if [ -z "${ASCEND_HOME_PATH:-}" ]; then
  for f in /usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/cann/set_env.sh; do
    # shellcheck disable=SC1090
    [ -f "$f" ] && { source "$f"; break; }
  done
fi
if [ -z "${ASCEND_HOME_PATH:-}" ] || [ ! -d "$ASCEND_HOME_PATH" ]; then
  echo "npu_job: CANN not found: source <CANN>/set_env.sh (it sets ASCEND_HOME_PATH), then rerun"
  exit 2
fi

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  npu-smi info 2>&1 | head -20
  echo "ASCEND_HOME_PATH=$ASCEND_HOME_PATH"
  cat "$ASCEND_HOME_PATH"/ascend_toolkit_install.info 2>/dev/null | grep -i version
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if has build; then
  echo "== build"
  if ! "$PY" -c "import torch_npu" 2> /dev/null; then
    v=${TORCH_NPU_VERSION:-2.8.0}
    echo "installing torch==$v and torch_npu==$v"
    "$PY" -m pip install -q "torch==$v" "torch_npu==$v" > "$OUT/pip.log" 2>&1 \
      || { tail -20 "$OUT/pip.log"; exit 1; }
  fi
  soc=${DUALOPS_SOC:-$("$PY" -c "import torch, torch_npu; print(torch.npu.get_device_name(0).lower())" 2>> "$OUT/env.txt")}
  [ -n "$soc" ] || { echo "npu_job: could not read the SoC from torch_npu; set DUALOPS_SOC (npu-smi info: Name)"; exit 1; }
  echo "building the NPU kernels for $soc"
  DUALOPS_SOC=$soc bash scripts/setup.sh 2>&1 | tee "$OUT/setup.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
  "$PY" -c "import dualops, json; print(json.dumps(dualops.backends(), indent=1))" | tee "$OUT/backends.json"
fi

run() {  # run NAME CMD...: log to $OUT/NAME.log, remember a failure
  echo "== $1"
  local name=$1; shift
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -15 "$OUT/$name.log"
  echo "$name rc=$rc"
  [ $rc -eq 0 ] || status=1
}

# shellcheck disable=SC2086
has test && run test "$PY" -m pytest -q -ra tests/test_npu_device.py tests/test_npu_backend.py \
  tests/test_cann_headers.py ${PYTEST_ARGS:-}
# shellcheck disable=SC2086
has suite && run suite "$PY" -m pytest -q -ra tests ${PYTEST_ARGS:-}
if has parity; then
  run parity "$PY" -m dualops parity --full --backend npu --out "$OUT/reports"
  if [ -n "${PARITY_DIR:-}" ]; then
    run parity_against "$PY" -m dualops parity --against "$PARITY_DIR" --backend npu --out "$OUT/reports"
  else
    echo "== parity --against: skipped (set PARITY_DIR to a case set saved on a GPU machine)"
  fi
fi
has bench && run bench "$PY" -m dualops bench --backend npu --out "$OUT/reports"
echo "npu_job: done, status $status (logs and reports in $OUT)"
exit $status

#!/usr/bin/env bash
# One job for the GPU machine: install carried wheels, build dualops (CUDA on), run the CUDA
# tests, the IFA benchmark sweep and the compute-sanitizer memcheck + racecheck passes.
#
#   scripts/gpu_job.sh [build] [test] [suite] [parity] [bench] [quickbench] [sanitize] [step] [flashmla] [host]
#   test: every test file with CUDA cases (TEST_FILES, TEST_TIMEOUT); suite: the whole test suite (CUDA, simulator, everything);
#   parity: `python -m dualops parity --full` on every backend here, cuda vs ascend_sim pairs
#   included; bench / quickbench: the IFA benchmark sweep; sanitize: compute-sanitizer over a
#   selection of the CUDA tests (SANITIZE_TOOLS="memcheck racecheck" by default); step: the decode
#   step example in every mode and against the reference; flashmla: FlashMLA's own decode tests
#   through dualops.compat.flash_mla (FLASHMLA_ARGS: e.g. --time-limit / --first); host: host time
#   of eager calls (benchmarks/cuda/host_overhead.py; HOST_BASELINE=DIR, the python/ folder of
#   another copy of the package, alternates that copy and this one)
#   (default: build test bench sanitize)
#
# Logs and JSON go to $OUT (default ./gpu_out). Extra pytest arguments: $PYTEST_ARGS.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
STAGES=${*:-build test bench sanitize}
has() { [[ " $STAGES " == *" $1 "* ]]; }
PY=${PYTHON:-python3}
status=0

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
  $PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name())"
  nvcc --version | tail -1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

if has build; then
  echo "== build"
  start=$(date +%s)
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) DUALOPS_CUDA=on timeout 480 \
    $PY -m pip install --no-build-isolation --no-deps -v . > "$OUT/build.log" 2>&1
  rc=$?
  echo "build rc=$rc in $(( $(date +%s) - start )) s"
  if [ $rc -ne 0 ]; then tail -60 "$OUT/build.log"; exit $rc; fi
  grep -E "registers|spill" "$OUT/build.log" | grep -v " 0 bytes spill" | tail -5
fi

# The tests may import dualops from the source tree (python/) or from site-packages: put the
# built extension in both places.
so=$(cd /tmp && $PY -c "import dualops._C as c; print(c.__file__)" 2>/dev/null) && cp -f "$so" python/dualops/ 2>/dev/null
$PY -c "import dualops.backends.cuda as c; print('cuda backend:', c.status())"

if has test; then
  echo "== tests"
  # every test file with CUDA cases (TEST_FILES: a subset, to split the ~3300 tests over calls)
  files=${TEST_FILES:-tests/*/test_cuda*.py tests/test_custom_ops.py tests/test_decode_step.py tests/test_compat*.py tests/grouped_gemm/test_compat_hpc.py}
  timeout ${TEST_TIMEOUT:-600} $PY -m pytest $files -q -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/tests.log" | tail -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if has suite; then
  echo "== whole suite"
  timeout ${SUITE_TIMEOUT:-600} $PY -m pytest tests -q -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/suite.log" | tail -15
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if has parity; then
  echo "== parity (every backend, cross-backend pairs)"
  timeout 600 $PY -m dualops parity --full --out "$OUT/parity" 2>&1 | tee "$OUT/parity.log" | tail -25
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if has bench || has quickbench; then
  echo "== bench"
  flag=""
  has quickbench && flag="--quick"
  timeout 540 $PY -m dualops.bench.incre_flash_attention $flag --json "$OUT/bench_ifa.json" 2>&1 | tee "$OUT/bench.log" | tail -70
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if has sanitize; then
  # sanitize TOOL LOG SELECTION [TEST FILE ...]: the CUDA tests SELECTION picks (in the IFA CUDA
  # test files unless others are named) under compute-sanitizer
  # SANITIZE_PARALLEL=1: every selection in a process of its own, all at once (the GPU has room for
  # them; each is CPU-bound under the tool), summed up at the end.
  rm -f "$OUT"/*.rc
  sanitize() {
    local tool=$1 log=$2 sel=$3; shift 3
    local files=("$@"); [ ${#files[@]} -gt 0 ] || files=(tests/incre_flash_attention/test_cuda*.py)
    run() {
      timeout ${SANITIZE_TIMEOUT:-420} compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 \
        $PY -m pytest "${files[@]}" -q -p no:cacheprovider -k "$sel"
    }
    if [ -n "${SANITIZE_PARALLEL:-}" ]; then
      ( run > "$OUT/$log.log" 2>&1; echo $? > "$OUT/$log.rc" ) &
    else
      run 2>&1 | tee "$OUT/$log.log" | tail -12
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    fi
  }
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    echo "== compute-sanitizer $tool"
    sanitize $tool $tool "(launch_default or not launch_) and (smoke or (first_fill_prefetch and page16) or (8bit_query_rows and 256) or (whole_groups and int8) or one_chunk_units or (biased_q and int8 and 128))"
    # the lockstep pipeline (on by default only on the H100, for long units) forced on everywhere,
    # in its burst order on contiguous caches
    echo "== compute-sanitizer $tool, lockstep pipeline forced"
    # (tests/helpers/ifa_cuda_cases.py FORCED_LAUNCHES: the launch_<name> test ids)
    sanitize $tool ${tool}_lockstep "launch_lockstep16_burst and (smoke or (first_fill_prefetch and page16) or (whole_groups and (same or int8)) or (8bit_query_rows and 256))"
    # the 8-bit narrow kernel with the first-fill prefetch (on by default only on the H100, for
    # grids of many short units) on every call
    echo "== compute-sanitizer $tool, narrow CTAs with the prefetch forced"
    sanitize $tool ${tool}_narrow_pf "launch_narrow_pf and (smoke or (whole_groups and int8) or (8bit_query_rows and 256))"
    # and the wide one (on by default only on the H100, for single-wave grids of units below the
    # lockstep kernel's)
    echo "== compute-sanitizer $tool, wide CTAs with the prefetch forced"
    sanitize $tool ${tool}_wide_pf "launch_wide_pf and (smoke or (whole_groups and int8) or (8bit_query_rows and 256) or (biased_q and int8 and 128))"
    # grouped GEMM: the own kernel (every tile M, masked, ragged, padded K) and every CUTLASS
    # kernel (tail rows, masked, clamped bad offsets, graph capture), dualops.compat.hpc
    echo "== compute-sanitizer $tool, grouped GEMM"
    if [ $tool = memcheck ]; then
      sanitize $tool ${tool}_gg "tail_rows or masked or clamps or graph or (test_sm90_contiguous and 130 and 200) or (test_contiguous and 130) or every_tile_m or odd_k or hpc" \
        tests/grouped_gemm/test_cuda.py tests/grouped_gemm/test_compat_hpc.py
    else
      sanitize $tool ${tool}_gg "test_sm90_tail_rows_and_masked or (test_contiguous and 130 and 200) or (every_tile_m and 16) or (test_masked and bf16)" \
        tests/grouped_gemm/test_cuda.py
    fi
  done
  # MLA decode, memcheck: every kernel on bf16 / fp8_model1 decode, causal MTP, hidden non-finite
  # keys and the in-kernel split merge through graph replays, the device planner, sparse decode
  # (both kernels, every format, the extra pool, split lists, graph replays); racecheck: every
  # kernel (wgmma_t, wgmma and wgmma_seesaw) on decode, causal MTP, hidden non-finite
  # keys and many short requests, sparse decode and the device planner, and the tool's barrier
  # model (benchmarks/cuda/racecheck_barriers.cu)
  if [[ " ${SANITIZE_TOOLS:-memcheck racecheck} " == *" memcheck "* ]]; then
    echo "== compute-sanitizer memcheck, MLA decode"
    sanitize memcheck memcheck_mla "in_kernel_merge or ((test_parity_decode and (16-bf16-576-bfloat16 or 5-fp8_model1-512-float16)) or (test_parity_causal_mtp and 64-4-64-bf16) or causal_hidden_nonfinite)" \
      tests/mla_decode/test_cuda.py
    echo "== compute-sanitizer memcheck, MLA sparse decode and the device planner"
    sanitize memcheck memcheck_mla_sparse "(test_parity_sparse and (16-2 or 128-2) and not fp16) or (extra_pool and 100) or long_lists or graph_replays or device_planner" \
      tests/mla_decode/test_cuda_sparse.py tests/mla_decode/test_cuda.py
  fi
  if [[ " ${SANITIZE_TOOLS:-memcheck racecheck} " == *" racecheck "* ]]; then
    echo "== compute-sanitizer racecheck, MLA decode (wgmma_t)"
    sanitize racecheck racecheck_mla "in_kernel_merge or ((many_short_requests_few_rows or (test_parity_decode and (16-bf16-576-bfloat16 or 5-fp8_model1-512-float16)) or (test_parity_causal_mtp and (16-4-5-bf16 or 64-2-16-fp8_v32)) or causal_hidden_nonfinite) and wgmma_t)" \
      tests/mla_decode/test_cuda.py
    echo "== compute-sanitizer racecheck, MLA decode (wgmma, wgmma_seesaw)"
    sanitize racecheck racecheck_mla_wg "((test_parity_decode and (-16-bf16-576-bfloat16 or -128-bf16-576-bfloat16 or -5-fp8_model1-512-float16 or -128-fp8_v32-576-bfloat16 or -64-bf16-576-float16)) or (test_parity_causal_mtp and (64-2-128-bf16 or 16-4-64-bf16 or 64-2-128-fp8_v32)) or (test_parity_wgmma_16bit_pages and 512-64) or causal_hidden_nonfinite or many_short_requests_few_rows or inf_key_like) and (wgmma- or wgmma_seesaw or wgmma])" \
      tests/mla_decode/test_cuda.py
    echo "== compute-sanitizer racecheck, MLA sparse decode and the device planner"
    sanitize racecheck racecheck_mla_sparse "(test_parity_sparse and (16-2 or 128-2) and (bf16-576 or wgmma_t)) or (extra_pool and 100 and (bf16-576 or wgmma_t)) or device_planner" \
      tests/mla_decode/test_cuda_sparse.py tests/mla_decode/test_cuda.py
    echo "== compute-sanitizer racecheck, its barrier model"
    OUT="$OUT" bash benchmarks/cuda/run_racecheck_barriers.sh || status=1
  fi
  if [ -n "${SANITIZE_PARALLEL:-}" ]; then
    wait
    for rc in $(compgen -G "$OUT/*.rc"); do
      echo "-- $(basename "$rc" .rc): exit $(cat "$rc"), $(grep -E "passed|failed|error" "${rc%.rc}.log" | tail -1)"
      [ "$(cat "$rc")" -eq 0 ] || { status=1; tail -25 "${rc%.rc}.log"; }
    done
  fi
fi
if has step; then
  echo "== decode step (examples/decode_step.py): every mode, then cuda against reference"
  for args in "--mode all --profile" "--mode all --model mla --kv-format fp8_v32 --moe-dtype fp8" \
              "--check-backends reference,cuda --size small"; do
    timeout 300 $PY examples/decode_step.py $args 2>&1 | tee -a "$OUT/step.log" | tail -30
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi

if has flashmla; then
  # FlashMLA's own decode tests through dualops.compat.flash_mla (docs/compat.md); needs the
  # folder `scripts/flashmla_tests.sh prepare` makes (.flashmla_src), carried with the checkout
  echo "== FlashMLA's dense and sparse decode tests through the shim"
  timeout 900 $PY scripts/flashmla_tests.py --src "${FLASHMLA_SRC:-.flashmla_src}" ${FLASHMLA_ARGS:-} 2>&1 \
    | tee "$OUT/flashmla.log" | grep -E "passed|FAILED" | tail -20
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if has host; then
  echo "== host overhead of eager calls"
  base=${HOST_BASELINE:-}
  for round in $(seq ${HOST_ROUNDS:-3}); do  # with a baseline, both alternately: the host's speed drifts between processes
    if [ -n "$base" ]; then
      # (a baseline without a build of its own takes this one's extension)
      compgen -G "$base/dualops/_C*.so" > /dev/null || cp -f python/dualops/_C*.so "$base/dualops/" 2>/dev/null
      echo "-- round $round, baseline ($base)"
      PYTHONPATH=$base${PYTHONPATH:+:$PYTHONPATH} timeout 300 \
        $PY benchmarks/cuda/host_overhead.py --json "$OUT/host_base_$round.json" 2>&1 | tee -a "$OUT/host_base.log"
      echo "-- round $round, this package"
    fi
    prof=""; [ $round -eq 1 ] && prof="--profile"
    PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} timeout 300 \
      $PY benchmarks/cuda/host_overhead.py $prof --json "$OUT/host_$round.json" 2>&1 | tee -a "$OUT/host.log"
    [ -n "$base" ] || break
  done
fi
exit $status

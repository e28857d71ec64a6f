#!/usr/bin/env bash
# One job for the GPU machine: install carried wheels, build dualops (CUDA on), run the CUDA
# tests, the IFA benchmark sweep and the compute-sanitizer memcheck + racecheck target.
#
#   scripts/gpu_job.sh [build] [test] [suite] [parity] [bench] [quickbench] [sanitize] [profile] [shapes] [layouts] [small] [splits] [durations] [ablate] [trace] [floor] [placement] [kvgap] [host]
#   suite: the whole test suite (CUDA, simulator, everything); parity: `python -m dualops parity
#   --full` on every backend here, cuda vs ascend_sim pairs included
#   small: latency of small calls (in-kernel split merge vs the combine kernel, split kernel with
#   and without PDL, other split counts, SDPA; SMALL_ONLY_AUTO=1: the default build only);
#   splits: split counts around the plan's; durations: Nsight Compute kernel durations;
#   ablate: the split kernel with parts of its per-chunk math compiled out (ABLATE_SET)
#   floor: the least time a split-KV call can take for the latency-bound rows' bytes (no math)
#   trace: where a call's time goes, phase by phase, in the split and combine kernels (DUALOPS_IFA_TRACE
#   build of the ablation driver; TRACE_SHAPES picks shapes); placement: the same calls on the
#   sweep's tensors, fresh clones and paged copies (benchmarks/cuda/ifa_placement.py); kvgap:
#   the same calls with K and V at several distances in one allocation (ifa_kv_gap.py); host:
#   host time of eager calls (host_overhead.py), and again with the package copy at
#   benchmarks/cuda/old_python/python when one was carried (an A/B of the Python glue)
#   shapes, small, durations, splits, layouts and profile run benchmarks/cuda/ifa_probes.py
#   (PROBE_QUICK=1: the first configuration of each list only)
#   (default: build test bench sanitize; SANITIZE_TOOLS="memcheck racecheck" by default)
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
  timeout 600 $PY -m pytest tests/*/test_cuda*.py -q -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/tests.log" | tail -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if has suite; then
  echo "== whole suite"
  timeout 600 $PY -m pytest tests -q -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/suite.log" | tail -15
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
  sanitize() {
    local tool=$1 log=$2 sel=$3; shift 3
    local files=("$@"); [ ${#files[@]} -gt 0 ] || files=(tests/incre_flash_attention/test_cuda*.py)
    timeout ${SANITIZE_TIMEOUT:-420} compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 \
      $PY -m pytest "${files[@]}" -q -p no:cacheprovider -k "$sel" 2>&1 | tee "$OUT/$log.log" | tail -12
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
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
  # kernel (wgmma_t, wgmma and wgmma_seesaw, mma.sync) on decode, causal MTP, hidden non-finite
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
    echo "== compute-sanitizer racecheck, MLA decode (mma.sync)"
    sanitize racecheck racecheck_mla_mma "(many_short_requests_few_rows or (test_parity_decode and (-16- or -5-)) or causal_hidden_nonfinite) and mma and not wgmma" \
      tests/mla_decode/test_cuda.py
    echo "== compute-sanitizer racecheck, MLA sparse decode and the device planner"
    sanitize racecheck racecheck_mla_sparse "(test_parity_sparse and (16-2 or 128-2) and (bf16-576 or wgmma_t)) or (extra_pool and 100 and (bf16-576 or wgmma_t)) or device_planner" \
      tests/mla_decode/test_cuda_sparse.py tests/mla_decode/test_cuda.py
    echo "== compute-sanitizer racecheck, its barrier model"
    OUT="$OUT" bash benchmarks/cuda/run_racecheck_barriers.sh || status=1
  fi
fi
if has ablate; then
  # The real split kernel with parts of its per-chunk math removed (benchmarks/cuda, BENCHMARKS.md
  # v9): ABLATE_SET picks the DUALOPS_IFA_ABLATE builds.
  echo "== ablate"
  OUT="$OUT" bash benchmarks/cuda/run_kernel_ablate.sh ${ABLATE_SET:-0 7 0} 2>&1 | grep -E "ablate=[0-9]+ " | sort -s -k1,3
fi

if has trace; then
  echo "== trace"
  ABLATE_SHAPES="${TRACE_SHAPES:-b1 s16,h8/1 b1 s1k,h8/1 b1 s8k,h8/1 b1 s128k,h32/8 b16 s1k}" OUT="$OUT" \
    bash benchmarks/cuda/run_kernel_ablate.sh 0+t 2>&1 | grep -v "^ptxas" | tee "$OUT/trace.txt" | tail -80
fi
if has floor; then
  # The least time a split-KV call can take for a row's bytes: read, partials, merge, no math
  # (benchmarks/cuda/ifa_read_floor.cu, BENCHMARKS.md item 43)
  echo "== read-and-merge floor"
  OUT="$OUT" bash benchmarks/cuda/run_read_floor.sh 2>&1 | grep -E "floor|=="
fi
if has host; then
  echo "== host overhead of eager calls"
  for round in 1 2 3; do  # old and new alternately: the host's speed drifts between processes
    if [ -d benchmarks/cuda/old_python/python/dualops ]; then
      cp -f python/dualops/_C*.so benchmarks/cuda/old_python/python/dualops/ 2>/dev/null
      echo "-- round $round, old package (benchmarks/cuda/old_python)"
      PYTHONPATH=$PWD/benchmarks/cuda/old_python/python${PYTHONPATH:+:$PYTHONPATH} timeout 300 \
        $PY benchmarks/cuda/host_overhead.py --json "$OUT/host_old_$round.json" 2>&1 | tee -a "$OUT/host_old.log"
      echo "-- round $round, this package"
    fi
    prof=""; [ $round -eq 1 ] && prof="--profile"
    PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} timeout 300 \
      $PY benchmarks/cuda/host_overhead.py $prof --json "$OUT/host_$round.json" 2>&1 | tee -a "$OUT/host.log"
    [ -d benchmarks/cuda/old_python/python/dualops ] || break
  done
fi

if has kvgap; then
  echo "== kvgap"
  timeout 400 $PY benchmarks/cuda/ifa_kv_gap.py 2>&1 | tee "$OUT/kvgap.log"
fi
if has placement; then
  echo "== placement"
  timeout 400 $PY benchmarks/cuda/ifa_placement.py 2>&1 | tee "$OUT/placement.log"
fi

if has shapes; then
  # CTA-shape experiment: the same calls under each CTA shape (tuning ifa_cta_shape),
  # plus the name of the kernel torch's SDPA runs.
  echo "== shapes"
  for sh in ${SHAPES:-auto narrow wide}; do
    PROBE_TUNE=$([ $sh = auto ] || echo "ifa_cta_shape=$sh") timeout 120 $PY benchmarks/cuda/ifa_probes.py shapes 2>&1 | grep -v Warning
  done | tee "$OUT/shapes.log"
fi

if has small; then
  # Small / latency-bound calls (BENCHMARKS.md log v6): the in-kernel split merge against the
  # combine kernel (tuning ifa_merge=kernel), the split kernel with and without programmatic
  # dependent launch (ifa_pdl=false), other split counts, and SDPA on the same data.
  echo "== small"
  {
    timeout 150 $PY benchmarks/cuda/ifa_probes.py small auto
    [ -n "${SMALL_ONLY_AUTO:-}" ] && exit 0
    PROBE_TUNE=ifa_merge=kernel timeout 100 $PY benchmarks/cuda/ifa_probes.py small combkern
    PROBE_TUNE=ifa_pdl=false timeout 100 $PY benchmarks/cuda/ifa_probes.py small nopdl
  } 2>&1 | grep -v Warning | tee "$OUT/small.log"
fi

if has durations; then
  # Kernel durations (Nsight Compute) of small calls, ours and SDPA's: how much of a call's time
  # is inside the kernels and how much between them.
  echo "== durations"
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size \
    $PY benchmarks/cuda/ifa_probes.py durations > "$OUT/durations.log" 2>&1
  grep -E "^  [a-zA-Z_].*\(|gpu__time_duration|grid_size" "$OUT/durations.log" | cut -c1-110 | tail -60
fi

if has splits; then
  # Split counts around the planner's choice on single-wave calls, per cache dtype
  # (SPLITS_KV="bf16 int8 fp8" by default; SPLITS_FROM=N skips the first N configurations):
  # "ns<N>=<us>", the plan's count first.
  echo "== splits"
  for kv in ${SPLITS_KV:-bf16 int8 fp8}; do
    timeout 200 $PY benchmarks/cuda/ifa_probes.py splits $kv 2>&1 | grep -v Warning
  done | tee "$OUT/splits.log"
fi

if has layouts; then
  # Does the placement of V relative to K change the bandwidth? (BENCHMARKS.md notes)
  echo "== layouts"
  timeout 200 $PY benchmarks/cuda/ifa_probes.py layouts 2>&1 | tee "$OUT/layouts.log"
fi

if has profile; then
  # Nsight Compute on a few configurations (stall reasons, bandwidth) and the SASS opcode mix of
  # the main kernels; all into profile.log.
  echo "== profile"
  {
    for cfg in "32 8 16 4096 bf16" "128 128 1 32768 int8" "32 8 128 1024 bf16"; do
      echo "### ncu $cfg"
      timeout 120 ncu --clock-control none -k regex:ifa_split_kernel --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section SchedulerStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__warps_launched.sum,smsp__inst_executed_pipe_lsu.sum,dram__bytes_read.sum" \
        $PY benchmarks/cuda/ifa_probes.py prof $cfg 2>&1 | grep -vE "^==PROF==|^\s*$|^\s+(OPT|WRN|INF)|^\s{10}" | head -90
    done
    echo "### SASS opcode mix"
    so=$(ls python/dualops/_C*.so | head -1)
    cuobjdump -sass "$so" > /tmp/all.sass 2>/dev/null
    $PY benchmarks/cuda/ifa_probes.py sassmix /tmp/all.sass
  } > "$OUT/profile.log" 2>&1
  tail -c 6000 "$OUT/profile.log"
fi
exit $status

#!/usr/bin/env bash
# One job for the GPU machine: install carried wheels, build dualops (CUDA on), run the CUDA
# tests, the IFA benchmark sweep and the compute-sanitizer memcheck + racecheck target.
#
#   scripts/gpu_job.sh [build] [test] [suite] [parity] [bench] [quickbench] [sanitize] [profile] [shapes] [layouts] [small] [splits] [durations] [ablate] [trace] [placement] [kvgap]
#   suite: the whole test suite (CUDA, simulator, everything); parity: `python -m dualops parity
#   --full` on every backend here, cuda vs ascend_sim pairs included
#   small: latency of small calls (in-kernel split merge vs the combine kernel, split kernel with
#   and without PDL, other split counts, SDPA; SMALL_ONLY_AUTO=1: the default build only);
#   splits: split counts around the plan's; durations: Nsight Compute kernel durations;
#   ablate: the split kernel with parts of its per-chunk math compiled out (ABLATE_SET)
#   trace: where a call's time goes, phase by phase, in the split kernel (DUALOPS_IFA_TRACE
#   build of the ablation driver; TRACE_SHAPES picks shapes); placement: the same calls on the
#   sweep's tensors, fresh clones and paged copies (benchmarks/cuda/ifa_placement.py); kvgap:
#   the same calls with K and V at several distances in one allocation (ifa_kv_gap.py)
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
  timeout 600 $PY -m pytest tests/test_cuda_ifa.py -q -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/tests.log" | tail -40
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
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    echo "== compute-sanitizer $tool"
    timeout ${SANITIZE_TIMEOUT:-420} compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 \
      $PY -m pytest tests/test_cuda_ifa.py -q -p no:cacheprovider -k "smoke or (first_fill_prefetch and page16) or (8bit_query_rows and 256) or (whole_groups and int8)" 2>&1 | tee "$OUT/$tool.log" | tail -12
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
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
if has kvgap; then
  echo "== kvgap"
  timeout 400 $PY benchmarks/cuda/ifa_kv_gap.py 2>&1 | tee "$OUT/kvgap.log"
fi
if has placement; then
  echo "== placement"
  timeout 400 $PY benchmarks/cuda/ifa_placement.py 2>&1 | tee "$OUT/placement.log"
fi

if has shapes; then
  # CTA-shape experiment (BENCHMARKS.md notes): the same calls under each DUALOPS_IFA_CTA_SHAPE,
  # plus the name of the kernel torch's SDPA runs.
  echo "== shapes"
  cat > /tmp/ifa_shapes.py <<'PY'
import os, sys, torch, torch.nn.functional as F
from dualops.backends import cuda as cb
from dualops.bench.timing import time_cuda, rotation_count, l2_bytes
shape = os.environ.get("DUALOPS_IFA_CTA_SHAPE", "auto")
for hq, hkv, b, s in ((32, 8, 16, 32768), (128, 128, 1, 131072), (8, 1, 128, 32768), (32, 8, 1, 131072),
                      (32, 8, 16, 1024), (32, 8, 128, 1024), (8, 1, 1, 8192)):
    n = rotation_count(b * s * hkv * 512, l2_bytes())
    qs = [torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    ks = [torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    vs = [torch.randn_like(x) for x in ks]
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    plan = cb.make_ifa_plan(qs[0], ks[0], None)
    kw = dict(kv_lens=lens, block_table=None, softmax_scale=0.088, causal=False, atten_mask=None, pse_shift=None,
              k_scale=None, v_scale=None, k_offset=None, v_offset=None, plan=plan)
    t = time_cuda(lambda i: cb.incre_flash_attention(qs[i], ks[i], vs[i], **kw), n)
    gbs = b * s * hkv * 512 / (t.median_us * 1e-6) / 1e9
    print(f"shape={shape:6s} h{hq}/{hkv} b{b} s{s} splits={plan.num_splits}: {t.median_us:8.1f} us {gbs:6.0f} GB/s", flush=True)
    del qs, ks, vs
if shape == "auto":
    q = torch.randn(16, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(16, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True); torch.cuda.synchronize()
    print("SDPA kernels:", sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"}))
PY
  for sh in ${SHAPES:-auto narrow wide}; do
    if [ $sh = auto ]; then unset DUALOPS_IFA_CTA_SHAPE; else export DUALOPS_IFA_CTA_SHAPE=$sh; fi
    timeout 120 $PY /tmp/ifa_shapes.py 2>&1 | grep -v Warning
  done | tee "$OUT/shapes.log"
  unset DUALOPS_IFA_CTA_SHAPE
fi

if has small; then
  # Small / latency-bound calls (BENCHMARKS.md log v6): the in-kernel split merge against the
  # combine kernel (DUALOPS_IFA_MERGE=kernel), the split kernel with and without programmatic
  # dependent launch (DUALOPS_IFA_PDL=0), other split counts, and SDPA on the same data.
  echo "== small"
  cat > /tmp/ifa_small.py <<'PY'
import dataclasses, os, torch, torch.nn.functional as F
from dualops.backends import cuda as cb
from dualops.bench.timing import time_cuda, rotation_count, l2_bytes
mode = os.environ.get("IFA_MODE", "auto")
sdpa = mode == "auto"
cfgs = [(8, 1, 1, 16, ()), (8, 1, 1, 256, ()), (8, 1, 1, 1024, (1, 8, 16)), (8, 1, 1, 8192, (16, 64)),
        (8, 1, 1, 32768, (32, 64)), (8, 1, 1, 131072, (64,)),
        (32, 8, 1, 1024, (8, 16)), (32, 8, 1, 8192, (8, 32)), (8, 1, 16, 1024, (2, 8)), (32, 8, 16, 1024, (2,)),
        (32, 8, 128, 1024, ()), (128, 128, 1, 1024, (2,)), (8, 1, 128, 1024, ())]
for hq, hkv, b, s, alts in cfgs:
    n = rotation_count(b * s * hkv * 512, l2_bytes())
    qs = [torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    ks = [torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    vs = [torch.randn_like(x) for x in ks]
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    base = cb.make_ifa_plan(qs[0], ks[0], None)
    line = f"{mode:8s} h{hq}/{hkv} b{b} s{s}:"
    for ns in (base.num_splits,) + tuple(a for a in alts if a != base.num_splits):
        sl = 128 * -(-s // (128 * ns))
        plan = dataclasses.replace(base, num_splits=-(-s // sl), split_len=sl, num_units=b * hkv * -(-s // sl))
        kw = dict(kv_lens=lens, block_table=None, softmax_scale=0.088, causal=False, atten_mask=None,
                  pse_shift=None, k_scale=None, v_scale=None, k_offset=None, v_offset=None, plan=plan)
        t = time_cuda(lambda i: cb.incre_flash_attention(qs[i], ks[i], vs[i], **kw), n)
        line += f"  ns{plan.num_splits}={t.median_us:.1f}"
    if sdpa:
        t1 = time_cuda(lambda i: F.scaled_dot_product_attention(qs[i].transpose(1, 2), ks[i].transpose(1, 2),
                                                                vs[i].transpose(1, 2), enable_gqa=True), n)
        kc = [x.transpose(1, 2).contiguous() for x in ks]; vc = [x.transpose(1, 2).contiguous() for x in vs]
        qc = [x.transpose(1, 2).contiguous() for x in qs]
        t2 = time_cuda(lambda i: F.scaled_dot_product_attention(qc[i], kc[i], vc[i], enable_gqa=True), n)
        line += f"  SDPA={min(t1.median_us, t2.median_us):.1f}"
        del kc, vc, qc
    print(line, flush=True)
    del qs, ks, vs
PY
  {
    IFA_MODE=auto timeout 150 $PY /tmp/ifa_small.py
    [ -n "${SMALL_ONLY_AUTO:-}" ] && exit 0
    DUALOPS_IFA_MERGE=kernel IFA_MODE=combkern timeout 100 $PY /tmp/ifa_small.py
    DUALOPS_IFA_PDL=0 IFA_MODE=nopdl timeout 100 $PY /tmp/ifa_small.py
  } 2>&1 | grep -v Warning | tee "$OUT/small.log"
fi

if has durations; then
  # Kernel durations (Nsight Compute) of small calls, ours and SDPA's: how much of a call's time
  # is inside the kernels and how much between them.
  echo "== durations"
  cat > /tmp/ifa_dur.py <<'PY'
import torch, torch.nn.functional as F
from dualops.backends import cuda as cb
for hq, hkv, b, s in ((8, 1, 1, 1024), (8, 1, 1, 8192), (32, 8, 16, 1024)):
    q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k)
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    for _ in range(3):
        cb.incre_flash_attention(q, k, v, kv_lens=lens, block_table=None, softmax_scale=0.088, causal=False,
                                 atten_mask=None, pse_shift=None, k_scale=None, v_scale=None, k_offset=None, v_offset=None)
        F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True)
    torch.cuda.synchronize()
PY
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size \
    $PY /tmp/ifa_dur.py > "$OUT/durations.log" 2>&1
  grep -E "^  [a-zA-Z_].*\(|gpu__time_duration|grid_size" "$OUT/durations.log" | cut -c1-110 | tail -60
fi

if has splits; then
  # Split counts around the planner's choice on single-wave calls, per cache dtype
  # (SPLITS_KV="bf16 int8 fp8" by default): "ns<N>=<us>", the plan's count first.
  echo "== splits"
  cat > /tmp/ifa_splits.py <<'PY'
import dataclasses, sys, torch
from dualops import quant
from dualops.backends import cuda as cb
from dualops.bench.timing import time_cuda, rotation_count, l2_bytes
kv = sys.argv[1]
nbytes = 2 if kv == "bf16" else 1
for hq, hkv, b, s, alts in ((8, 1, 1, 131072, (64, 128)), (8, 1, 1, 32768, (64, 128)), (8, 1, 1, 8192, (16, 32, 64)),
                            (32, 8, 1, 32768, (16, 32)), (64, 8, 1, 32768, (16, 32)), (32, 8, 1, 8192, (8, 16, 32)),
                            (8, 1, 16, 8192, (8, 16)), (8, 1, 16, 32768, (8, 16))):
    n = rotation_count(b * s * hkv * 256 * nbytes, l2_bytes())
    qs = [torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    ks, vs, extra = [], [], dict(k_scale=None, v_scale=None, k_offset=None, v_offset=None)
    for _ in range(n):
        k = torch.randn(b, s, hkv, 128, device="cuda")
        v = torch.randn_like(k)
        if kv == "bf16":
            ks.append(k.bfloat16()); vs.append(v.bfloat16())
        elif kv == "int8":
            kq, kscale, koff = quant.quantize_kv_int8(k); vq, vscale, voff = quant.quantize_kv_int8(v)
            ks.append(kq); vs.append(vq); extra = dict(k_scale=kscale, v_scale=vscale, k_offset=koff, v_offset=voff)
        else:
            kq, kscale = quant.quantize_kv_fp8(k); vq, vscale = quant.quantize_kv_fp8(v)
            ks.append(kq); vs.append(vq); extra = dict(k_scale=kscale, v_scale=vscale, k_offset=None, v_offset=None)
        del k, v
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    base = cb.make_ifa_plan(qs[0], ks[0], None)
    line = f"{kv} h{hq}/{hkv} b{b} s{s}:"
    for ns in (base.num_splits,) + tuple(a for a in alts if a != base.num_splits):
        sl = 16 * -(-s // (16 * ns))
        plan = dataclasses.replace(base, num_splits=-(-s // sl), split_len=sl, num_units=b * hkv * -(-s // sl))
        kw = dict(kv_lens=lens, block_table=None, softmax_scale=0.088, causal=False, atten_mask=None,
                  pse_shift=None, plan=plan, **extra)
        t = time_cuda(lambda i: cb.incre_flash_attention(qs[i], ks[i], vs[i], **kw), n)
        line += f"  ns{plan.num_splits}={t.median_us:.1f}"
    print(line, flush=True)
    del qs, ks, vs
PY
  for kv in ${SPLITS_KV:-bf16 int8 fp8}; do
    timeout 200 $PY /tmp/ifa_splits.py $kv 2>&1 | grep -v Warning
  done | tee "$OUT/splits.log"
fi

if has layouts; then
  # Does the placement of V relative to K change the bandwidth? (BENCHMARKS.md notes)
  echo "== layouts"
  cat > /tmp/ifa_layouts.py <<'PY'
import torch
from dualops.backends import cuda as cb
from dualops.bench.timing import time_cuda
for hq, hkv, b, s in ((32, 8, 16, 32768), (128, 128, 1, 131072), (8, 1, 128, 32768)):
    shape = (b, s, hkv, 128)
    n = b * s * hkv * 128
    q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16)
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    def run(k, v, name):
        plan = cb.make_ifa_plan(q, k, None)
        kw = dict(kv_lens=lens, block_table=None, softmax_scale=0.088, causal=False, atten_mask=None,
                  pse_shift=None, k_scale=None, v_scale=None, k_offset=None, v_offset=None, plan=plan)
        t = time_cuda(lambda i: cb.incre_flash_attention(q, k, v, **kw), 1)
        print(f"h{hq}/{hkv} b{b} s{s} {name:22s} {t.median_us:8.1f} us {n * 4 / (t.median_us * 1e-6) / 1e9:6.0f} GB/s",
              flush=True)
    k = torch.randn(shape, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k)
    run(k, v, "separate")
    del k, v
    for pad in (4096 + 512, (1 << 20) + 37 * 256):
        buf = torch.randn(2 * n + pad // 2, device="cuda", dtype=torch.bfloat16)
        run(buf[:n].view(shape), buf[n + pad // 2:].view(shape), f"one buffer, V +{pad} B")
        del buf
    kv = torch.randn(b, s, hkv, 2, 128, device="cuda", dtype=torch.bfloat16)
    run(kv[..., 0, :], kv[..., 1, :], "fused [B,S,H,2,D]")
    del kv
PY
  cat >> /tmp/ifa_layouts.py <<'PY'
import dataclasses
for hq, hkv, b, s in ((128, 128, 1, 131072), (32, 8, 16, 32768)):
    q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k)
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    base = cb.make_ifa_plan(q, k, None)
    for ns in (1, 2, 4, 8, 16):
        plan = dataclasses.replace(base, num_splits=ns, split_len=s // ns, num_units=b * hkv * ns)
        kw = dict(kv_lens=lens, block_table=None, softmax_scale=0.088, causal=False, atten_mask=None,
                  pse_shift=None, k_scale=None, v_scale=None, k_offset=None, v_offset=None, plan=plan)
        t = time_cuda(lambda i: cb.incre_flash_attention(q, k, v, **kw), 1)
        print(f"h{hq}/{hkv} b{b} s{s} splits={ns:2d} {t.median_us:8.1f} us {b*s*hkv*512 / (t.median_us*1e-6)/1e9:6.0f} GB/s", flush=True)
    del k, v
PY
  timeout 200 $PY /tmp/ifa_layouts.py 2>&1 | tee "$OUT/layouts.log"
fi

if has profile; then
  # Nsight Compute on a few configurations (stall reasons, bandwidth) and the SASS opcode mix of
  # the main kernels; all into profile.log.
  echo "== profile"
  cat > /tmp/ifa_prof.py <<'PY'
import sys, torch
from dualops.backends import cuda as cb
hq, hkv, b, s, kv = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
dev = "cuda"
q = torch.randn(b, 1, hq, 128, device=dev, dtype=torch.bfloat16)
k = torch.randn(b, s, hkv, 128, device=dev, dtype=torch.bfloat16)
v = torch.randn_like(k)
sc = None
if kv == "int8":
    k = torch.randint(-128, 128, k.shape, device=dev, dtype=torch.int8); v = k.clone()
    sc = torch.full((hkv, 128), 0.01, device=dev)
lens = torch.full((b,), s, dtype=torch.int32, device=dev)
for _ in range(5):
    cb.incre_flash_attention(q, k, v, kv_lens=lens, block_table=None, softmax_scale=0.088, causal=False,
                             atten_mask=None, pse_shift=None, k_scale=sc, v_scale=sc, k_offset=None, v_offset=None)
torch.cuda.synchronize()
print(cb.make_ifa_plan(q, k, None).describe())
PY
  {
    for cfg in "32 8 16 4096 bf16" "128 128 1 32768 int8" "32 8 128 1024 bf16"; do
      echo "### ncu $cfg"
      timeout 120 ncu --clock-control none -k regex:ifa_split_kernel --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section SchedulerStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__warps_launched.sum,smsp__inst_executed_pipe_lsu.sum,dram__bytes_read.sum" \
        $PY /tmp/ifa_prof.py $cfg 2>&1 | grep -vE "^==PROF==|^\s*$|^\s+(OPT|WRN|INF)|^\s{10}" | head -90
    done
    echo "### SASS opcode mix"
    so=$(ls python/dualops/_C*.so | head -1)
    cuobjdump -sass "$so" > /tmp/all.sass 2>/dev/null
    $PY - <<'PY'
import re, collections
fn, hist = None, {}
for line in open("/tmp/all.sass"):
    m = re.search(r"Function : (\S+)", line)
    if m:
        fn = m.group(1); hist[fn] = collections.Counter(); continue
    m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
    if fn and m:
        hist[fn][m.group(1)] += 1
for fn, h in hist.items():
    if "ifa_split_kernel" in fn and "Li128ELi16E" in fn:
        print(fn, sum(h.values()), dict(h.most_common(25)))
PY
  } > "$OUT/profile.log" 2>&1
  tail -c 6000 "$OUT/profile.log"
fi
exit $status

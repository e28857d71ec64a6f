#!/usr/bin/env bash
# Build ifa_kernel_ablate.cu once per DUALOPS_IFA_ABLATE value (in parallel) and run each on a
# Hopper GPU. Usage: benchmarks/cuda/run_kernel_ablate.sh [N ...] (default: 0 1 2 4 8 16 7 0);
# iN / fN = the same on an int8 / fp8 cache; +t the phase trace (DUALOPS_IFA_TRACE), +T the trace with the
# instruction-fetch probe after the first epilogue barrier (DUALOPS_IFA_TRACE=2; +W also runs
# it once before the grid-dependency wait), +o the kernel headers in
# $ABLATE_OLD_DIR instead of the tree's (a same-lease A/B against an older kernel: copy its
# backends/cuda/incre_flash_attention/*.cuh *.h there, e.g. to benchmarks/cuda/old_kernel, which
# git ignores: name it in the device tool's carry), +mX runs with tuning ifa_merge=X
# (kernel | counter | cluster), +n / +cw forces narrow / wide CTAs (ifa_cta_shape; else
# the launcher picks), +gN spreads a multi-wave grid's first wave over N ns
# (ifa_stagger_ns), +FN prefetches the second fill after the wait from splits of N keys
# up (ifa_second_fill_keys; 0: none), +LN runs units of N keys up in the lockstep pipeline
# (ifa_lockstep_keys; 0: none), +BN lockstep units of N keys up on contiguous caches in the
# burst order (ifa_lockstep_burst_keys; 0: never), +pN narrow 8-bit grids in the narrow kernel
# with the first-fill prefetch (N = 1) or without (0) (ifa_narrow_prefetch), +yN wide 8-bit
# calls in the wide kernel with the first-fill prefetch (1: all of them) or none (0)
# (ifa_wide_prefetch), +xNAMEN builds with -DNAME=N (a macro of an experiment, e.g.
# +xDUALOPS_IFA_FOO1; several may follow each other; +xABLATE_D64: head dim 64). ABLATE_SHAPES=a,b picks shapes (substrings;
# =name: that name exactly);
# ABLATE_KV_DELTAS="0 1026 ..." runs every build once per value: V that many MB after K in one
# allocation (0: separate allocations) -- the placement effect of BENCHMARKS.md v15;
# ABLATE_PAGES="0 64 ..." likewise once per page size (0: contiguous caches; N: pages of N keys
# in a permuted pool); ABLATE_BHSD=1: contiguous caches laid out [B, H_kv, S, D] instead of
# [B, S, H_kv, D]; ABLATE_INT8_TRI=1: int8 caches of triangular bytes (a quantized Gaussian's
# shape) instead of the bf16 bit pattern.
# The N = 0 build runs first and last: the two show the run-to-run spread.
# ABLATE_NCU=1 also profiles the N = 0 build (ABLATE_NCU_TAG=N: that build) with Nsight Compute;
# ABLATE_SASS=1 dumps its SASS.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${OUT:-/tmp}"
ns=${*:-0 1 2 4 8 16 7 0}
for n in $(echo $ns | tr ' ' '\n' | sort -u); do
  kv=0; a=${n%%+*}; extra=""
  if [[ $a == i* ]]; then kv=1; a=${a#i}; fi
  if [[ $a == f* ]]; then kv=2; a=${a#f}; fi
  [[ $n == *+t* ]] && extra+=" -DDUALOPS_IFA_TRACE=1"
  [[ $n == *+T* ]] && extra+=" -DDUALOPS_IFA_TRACE=2"
  [[ $n == *+W* ]] && extra+=" -DDUALOPS_IFA_TRACE_WARM=1"
  rest=$n  # every +xNAMEN token
  while [[ $rest =~ \+x([A-Z_0-9]*[A-Z_])([0-9]+)(.*) ]]; do
    extra+=" -D${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"; rest=${BASH_REMATCH[3]}
  done
  kdir="$root/backends/cuda/incre_flash_attention"
  [[ $n == *+o* ]] && kdir="$(cd "${ABLATE_OLD_DIR:?+o needs ABLATE_OLD_DIR}" && pwd)"
  # (the package's CUDA flags, CMakeLists.txt: --use_fast_math; before the eighteenth session the
  # driver built without it and its times sat 0.3-0.6 us above the sweep's on split calls:
  # BENCHMARKS.md item 36)
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --use_fast_math --expt-relaxed-constexpr -lineinfo -Xptxas -v -DDUALOPS_IFA_ABLATE=$a -DABLATE_KV_INT8=$kv \
    -DABLATE_TAG="\"$n\"" $extra \
    -I "$root/ops/include" -I "$kdir" \
    -o "$out/ifa_kernel_ablate_$n" "$here/ifa_kernel_ablate.cu" 2> "$out/ptxas_ablate_$n.txt" &
done
wait
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv || true
for pg in ${ABLATE_PAGES:-0}; do
  for d in ${ABLATE_KV_DELTAS:-0}; do
    for n in $ns; do
      m="" shape="" stagger=""
      [[ $n =~ \+m([a-z]+) ]] && m=${BASH_REMATCH[1]}
      [[ $n == *+n* ]] && shape=narrow
      [[ $n == *+cw* ]] && shape=wide
      [[ $n =~ \+g([0-9]+) ]] && stagger=${BASH_REMATCH[1]}
      fill2=""; [[ $n =~ \+F([0-9]+) ]] && fill2=${BASH_REMATCH[1]}
      lock=""; [[ $n =~ \+L([0-9]+) ]] && lock=${BASH_REMATCH[1]}
      burst=""; [[ $n =~ \+B([0-9]+) ]] && burst=${BASH_REMATCH[1]}
      npf=""; [[ $n =~ \+p([0-9]+) ]] && npf=${BASH_REMATCH[1]}
      wpf=""; [[ $n =~ \+y([0-9]+) ]] && wpf=${BASH_REMATCH[1]}
      bool() { [ "$1" = 0 ] && echo false || echo true; }
      tune="${m:+ifa_merge=$m,}${shape:+ifa_cta_shape=$shape,}${stagger:+ifa_stagger_ns=$stagger,}"
      tune+="${fill2:+ifa_second_fill_keys=$fill2,}${lock:+ifa_lockstep_keys=$lock,}${burst:+ifa_lockstep_burst_keys=$burst,}"
      tune+="${npf:+ifa_narrow_prefetch=$(bool $npf),}${wpf:+ifa_wide_prefetch=$(bool $wpf),}"
      # the launch choices come from the library's planner (tuning overrides: docs/tuning.md)
      PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" ABLATE_TUNE="$tune" \
        ABLATE_PAGE=$pg ABLATE_KV_DELTA_MB=$d "$out/ifa_kernel_ablate_$n" | tee -a "$out/kernel_ablate.txt"
    done
  done
done
nt=${ABLATE_NCU_TAG:-0}
if [ "${ABLATE_SASS:-0}" = 1 ]; then cuobjdump --dump-sass "$out/ifa_kernel_ablate_$nt" > "$out/ifa_kernel_0.sass"; fi
if [ "${ABLATE_NCU:-0}" = 1 ]; then
  timeout 300 ncu --set full -k regex:ifa_split_kernel -c 2 -s 6 --import-source yes -o "$out/ifa_kernel_0" \
    "$out/ifa_kernel_ablate_$nt" > "$out/ncu_log.txt" 2>&1
  ncu --import "$out/ifa_kernel_0.ncu-rep" --page details > "$out/ncu_details.txt" 2>&1
  ncu --import "$out/ifa_kernel_0.ncu-rep" --page raw --csv > "$out/ncu_raw.csv" 2>&1
  grep -E "Duration|DRAM Throughput|Issue Slots|Warp Cycles Per Issued|Stall|No Eligible|Active Warps" "$out/ncu_details.txt" | head -40
fi
rm -f "$out"/ifa_kernel_ablate_[0-9if]*

#!/usr/bin/env bash
# Build racecheck_barriers.cu and run its modes under compute-sanitizer's racecheck on a Hopper
# GPU. Expected: `uneven` and `handoff_ahead` report hazards (the tool's barrier model, not
# races), every other mode (the even and leveled exchanges, the named-barrier hand-offs whose
# consumer is not behind, the mbarrier hand-offs) none; the script exits non-zero when a mode
# does otherwise.
# Logs under $OUT when set, else /tmp.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp}"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo \
  -o "$out/racecheck_barriers" "$here/racecheck_barriers.cu" || exit 1
rc=0
for mode in even uneven leveled handoff handoff_ahead handoff_behind mbar mbar_ahead mbar_behind; do
  compute-sanitizer --tool racecheck --print-limit 4 "$out/racecheck_barriers" $mode > "$out/racecheck_barriers_$mode.log" 2>&1
  summary=$(grep -E "RACECHECK SUMMARY" "$out/racecheck_barriers_$mode.log")
  echo "$mode: $summary"
  hazards=$(echo "$summary" | grep -oE "\([0-9]+ error" | grep -oE "[0-9]+")
  if [ "$mode" = uneven ] || [ "$mode" = handoff_ahead ]; then [ "${hazards:-0}" -gt 0 ] || rc=1; else [ "${hazards:-1}" -eq 0 ] || rc=1; fi
done
rm -f "$out/racecheck_barriers"
exit $rc

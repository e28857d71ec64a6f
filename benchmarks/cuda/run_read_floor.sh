#!/usr/bin/env bash
# Build and run the read-and-merge floor microbenchmark (ifa_read_floor.cu) on a Hopper GPU.
# Usage: benchmarks/cuda/run_read_floor.sh   (FLOOR_ROWS="8-bit h8/1 b1 s8k,..." picks rows;
# logs under $OUT when set, else /tmp). Two passes in one lease: their difference is the spread.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp}"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
  -o "$out/ifa_read_floor" "$here/ifa_read_floor.cu" 2> "$out/ptxas_floor.txt"
for pass in 1 2; do
  echo "== pass $pass"
  "$out/ifa_read_floor" | tee "$out/read_floor_$pass.txt"
done
rm -f "$out/ifa_read_floor"

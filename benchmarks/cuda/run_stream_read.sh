#!/usr/bin/env bash
# Build and run the K/V stream-read microbenchmark (ifa_stream_read.cu) on a Hopper GPU.
# Usage: benchmarks/cuda/run_stream_read.sh [--quick] [--only A,B,...]   (logs under $OUT when set, else /tmp)
# Runs the whole table twice (passes 1 and 2) to show the run-to-run spread.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp}"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
  -o "$out/ifa_stream_read" "$here/ifa_stream_read.cu" 2> "$out/ptxas.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv || true
# two passes in one process each: the difference between them is the run-to-run noise
for pass in 1 2; do
  echo "== pass $pass"
  "$out/ifa_stream_read" "$@" | tee "$out/stream_read_$pass.txt"
done
rm -f "$out/ifa_stream_read"

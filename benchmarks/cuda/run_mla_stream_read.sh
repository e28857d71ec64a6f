#!/usr/bin/env bash
# Build and run the MLA latent-cache stream-read microbenchmark (mla_stream_read.cu) on a Hopper
# GPU. Usage: benchmarks/cuda/run_mla_stream_read.sh [pages]   (binary and log under $OUT when set,
# else /tmp). Runs the table twice (passes 1 and 2) to show the run-to-run spread.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp}"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o "$out/mla_stream_read" "$here/mla_stream_read.cu"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv || true
for pass in 1 2; do
  echo "== pass $pass"
  "$out/mla_stream_read" "$@" | tee "$out/mla_stream_read_$pass.txt"
done
rm -f "$out/mla_stream_read"

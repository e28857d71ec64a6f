#!/usr/bin/env bash
# Builds FlashMLA's sm90 sparse FP8 decode into one shared library, libflashmla_sparse_peer.so,
# with our C-ABI binding (binding.cu): a benchmark peer that a GPU machine loads without compiling.
#
#   bash benchmarks/cuda/flashmla_sparse_peer/build.sh FLASHMLA_SRC CUTLASS [OUT_DIR]
#
#   FLASHMLA_SRC  FlashMLA's sources: a git repository (its .git folder, or a bare mirror) holding
#                 commit $FLASHMLA_COMMIT (default 9241ae3), or a checkout with csrc/ in it
#   CUTLASS       the CUTLASS/CuTe headers: the nvidia_cutlass wheel (.whl), or a folder holding
#                 cutlass/ and cute/ (an include/ folder, a CUTLASS checkout or an unpacked wheel)
#   OUT_DIR       where the library goes (default .peers_sparse at the repository root, git-ignored)
#
# Only what FlashMLA's sparse decode runs on sm90 with the V3.2 FP8 cache (656-byte tokens) is
# compiled: the splitkv kernel for 64 and 128 query heads, the scheduler-metadata kernel and the
# combine kernel. Nothing of FlashMLA is copied into this repository: its files are read from
# FLASHMLA_SRC into a temporary folder at build time. Environment: NVCC (default nvcc),
# JOBS (parallel compiles, default nproc), FLASHMLA_COMMIT, KEEP_TMP=1 (keep the build folder).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
src=${1:?usage: build.sh FLASHMLA_SRC CUTLASS [OUT_DIR]}
cutlass=${2:?usage: build.sh FLASHMLA_SRC CUTLASS [OUT_DIR]}
out=${3:-$repo/.peers_sparse}
NVCC=${NVCC:-nvcc}
JOBS=${JOBS:-$(nproc)}
COMMIT=${FLASHMLA_COMMIT:-9241ae3}
LIB=libflashmla_sparse_peer.so
t0=$(date +%s)

tmp=$(mktemp -d /tmp/flashmla_sparse_peer.XXXXXX)
if [ "${KEEP_TMP:-0}" = 1 ]; then echo "build folder: $tmp (kept)"; else trap 'rm -rf "$tmp"' EXIT; fi

# ---- 1. FlashMLA's sources into $tmp/flashmla
# the headers the sparse decode path includes, and the four translation units it needs
NEEDED=(csrc/params.h csrc/defines.h csrc/utils.h csrc/kerutils/include csrc/sm90/helpers.h
        csrc/sm90/decode/sparse_fp8 csrc/smxx/decode LICENSE)
TUS=(csrc/sm90/decode/sparse_fp8/instantiations/v32_persistent_h64.cu
     csrc/sm90/decode/sparse_fp8/instantiations/v32_persistent_h128.cu
     csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu
     csrc/smxx/decode/combine/combine.cu)
fm=$tmp/flashmla
mkdir -p "$fm"
gitdir=
if git --git-dir="$src" rev-parse --verify -q "$COMMIT^{commit}" > /dev/null 2>&1; then
  gitdir=$src
elif git -C "$src" rev-parse --verify -q "$COMMIT^{commit}" > /dev/null 2>&1; then
  gitdir=$(git -C "$src" rev-parse --absolute-git-dir)
fi
if [ -n "$gitdir" ]; then
  rev=$(git --git-dir="$gitdir" rev-parse "$COMMIT^{commit}")
  echo "[1/4] FlashMLA $rev from the git repository $src (git archive of ${#NEEDED[@]} paths)"
  git --git-dir="$gitdir" archive "$rev" "${NEEDED[@]}" | tar -x -C "$fm"
elif [ -d "$src/csrc" ]; then
  rev="unknown (checkout $src)"
  [ -e "$src/.git" ] && rev="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown) (checkout $src)"
  echo "[1/4] FlashMLA from the checkout $src"
  for p in "${NEEDED[@]}"; do mkdir -p "$fm/$(dirname "$p")"; cp -r "$src/$p" "$fm/$p"; done
else
  echo "build.sh: $src is neither a git repository holding commit $COMMIT nor a checkout with csrc/" >&2
  exit 1
fi

# ---- 2. CUTLASS / CuTe headers
if [ -f "$cutlass" ] && [[ "$cutlass" == *.whl ]]; then
  echo "[2/4] CUTLASS headers from the wheel $cutlass"
  python3 - "$cutlass" "$tmp/cutlass" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if "/include/cute/" in n or "/include/cutlass/" in n]
    z.extractall(dest, names)
print(f"      {len(names)} header files")
PY
  cutlass=$tmp/cutlass
fi
inc=$(find "$cutlass" -path '*/cutlass/cutlass.h' -not -path '*/tools/*' -not -path '*/examples/*' \
      -not -path '*/python/*' | head -1)
[ -n "$inc" ] || { echo "build.sh: no cutlass/cutlass.h under $cutlass" >&2; exit 1; }
inc=$(dirname "$(dirname "$inc")")
[ -f "$inc/cute/tensor.hpp" ] || { echo "build.sh: $inc has cutlass/ but no cute/" >&2; exit 1; }
ver=$(sed -n 's/^#define CUTLASS_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$inc/cutlass/version.h" | paste -sd.)
echo "[2/4] CUTLASS $ver headers: $inc"

# ---- 3. compile (FlashMLA's own nvcc flags from its setup.py: sm_90a only, no -lineinfo, no
# --source-in-ptx; ptxas -v so that each kernel's registers and spills are printed)
FLAGS=(-O3 -std=c++20 -DNDEBUG -D_USE_MATH_DEFINES -DFLASH_MLA_DISABLE_FP16 -Wno-deprecated-declarations
       -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_HALF2_OPERATORS__
       -U__CUDA_NO_BFLOAT16_CONVERSIONS__ --expt-relaxed-constexpr --expt-extended-lambda --use_fast_math
       "--ptxas-options=-v,--register-usage-level=10,--warn-on-spills"
       -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC,-fvisibility=hidden
       -I"$fm/csrc" -I"$fm/csrc/kerutils/include" -I"$fm/csrc/sm90" -I"$inc")
echo "[3/4] $($NVCC --version | tail -1): ${#TUS[@]} FlashMLA files + binding.cu, $JOBS at a time"
echo "      flags: ${FLAGS[*]}"
mkdir -p "$tmp/obj"
compile() {  # compile SRC OBJ
  local s=$(date +%s)
  if "$NVCC" "${FLAGS[@]}" -c "$1" -o "$2" > "$2.log" 2>&1; then
    echo "      $(basename "$1"): $(( $(date +%s) - s )) s"
    # ptxas -v: per kernel, its registers and spill stores (names demangled, template arguments cut)
    awk '/Compiling entry function/ {n=$0; sub(/.*function ./, "", n); sub(/. for .*/, "", n)}
         /bytes spill stores/ {sp=$5} /Used [0-9]+ registers/ {print n, $5, sp}' "$2.log" |
      while read -r name regs spill; do
        short=$(echo "$name" | c++filt 2>/dev/null | sed 's/<.*//; s/(.*//')
        echo "        ${short:-$name}: $regs registers, $spill B spill stores"
      done
  else
    cat "$2.log" >&2; echo "build.sh: compiling $1 failed" >&2; return 1
  fi
}
pids=()
srcs=("${TUS[@]/#/$fm/}" "$here/binding.cu")
for f in "${srcs[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  compile "$f" "$tmp/obj/$(basename "${f%.cu}").o" & pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ $fail = 0 ] || exit 1

# ---- 4. link: static CUDA runtime, symbols stripped but for our extern "C" entry points
mkdir -p "$out"
echo "[4/4] linking $out/$LIB (static cudart)"
"$NVCC" -shared -cudart static -gencode arch=compute_90a,code=sm_90a -Xlinker -s,--exclude-libs,ALL \
  -o "$out/$LIB" "$tmp"/obj/*.o
cp "$fm/LICENSE" "$out/FLASHMLA_LICENSE"
secs=$(( $(date +%s) - t0 ))
size=$(stat -c %s "$out/$LIB")
{
  echo "library: $LIB"
  echo "flashmla: $rev"
  echo "cutlass: $ver ($inc)"
  echo "nvcc: $($NVCC --version | tail -1)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) in $secs s"
  echo "size: $size bytes"
  echo "needs: $(objdump -T "$out/$LIB" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1) or newer, an sm_90 GPU and a CUDA 13 driver"
  echo "translation units: ${TUS[*]} binding.cu"
  echo "flags: ${FLAGS[*]}"
} > "$out/BUILD_INFO.txt"
echo "done in $secs s: $out/$LIB, $((size / 1024)) KiB; entry points:"
nm -D --defined-only "$out/$LIB" | awk '$3 ~ /^fmla_peer_/ {print "      " $3}'

#!/usr/bin/env bash
# The main job: set-up, then quick parity + quick bench on every backend this machine has.
# Reports go to reports/ (override with --out DIR). Extra args go to `python -m dualops`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m dualops "$@"

#!/usr/bin/env bash
# The main job: set-up (it installs what the plots need), then quick parity + quick bench on every
# backend this machine has, and every peer installed here. Reports go to reports/ (override with
# --out DIR): each run in a folder of its own under reports/runs/, reports/index.html lists them
# and shows the newest. Extra args go to `python -m dualops`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo
python3 -m dualops "$@"

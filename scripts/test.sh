#!/usr/bin/env bash
# The test command: set-up (scripts/setup.sh) then the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m dualops.codegen --check
python3 -m pytest -q tests "$@"

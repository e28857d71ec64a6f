#!/usr/bin/env bash
# The test command: set-up (scripts/setup.sh), the system tools some tests need (clang, chromium),
# then the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# System tools only the tests need, from Debian's packages (a download at run time would not be
# reachable from CI): clang, which type-checks the Ascend C kernels in the simulator's strict
# qualifier mode (tests/test_ascend_qualifiers.py) and against CANN's AscendC headers
# (tests/test_cann_headers.py), and chromium, which opens the report page
# (tests/test_report_page.py). A test whose tool is missing is skipped.
missing=()
command -v clang++ > /dev/null || missing+=(clang)
command -v chromium > /dev/null || command -v chromium-browser > /dev/null || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get > /dev/null && [ "$(id -u)" = 0 ]; then
    echo "  installing ${missing[*]} for the tests (apt-get; about a minute)"
    mkdir -p build
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
      > build/apt-tools.log 2>&1 \
      || echo "  ${missing[*]} did not install (build/apt-tools.log): the tests that need them will be skipped"
  else
    echo "  not installed here: ${missing[*]} (as root: apt-get install ${missing[*]}); the tests that need them will be skipped"
  fi
fi
# An outside tool some tests run when a setting points at it (the test is skipped otherwise).
[ -n "${DUALOPS_ASCENDC_CONFORMANCE:-}" ] || echo "  DUALOPS_ASCENDC_CONFORMANCE is not set:" \
  "tests/test_ascend_conformance.py (the AscendC API conformance check) will be skipped"
[ -n "${ASCEND_HOME_PATH:-}" ] || [ -f "${DUALOPS_CANN_HEADERS:-/nonexistent}/cann-headers.tar.xz" ] \
  || echo "  no CANN headers (set ASCEND_HOME_PATH or DUALOPS_CANN_HEADERS):" \
    "tests/test_cann_headers.py will skip the kernels' compile against CANN's AscendC headers"
python3 -m dualops.codegen --check
python3 -m pytest -q tests "$@"

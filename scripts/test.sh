#!/usr/bin/env bash
# The test command: set-up (scripts/setup.sh), the browser the report page's test opens it in,
# then the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# tests/test_report_page.py opens reports/index.html in a real headless browser: Debian's chromium
# (a browser build downloaded at run time would not be reachable from CI). Only the tests need it.
if ! command -v chromium > /dev/null && ! command -v chromium-browser > /dev/null; then
  if command -v apt-get > /dev/null && [ "$(id -u)" = 0 ]; then
    echo "  installing chromium for the report page's browser test (apt-get; about a minute)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
      > build/apt-chromium.log 2>&1 \
      || echo "  chromium did not install (build/apt-chromium.log): the browser test will be skipped"
  else
    echo "  no chromium here (as root: apt-get install chromium): the report page's browser test will be skipped"
  fi
fi
python3 -m dualops.codegen --check
python3 -m pytest -q tests "$@"

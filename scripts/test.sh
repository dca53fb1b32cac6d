#!/usr/bin/env bash
# The whole test suite, from a clean clone on Debian 12 (as root, or with
# sudo): installs what it needs, builds, and runs unit, integration and
# end-to-end tests (real torchrun, real Prometheus) through CTest.
# Usage: scripts/test.sh [ctest options, e.g. -L unit or -R e2e_]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
start=$(date +%s)
bash scripts/build.sh
echo "build: $(( $(date +%s) - start ))s"
# Two at a time: tests that time real processes run alone (RUN_SERIAL; see
# tests/CMakeLists.txt), the rest share the 2 cores.
ctest --test-dir build --output-on-failure --timeout 900 -j2 "$@"
echo "tests: $(( $(date +%s) - start ))s in all"

#!/usr/bin/env bash
# The whole test suite, from a clean clone on Debian 12 (as root, or with
# sudo): installs what it needs, builds, and runs unit, integration and
# end-to-end tests (real torchrun, real Prometheus, real etcd, real Slurm)
# through CTest.
# Usage: scripts/test.sh [ctest options, e.g. -L unit or -R e2e_]
#
# With no options, the unit tests run first and the run stops at the first
# one that fails (a broken core is known in minutes); then everything else
# but the long fuzz runs (`scripts/test.sh -L fuzz-long` runs those).
# At the end it prints the tests' total time and the ten slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
start=$(date +%s)
bash scripts/build.sh
built=$(date +%s)
echo "build: $(( built - start ))s"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Tests that share nothing run side by side; suites that measure latency
# figures run alone (RUN_SERIAL), and at most a few end-to-end suites at a
# time (the `e2e_slots` resource of tests/resources.json; see
# tests/CMakeLists.txt for which suite runs how and why).
run_ctest() {
  ctest --test-dir build --output-on-failure --timeout 900 \
    --resource-spec-file "$PWD/tests/resources.json" "$@" 2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}
status=0
if [ $# -eq 0 ]; then
  run_ctest -L unit -j2 --stop-on-failure || status=$?
  if [ "$status" -eq 0 ]; then
    echo "unit tests passed in $(( $(date +%s) - built ))s; now the rest"
    # The fuzz tests (label fuzz: the clang/ASan tree's build, then every
    # seed of each target) are CPU and nothing else: they assert no time and
    # nothing waits on them. They run beside the rest at nice 19, so they take
    # only the CPU the rest leaves idle (the moments when every end-to-end
    # suite waits), never a test's share of it. Their output follows the
    # rest's. The long fuzz runs only when asked for (-L fuzz-long).
    fuzz_log=$(mktemp)
    trap 'rm -f "$log" "$fuzz_log"' EXIT
    nice -n 19 ctest --test-dir build --output-on-failure --timeout 1800 \
      -L '^fuzz$' -j1 >"$fuzz_log" 2>&1 &
    fuzz_pid=$!
    run_ctest -LE 'unit|fuzz' -j4 || status=$?
    fuzz_status=0
    wait "$fuzz_pid" || fuzz_status=$?
    echo "the fuzz tests (beside the rest, at nice 19):"
    tee -a "$log" <"$fuzz_log"
    [ "$status" -ne 0 ] || status=$fuzz_status
  fi
else
  run_ctest -j4 "$@" || status=$?
fi
echo "tests: $(( $(date +%s) - built ))s (build excluded); $(( $(date +%s) - start ))s in all"
# CTest's own per-test times, from its result lines (awk reads to the end:
# `head` would close the pipe early, and under pipefail sort's SIGPIPE would
# be the script's exit status, 141, after a green run):
#   "  12/340 Test  #87: e2e_recovery ....   Passed  101.23 sec"
echo "the ten slowest tests:"
sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .* \([0-9.]*\) sec$/\2 \1/p' "$log" |
  sort -rn | awk 'NR <= 10 { printf "  %8.1fs  %s\n", $1, $2 }'
exit "$status"

#!/usr/bin/env bash
# Builds the fuzz targets (clang-14, libFuzzer + ASan + UBSan) into their own
# tree and runs them, each on a fresh copy of its seed corpus (fuzz/corpus/).
# Usage:
#   scripts/fuzz.sh --build              build the fuzz tree only
#   scripts/fuzz.sh [TARGET [SECONDS]]   build, then run TARGET (every target
#                                        when absent) for SECONDS (default 60)
#   scripts/fuzz.sh --seeds TARGET       build, then run TARGET once over each
#                                        seed of its corpus (no mutation)
# Targets: heartbeat_decoder, kernel_line, agent_intake, state_restore, flight_recorder
# (docs/fuzzing.md).
# Environment: TRAINSUP_FUZZ_BUILD_DIR (default: build-fuzz), TRAINSUP_BUILD_JOBS
# (default: 2). Exits 1 on any finding (crash, leak, undefined behaviour,
# timeout); the input that caused it is kept in the run's artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${TRAINSUP_FUZZ_BUILD_DIR:-build-fuzz}
TARGETS=(heartbeat_decoder kernel_line agent_intake state_restore flight_recorder)

build() {
  if ! command -v clang++-14 >/dev/null; then
    echo "error: clang++-14 not found (run scripts/install-deps.sh)" >&2
    exit 1
  fi
  local start=$SECONDS
  # Line tables only: all a sanitizer's stack trace needs, and the tree
  # compiles about a fifth faster than with full debug information.
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only \
    -DTRAINSUP_FUZZ=ON -DBUILD_TESTING=OFF >/dev/null
  ninja -C "$BUILD" -j "${TRAINSUP_BUILD_JOBS:-2}" fuzzers
  echo "fuzz tree: built in $((SECONDS - start))s"
}

# The protobuf message a target reads; empty for raw bytes.
message_of() {
  case $1 in
    agent_intake) echo trainsup.fuzz.AgentStreams ;;
    state_restore) echo trainsup.fuzz.StoreRows ;;
    *) echo "" ;;
  esac
}

# Copies the seeds of target $1 into directory $2; *.textproto seeds are
# encoded to the message the target reads.
prepare_corpus() {
  local target=$1 out=$2 message seed
  message=$(message_of "$target")
  for seed in fuzz/corpus/"$target"/*; do
    if [[ $seed == *.textproto ]]; then
      protoc -I fuzz -I proto --encode="$message" fuzz/fuzz_input.proto \
        <"$seed" >"$out/$(basename "$seed" .textproto)"
    else
      cp "$seed" "$out/"
    fi
  done
}

# run TARGET SECONDS: mutates for SECONDS; run TARGET seeds: executes each
# seed once (libFuzzer's -runs=0 still loads and runs the whole corpus).
run() {
  local target=$1 seconds=$2
  local limit=-max_total_time="$seconds" what="in ${seconds}s"
  if [ "$seconds" = seeds ]; then
    limit=-runs=0
    what="(the seeds once)"
  fi
  local work="$BUILD/runs/${target}-${seconds}"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  prepare_corpus "$target" "$work/corpus"
  local seeds
  seeds=$(find "$work/corpus" -type f | wc -l)
  ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer-14 || true)
  export ASAN_SYMBOLIZER_PATH
  export UBSAN_OPTIONS=print_stacktrace=1
  # -close_fd_mask=2: the targets' own log lines are dropped; libFuzzer and
  # the sanitizers still report (on a copy of stderr).
  local status=0
  "$BUILD/fuzz/${target}_fuzzer" "$limit" -print_final_stats=1 \
    -timeout=25 -rss_limit_mb=2048 -close_fd_mask=2 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" >"$work/log" 2>&1 || status=$?
  local executions
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
  local findings
  findings=$(find "$work/artifacts" -type f | wc -l)
  echo "fuzz $target: ${executions:-?} executions $what, corpus $seeds seeds ->" \
    "$(find "$work/corpus" -type f | wc -l) inputs, findings: $findings"
  if [ "$status" -ne 0 ] || [ "$findings" -ne 0 ] ||
    grep -qE 'ERROR: (Address|Leak|UndefinedBehavior)Sanitizer|runtime error:' "$work/log"; then
    tail -n 80 "$work/log" >&2
    echo "error: fuzz $target found a problem (exit $status); inputs in $work/artifacts;" \
      "reproduce with: $BUILD/fuzz/${target}_fuzzer INPUT" >&2
    return 1
  fi
}

if [ "${1:-}" = "--build" ]; then
  build
  exit 0
fi
seeds_only=0
if [ "${1:-}" = "--seeds" ]; then
  seeds_only=1
  shift
  [ $# -eq 1 ] || { echo "usage: scripts/fuzz.sh --seeds TARGET" >&2; exit 2; }
fi
targets=("${TARGETS[@]}")
if [ $# -ge 1 ]; then
  if [[ " ${TARGETS[*]} " != *" $1 "* ]]; then
    echo "error: no fuzz target '$1' (targets: ${TARGETS[*]})" >&2
    exit 2
  fi
  targets=("$1")
fi
seconds=${2:-60}
[ "$seeds_only" -eq 1 ] && seconds=seeds
build
failed=0
for target in "${targets[@]}"; do
  run "$target" "$seconds" || failed=1
done
exit $failed

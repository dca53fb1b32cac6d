#!/usr/bin/env bash
# Configures and builds trainsup into build/ (Ninja, RelWithDebInfo).
# Usage: scripts/build.sh [-DNAME=VALUE ...] [TARGET ...]
#   -D options go to cmake; TARGETs are built alone (default: everything),
#   e.g. `scripts/build.sh trainsupd trainsup-agent trainsupctl`.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake_options=()
targets=()
for arg in "$@"; do
  case "$arg" in
    -D*) cmake_options+=("$arg") ;;
    *) targets+=("$arg") ;;
  esac
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cmake_options[@]}" >/dev/null
# Two jobs: the heavy gRPC translation units need ~1 GiB each.
ninja -C build -j "${TRAINSUP_BUILD_JOBS:-2}" "${targets[@]}"

#!/usr/bin/env bash
# Configures and builds trainsup into build/ (Ninja, RelWithDebInfo).
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
# Two jobs: the heavy gRPC translation units need ~1 GiB each.
ninja -C build -j "${TRAINSUP_BUILD_JOBS:-2}"

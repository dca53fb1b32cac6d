#!/usr/bin/env bash
# The demo: trainsupd and two trainsup-agents, each wrapping a torchrun of 2
# ranks (gloo on CPU) on this machine, with the live `trainsupctl ranks` table.
# From a clean clone on Debian 12, as root: installs what the demo needs and
# builds only the three binaries it runs (the tests, benches and simulator are
# scripts/test.sh's).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --demo
bash scripts/build.sh trainsupd trainsup-agent trainsupctl
exec /usr/bin/python3 scripts/demo.py "$@"

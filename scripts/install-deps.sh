#!/usr/bin/env bash
# Installs every Debian 12 package that trainsup's build, tests and demo need.
# Idempotent: when everything is already installed it prints nothing and exits 0.
# Must run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config git
  # libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libgtest-dev libgmock-dev libsqlite3-dev libcli11-dev
  # end-to-end tests and demo: torchrun (gloo on CPU), promtool and a Prometheus server
  python3 python3-torch prometheus
  # alert delivery end to end (tests/e2e/test_alerts.py) and amtool, which checks
  # deploy/alertmanager/alertmanager.yml
  prometheus-alertmanager
  # used by the test harness to fetch /metrics
  curl
  # the state store read live while trainsupd runs (tests/e2e/test_state.py)
  sqlite3
  # deploy tests (ctest -L deploy): systemd-analyze verify checks the unit
  # (no running systemd needed), python3-yaml reads the Kubernetes manifest
  systemd python3-yaml
  # trainsupctl top's end-to-end test drives it in a real terminal
  tmux
  # fuzz targets (scripts/fuzz.sh, ctest -L fuzz): clang with libFuzzer and the
  # sanitizer runtimes, and llvm-symbolizer for readable reports
  clang-14 libclang-rt-14-dev llvm-14
  # tests/e2e/test_slurm.py: a real Slurm cluster on loopback (munged, slurmctld,
  # two slurmd) that trainsup's fence and unfence commands drain and resume
  slurmctld slurmd slurm-client munge
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "error: install-deps.sh needs root (missing: ${missing[*]})" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# Installs the Debian 12 packages that trainsup needs.
#   scripts/install-deps.sh          everything: build, tests and demo
#   scripts/install-deps.sh --demo   only what the demo builds and runs
#                                    (no Slurm, etcd server, Prometheus,
#                                    Alertmanager, clang: only tests use them)
# Idempotent: when everything is already installed it prints nothing and exits 0.
# Must run as root (or with sudo available).
set -euo pipefail

# What the demo builds (trainsupd, trainsup-agent, trainsupctl) and runs.
DEMO_PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config git
  # libraries (GoogleTest: the build is configured with its tests, even
  # where only the binaries are built)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libcurl4-openssl-dev libgtest-dev libgmock-dev libsqlite3-dev libcli11-dev
  # the demo's job: torchrun (gloo on CPU)
  python3 python3-torch
)

# What only the tests use.
TEST_PACKAGES=(
  # promtool and a Prometheus server (alert rules, end-to-end alerts)
  prometheus
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
  # trainsupd's election (docs/ha.md) and its tests: a real etcd on loopback,
  # and etcdctl to look at it
  etcd-server etcd-client
)

PACKAGES=("${DEMO_PACKAGES[@]}")
case "${1:-}" in
  --demo) ;;
  "") PACKAGES+=("${TEST_PACKAGES[@]}") ;;
  *) echo "usage: scripts/install-deps.sh [--demo]" >&2; exit 2 ;;
esac

# etcd's .proto files, from which the build generates trainsupd's etcd client
# (proto/etcd/). Debian ships them in golang-etcd-server-dev, which as an
# installed package pulls ~145 others (systemd among them): take just its files.
ETCD_PROTO_DIR=/usr/local/share/trainsup/etcd-proto
fetch_etcd_protos() {
  [ -f "$ETCD_PROTO_DIR/etcd/etcdserver/etcdserverpb/rpc.proto" ] && return 0
  [ -f /usr/share/gocode/src/go.etcd.io/etcd/etcdserver/etcdserverpb/rpc.proto ] && return 0
  local tmp
  tmp=$(mktemp -d)
  chmod 755 "$tmp"  # apt-get download writes as _apt where it can
  echo "install-deps: fetching etcd's .proto files (golang-etcd-server-dev)" >&2
  if ! (cd "$tmp" && $SUDO apt-get download -qq golang-etcd-server-dev >/dev/null 2>&1); then
    $SUDO apt-get update -qq >/dev/null
    (cd "$tmp" && $SUDO apt-get download -qq golang-etcd-server-dev >/dev/null 2>&1)
  fi
  $SUDO dpkg-deb -x "$tmp"/golang-etcd-server-dev_*.deb "$tmp/x"
  $SUDO mkdir -p "$ETCD_PROTO_DIR"
  $SUDO cp -r "$tmp/x/usr/share/gocode/src/go.etcd.io/etcd" "$ETCD_PROTO_DIR/"
  $SUDO find "$ETCD_PROTO_DIR" -type f ! -name '*.proto' -delete
  $SUDO rm -rf "$tmp"
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
SUDO=""
if [ ${#missing[@]} -eq 0 ]; then
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
  fetch_etcd_protos
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "error: install-deps.sh needs root (missing: ${missing[*]})" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fetch_etcd_protos

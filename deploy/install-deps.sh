#!/usr/bin/env bash
# Installs the Debian 12 packages fedgather needs to build, test and run.
# Idempotent: packages already present are skipped; needs root (or sudo) only
# when something is missing.
#
#   deploy/install-deps.sh [--build-only]
#
#   --build-only  only what building fedgather, fedgather-server and
#                 fedavg_site needs (the container image's build stage):
#                 no test, benchmark, Python or network tooling
set -euo pipefail

BUILD_ONLY=0
case "${1:-}" in
  --build-only) BUILD_ONLY=1 ;;
  "") ;;
  *) echo "usage: deploy/install-deps.sh [--build-only]" >&2; exit 2 ;;
esac

# What a build of the binaries needs.
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libssl-dev libtorch-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  zlib1g-dev
  # grpc.health.v1 (the server's health service, `fedgather health`).
  grpc-proto
  # The server's Prometheus metrics (--metrics-listen).
  prometheus-cpp-dev
  # BLAKE3, the default contribution digest: Debian ships the official C
  # implementation only inside the Rust crate's source package
  # (/usr/share/cargo/registry/blake3-*/c/, built by cmake/Blake3.cmake).
  # With --no-install-recommends it pulls 28 more librust-*-dev source
  # packages, about 12 MB of files, nothing that runs.
  librust-blake3-dev
)
# What the tests, benchmarks and the Python module need besides.
TEST_PACKAGES=(
  ccache python3 libgtest-dev libgmock-dev libbenchmark-dev
  # The Python module and torch.distributed backend (python/): Debian's
  # python3-torch runs on the same libtorch1.13 as libtorch-dev.
  python3-dev pybind11-dev python3-torch
  # The wire conformance suite (tests/conformance): an independent client.
  python3-grpcio python3-protobuf
  # b3sum (the Rust implementation of BLAKE3) checks our build of it and
  # hashes for the conformance client.
  b3sum
  # Network namespaces and HTB link shaping (ip, tc): the network-cut fault
  # tests (tests/faults/netns_fault_test.cc) and bench/net's smoke run.
  iproute2
)
if [ "$BUILD_ONLY" = 0 ]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

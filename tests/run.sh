#!/usr/bin/env bash
# Installs the dependencies, builds everything (-j2) and runs the whole test
# suite: every GoogleTest binary through ctest, then the local federated
# simulation (deploy/local/run.sh) as an end-to-end smoke test of the binaries.
#
#   tests/run.sh [--build-dir DIR]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift ;;
    *) echo "usage: $0 [--build-dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
cd "$ROOT"

echo "== installing dependencies"
bash deploy/install-deps.sh

echo "== configuring $BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATHER_BUILD_TESTS=ON

echo "== building"
start=$(date +%s)
cmake --build "$BUILD_DIR" -j2
echo "   built in $(( $(date +%s) - start )) s"

echo "== unit and end-to-end tests"
GRPC_VERBOSITY=NONE ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --timeout 600

echo "== local federated simulation"
deploy/local/run.sh --no-build --build-dir "$BUILD_DIR"

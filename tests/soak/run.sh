#!/usr/bin/env bash
# The soak test (issue 9), not part of tests/run.sh or CI: builds the
# fedgather_soak target (-j2; configuring the build directory first if it
# has not been) and runs it. It starts a real fedgather-server process and
# eight participants, each through its own TCP proxy, runs N consecutive
# rounds (2,000 by default) of random collectives and sizes (1 byte to
# 1 MiB per rank) while cutting a random participant's connection in about
# one round in ten, checks every result byte for byte, asserts that the
# server's RSS and open descriptors stay flat after a warm-up, stops the
# server and verifies its audit chain. It prints the RSS and descriptors at
# the start and end, rounds/s, cuts and resumes.
#
#   tests/soak/run.sh [--build-dir DIR] [--rounds N] [--max-minutes M]
#                     [-- more fedgather_soak flags: --seed S,
#                      --cut-percent P, --cut-kinds upload|download|both,
#                      --warmup W, --gtest_*]
#
# --max-minutes (default 30) bounds the run: past it the soak prints where
# every rank was, kills the server and fails (exit 3) rather than hang.
# The build directory is --build-dir, else $BUILD_DIR, else build in the
# repository root. Exit status: the soak's (0 when it passed); 2 on usage
# errors.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() {
  echo "usage: tests/soak/run.sh [--build-dir DIR] [--rounds N] [--max-minutes M] [-- soak flags]" >&2
  exit "${1:-2}"
}

BUILD_DIR="${BUILD_DIR:-}"
ROUNDS=2000
MAX_MINUTES=30
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir)
      if [ $# -lt 2 ] || [ -z "$2" ]; then echo "--build-dir needs a value" >&2; usage; fi
      BUILD_DIR="$2"; shift ;;
    --build-dir=*) BUILD_DIR="${1#--build-dir=}" ;;
    --rounds)
      if [ $# -lt 2 ] || ! [[ "$2" =~ ^[1-9][0-9]*$ ]]; then
        echo "--rounds needs a positive number" >&2; usage
      fi
      ROUNDS="$2"; shift ;;
    --max-minutes)
      if [ $# -lt 2 ] || ! [[ "$2" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
        echo "--max-minutes needs a number" >&2; usage
      fi
      MAX_MINUTES="$2"; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
  shift
done
if [ -z "$BUILD_DIR" ]; then
  BUILD_DIR="$ROOT/build"
else
  case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac
fi
cd "$ROOT"

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATHER_BUILD_TESTS=ON
fi
cmake --build "$BUILD_DIR" -j2 --target fedgather_soak

# The server's own log goes to a file in the soak's temporary directory;
# gRPC's is kept quiet.
GRPC_VERBOSITY=NONE exec "$BUILD_DIR/tests/soak/fedgather_soak" \
  --rounds "$ROUNDS" --max-minutes "$MAX_MINUTES" "${EXTRA[@]}"

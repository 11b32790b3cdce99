#!/usr/bin/env bash
# The whole test suite: installs the dependencies (deploy/install-deps.sh,
# idempotent; uses sudo when not root), configures and builds everything
# (-j2), runs every GoogleTest binary through ctest, then runs the local
# federated simulation (deploy/local/run.sh) as an end-to-end smoke test of
# the fedgather and fedgather-server binaries, then validates the deploy
# artefacts offline (deploy/validate.sh: compose, kustomize, schemas).
#
#   tests/run.sh [--build-dir DIR] [--fuzz SECONDS]
#
# --fuzz SECONDS also builds the libFuzzer targets (tests/fuzz) with clang,
# ASan and UBSan in DIR-fuzz (installing clang-14 and libclang-rt-14-dev if
# missing) and runs each for SECONDS from its seed corpus.
#
# The build directory is --build-dir, else $BUILD_DIR, else build (relative
# paths are relative to the directory the script was started from; the
# default is in the repository root). Works from any directory.
# Exit status: 0 when everything passed; 2 on usage errors; else the failing
# step's status.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { echo "usage: tests/run.sh [--build-dir DIR] [--fuzz SECONDS]" >&2; exit "${1:-2}"; }

BUILD_DIR="${BUILD_DIR:-}"
FUZZ_SECONDS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir)
      if [ $# -lt 2 ] || [ -z "$2" ]; then echo "--build-dir needs a value" >&2; usage; fi
      BUILD_DIR="$2"; shift ;;
    --build-dir=*) BUILD_DIR="${1#--build-dir=}" ;;
    --fuzz)
      if [ $# -lt 2 ] || ! [[ "$2" =~ ^[1-9][0-9]*$ ]]; then
        echo "--fuzz needs a positive number of seconds" >&2; usage
      fi
      FUZZ_SECONDS="$2"; shift ;;
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

SECONDS=0
step_start=0
section() {
  echo
  echo "================================================================"
  echo "== $*"
  echo "================================================================"
  step_start=$SECONDS
}
done_in() { echo "-- $1 done in $((SECONDS - step_start)) s"; }
current="setup"
on_exit() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    echo "tests/run.sh: FAILED during: $current (exit $rc, after ${SECONDS} s)" >&2
  fi
}
trap on_exit EXIT

current="installing dependencies"
section "$current"
bash deploy/install-deps.sh
done_in "$current"

current="configuring $BUILD_DIR"
section "$current"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATHER_BUILD_TESTS=ON
done_in "configure"

current="building (-j2)"
section "$current"
cmake --build "$BUILD_DIR" -j2
done_in "build"

current="unit and end-to-end tests (ctest)"
section "$current"
GRPC_VERBOSITY="${GRPC_VERBOSITY:-NONE}" \
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --timeout 600
done_in "ctest"

current="local federated simulation (deploy/local/run.sh)"
section "$current"
bash deploy/local/run.sh --no-build --build-dir "$BUILD_DIR"
done_in "simulation"

if [ -n "$FUZZ_SECONDS" ]; then
  current="fuzzing: ${FUZZ_SECONDS} s per target (tests/fuzz)"
  section "$current"
  fuzz_packages=()
  for p in clang-14 libclang-rt-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      fuzz_packages+=("$p")
  done
  if [ ${#fuzz_packages[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
      "${fuzz_packages[@]}"
  fi
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD_DIR-fuzz" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATHER_FUZZ=ON -DFEDGATHER_BUILD_TESTS=OFF \
    -DFEDGATHER_BUILD_PYTHON=OFF -DFEDGATHER_WITH_NCCL=OFF
  cmake --build "$BUILD_DIR-fuzz" -j2 --target frame_decoder_fuzzer safetensors_fuzzer \
    policy_fuzzer audit_verify_fuzzer
  bash tests/fuzz/run_fuzzers.sh "$FUZZ_SECONDS" "$BUILD_DIR-fuzz"
  done_in "fuzzing"
fi

current="deploy artefacts, offline (deploy/validate.sh)"
section "$current"
bash deploy/validate.sh --build-dir "$BUILD_DIR"
done_in "deploy validation"

echo
echo "tests/run.sh: all passed in ${SECONDS} s (build dir $BUILD_DIR)"

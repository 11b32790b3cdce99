#!/usr/bin/env bash
# The whole test suite: installs the dependencies (deploy/install-deps.sh,
# idempotent; uses sudo when not root), configures and builds everything
# (-j2), runs every GoogleTest binary through ctest, then runs the local
# federated simulation (deploy/local/run.sh) as an end-to-end smoke test of
# the fedgather and fedgather-server binaries, then validates the deploy
# artefacts offline (deploy/validate.sh: compose, kustomize, schemas), then
# runs the compose simulation in a real Docker engine (deploy/compose/run.sh:
# builds both images, trains to the end, checks the containers' hardening;
# about 8 minutes cold, skipped when no engine can run here), and the GPU
# device check's bundle in a bare container (bench/gpu/check_bundle_bare.sh).
#
#   tests/run.sh [--build-dir DIR] [--sanitize address,undefined|thread]
#                [--fuzz SECONDS]
#
# --sanitize address,undefined builds the suite with clang, ASan and UBSan in
# DIR-asan and runs every ctest test there. Sanitizer builds are configured
# with FEDGATHER_WITH_TORCH=OFF, which also shows that the server, the CLI
# and the client core build and pass without LibTorch: the torch adapter, the
# FedAvg example and the Python module (which would need the sanitizer
# runtime preloaded into python3) are tested by the plain build. --sanitize
# thread does the same with TSan in DIR-tsan, against abseil and gRPC built
# with TSan from Debian's source packages (tests/sanitizers/build_tsan_deps.sh,
# about 8 minutes the first time), so that TSan sees their synchronization.
# Either replaces the plain build, simulation and deploy validation; run
# tests/run.sh without it for those.
#
# --fuzz SECONDS also builds the libFuzzer targets (tests/fuzz) with clang,
# ASan and UBSan in DIR-asan and runs each for SECONDS from its seed corpus.
# It cannot be combined with --sanitize thread.
#
# Sanitizer and fuzz builds install clang-14 and libclang-rt-14-dev if
# missing, and are built -O1 -gline-tables-only (fast to build, readable
# stacks).
#
# The build directory is --build-dir, else $BUILD_DIR, else build (relative
# paths are relative to the directory the script was started from; the
# default is in the repository root). Works from any directory.
# Exit status: 0 when everything passed; 2 on usage errors; else the failing
# step's status.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() {
  echo "usage: tests/run.sh [--build-dir DIR] [--sanitize address,undefined|thread] [--fuzz SECONDS]" >&2
  exit "${1:-2}"
}

BUILD_DIR="${BUILD_DIR:-}"
FUZZ_SECONDS=""
SANITIZE=""
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
    --sanitize)
      if [ $# -lt 2 ] || { [ "$2" != "address,undefined" ] && [ "$2" != "thread" ]; }; then
        echo "--sanitize needs address,undefined or thread" >&2; usage
      fi
      SANITIZE="$2"; shift ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
  shift
done
if [ "$SANITIZE" = "thread" ] && [ -n "$FUZZ_SECONDS" ]; then
  echo "--fuzz builds with address,undefined; it cannot be combined with --sanitize thread" >&2
  usage
fi
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

# ensure_clang installs clang-14 and its sanitizer runtimes if missing.
ensure_clang() {
  local packages=()
  for p in clang-14 libclang-rt-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      packages+=("$p")
  done
  if [ ${#packages[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
      "${packages[@]}"
  fi
}

# clang_build DIR SANITIZERS TESTS configures DIR with clang-14 and the
# sanitizers (-DFEDGATHER_SANITIZE), with the fuzz targets when --fuzz was
# given and the test suite when TESTS is ON, and builds it.
clang_build() {
  local dir="$1" sanitizers="$2" tests="$3" fuzz=OFF
  [ -n "$FUZZ_SECONDS" ] && fuzz=ON
  ensure_clang
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DFEDGATHER_SANITIZE="$sanitizers" -DFEDGATHER_FUZZ="$fuzz" \
    -DFEDGATHER_BUILD_TESTS="$tests" -DFEDGATHER_BUILD_PYTHON=OFF \
    -DFEDGATHER_WITH_TORCH=OFF
  cmake --build "$dir" -j2
}

# run_ctest DIR TITLE runs every test of DIR (two at a time; at most 15
# minutes each, for the sanitizer builds).
run_ctest() {
  current="$2"
  section "$current"
  GRPC_VERBOSITY="${GRPC_VERBOSITY:-NONE}" \
    ctest --test-dir "$1" --output-on-failure -j2 --timeout 900
  done_in "$2"
}

# run_fuzzers DIR runs every fuzz target of DIR for FUZZ_SECONDS.
run_fuzzers() {
  current="fuzzing: ${FUZZ_SECONDS} s per target (tests/fuzz)"
  section "$current"
  bash tests/fuzz/run_fuzzers.sh "$FUZZ_SECONDS" "$1"
  done_in "fuzzing"
}

if [ -n "$SANITIZE" ]; then
  if [ "$SANITIZE" = "thread" ]; then
    SAN_DIR="$BUILD_DIR-tsan"
    current="abseil and gRPC with TSan (tests/sanitizers/build_tsan_deps.sh)"
    section "$current"
    ensure_clang
    bash tests/sanitizers/build_tsan_deps.sh "$SAN_DIR/tsan-deps"
    done_in "abseil and gRPC with TSan"
    # Every process of the suite (tests, the server, the CLI) loads them.
    export LD_LIBRARY_PATH="$SAN_DIR/tsan-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # ignore_noninstrumented_modules: what Debian's uninstrumented
    # libraries (OpenSSL, protobuf, torch) do through TSan's interceptors
    # is not checked; everything of ours, gRPC's and abseil's is. tsan.supp
    # holds one entry, for gRPC's executor threads at exit (docs/testing.md).
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$ROOT/tests/sanitizers/tsan.supp"
  else
    SAN_DIR="$BUILD_DIR-asan"
    export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:strict_string_checks=1"
    # print_suppressions=0: when an lsan.supp entry matches, LSan would print
    # its "Suppressions used" table on stderr at exit, which is the server's
    # log; tests that parse that log (one JSON object a line) then fail in
    # the runs where OpenSSL's per-thread state was still alive at exit.
    export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  fi
  current="building $SAN_DIR with $SANITIZE (clang, -j2)"
  section "$current"
  clang_build "$SAN_DIR" "$SANITIZE" ON
  done_in "sanitizer build"

  run_ctest "$SAN_DIR" "the suite under $SANITIZE (ctest)"

  [ -n "$FUZZ_SECONDS" ] && run_fuzzers "$SAN_DIR"
  echo
  echo "tests/run.sh: all passed under $SANITIZE in ${SECONDS} s (build dir $SAN_DIR)"
  exit 0
fi

current="configuring $BUILD_DIR"
section "$current"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATHER_BUILD_TESTS=ON
done_in "configure"

current="building (-j2)"
section "$current"
cmake --build "$BUILD_DIR" -j2
done_in "build"

run_ctest "$BUILD_DIR" "unit and end-to-end tests (ctest)"

current="local federated simulation (deploy/local/run.sh)"
section "$current"
bash deploy/local/run.sh --no-build --build-dir "$BUILD_DIR"
done_in "simulation"

if [ -n "$FUZZ_SECONDS" ]; then
  current="building the fuzz targets in $BUILD_DIR-asan (clang, ASan, UBSan)"
  section "$current"
  clang_build "$BUILD_DIR-asan" address,undefined OFF
  done_in "fuzz build"
  run_fuzzers "$BUILD_DIR-asan"
fi

current="deploy artefacts, offline (deploy/validate.sh)"
section "$current"
bash deploy/validate.sh --build-dir "$BUILD_DIR"
done_in "deploy validation"

# The compose simulation as a user runs it, in a real Docker engine (it
# installs and starts one when it can, and skips, saying why, when no engine
# can run here).
current="the compose simulation in Docker (deploy/compose/run.sh)"
section "$current"
compose_rc=0
# About 8 minutes cold (debootstrap, two image builds), 1 warm; 30 at most.
timeout -k 120 1800 bash deploy/compose/run.sh || compose_rc=$?
if [ "$compose_rc" = 77 ]; then
  echo "-- SKIPPED: no Docker engine can run on this machine (see above)"
elif [ "$compose_rc" = 124 ]; then
  echo "deploy/compose/run.sh did not finish within 30 minutes" >&2
  exit 1
elif [ "$compose_rc" != 0 ]; then
  exit "$compose_rc"
fi
done_in "compose simulation"

# The GPU device check's bundle, from this build, in a bare container with no
# GPU (bench/gpu/check_bundle_bare.sh): every library it needs travels with
# it, and everything before the first GPU call passes. Only where NCCL was
# built (CUDA and NCCL in /usr/local/cuda) and an engine can run.
current="the GPU bundle in a bare container (bench/gpu/check_bundle_bare.sh)"
section "$current"
if [ ! -x "$BUILD_DIR/tests/client/nccl/client_nccl_gpu_test" ]; then
  echo "-- SKIPPED: this build has no NCCL hand-off (no CUDA and NCCL in /usr/local/cuda)"
else
  bash bench/gpu/bundle.sh --build-dir "$BUILD_DIR" --out "$BUILD_DIR/gpu-bundle"
  bundle_rc=0
  timeout -k 60 600 bash bench/gpu/check_bundle_bare.sh "$BUILD_DIR/gpu-bundle" || bundle_rc=$?
  if [ "$bundle_rc" = 77 ]; then
    echo "-- SKIPPED: no Docker engine can run on this machine (see above)"
  elif [ "$bundle_rc" = 124 ]; then
    echo "bench/gpu/check_bundle_bare.sh did not finish within 10 minutes" >&2
    exit 1
  elif [ "$bundle_rc" != 0 ]; then
    exit "$bundle_rc"
  fi
fi
done_in "GPU bundle"

echo
echo "tests/run.sh: all passed in ${SECONDS} s (build dir $BUILD_DIR)"

#!/usr/bin/env bash
# bench/gpu/device_check.sh: the GPU check of the on-node hand-off
# (docs/gpu.md), for a machine with NVIDIA GPUs, the CUDA toolkit and NCCL.
# It builds fedgather with FEDGATHER_WITH_NCCL=ON (only the targets it needs),
# runs the ctest tests labelled `gpu` and fails if any of them skipped (they
# skip only when the CUDA runtime sees no device), runs the other
# client/nccl tests, then measures H2D, D2H and ncclAllGather bandwidth with
# bench/gpu/nccl_bandwidth (1, 16 and 256 MiB per GPU).
#
#   bench/gpu/device_check.sh [--build-dir DIR] [--out DIR]
#
# Build directory: --build-dir, else $BUILD_DIR, else build-gpu in the
# repository root. The logs and nccl_bandwidth.csv go to --out, else $OUT,
# else DIR/device_check. Installs the Debian packages (deploy/install-deps.sh)
# only when cmake, ninja or gRPC's headers are missing. Sized to finish in
# under 8 minutes on one H200 with the packages installed: each step has its
# own timeout. Exit status: 0 when everything passed; else the failing step's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-}"
OUT_DIR="${OUT:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift ;;
    --out) OUT_DIR="$2"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
OUT_DIR="${OUT_DIR:-$BUILD_DIR/device_check}"
mkdir -p "$OUT_DIR"
cd "$ROOT"

SECONDS=0
step() { echo; echo "== $* (at ${SECONDS} s)"; }

step "GPUs"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id \
    --format=csv | tee "$OUT_DIR/gpus.csv"
else
  echo "nvidia-smi not found; the CUDA runtime will say what it sees"
fi

if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null ||
   [ ! -e /usr/include/grpcpp/grpcpp.h ]; then
  step "installing dependencies"
  timeout 300 bash deploy/install-deps.sh
fi

step "configure (FEDGATHER_WITH_NCCL=ON)"
timeout 120 cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFEDGATHER_BUILD_TESTS=ON -DFEDGATHER_BUILD_PYTHON=OFF -DFEDGATHER_WITH_NCCL=ON \
  > "$OUT_DIR/configure.log" 2>&1 || { tail -30 "$OUT_DIR/configure.log"; exit 1; }
grep "NCCL hand-off" "$OUT_DIR/configure.log"

step "build"
timeout 300 cmake --build "$BUILD_DIR" -j"$(nproc)" --target \
  client_nccl_gpu_test client_nccl_status_test client_group_nccl_test \
  client_hierarchical_all_gather_test client_cpu_local_collective_test \
  nccl_bandwidth > "$OUT_DIR/build.log" 2>&1 || { tail -40 "$OUT_DIR/build.log"; exit 1; }

step "ctest -L gpu"
GRPC_VERBOSITY=NONE timeout 240 ctest --test-dir "$BUILD_DIR" -L gpu \
  --output-on-failure --timeout 180 2>&1 | tee "$OUT_DIR/gpu_tests.log"
status=${PIPESTATUS[0]}
if [ "$status" != 0 ]; then echo "gpu tests FAILED" >&2; exit "$status"; fi
if ! grep -q "tests passed" "$OUT_DIR/gpu_tests.log" ||
   grep -q "Skipped" "$OUT_DIR/gpu_tests.log"; then
  echo "gpu tests did not run (skipped: no CUDA device visible?)" >&2
  exit 1
fi

step "the other client/nccl tests"
GRPC_VERBOSITY=NONE timeout 240 ctest --test-dir "$BUILD_DIR" -LE gpu \
  -R 'CpuLocalCollective|HierarchicalTest|HierarchicalErrorTest|ShareFromRankZero|JoinGpus|NcclStatus|ShareNcclUniqueId' \
  -j"$(nproc)" --output-on-failure --timeout 180 2>&1 | tail -5 | tee "$OUT_DIR/cpu_tests.log"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "client/nccl tests FAILED" >&2; exit 1; }

step "bandwidth (bench/gpu/nccl_bandwidth)"
timeout 120 "$BUILD_DIR/bench/gpu/nccl_bandwidth" 256 | tee "$OUT_DIR/nccl_bandwidth.csv"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1

echo
echo "device_check: PASS in ${SECONDS} s; results in $OUT_DIR"

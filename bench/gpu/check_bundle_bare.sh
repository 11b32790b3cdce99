#!/usr/bin/env bash
# bench/gpu/check_bundle_bare.sh: runs a GPU bundle (bench/gpu/bundle.sh)
# here, in a container that stands for the bare GPU machine, so that a missing
# library or path shows up here and not in the device's 15 minutes.
#
#   bench/gpu/check_bundle_bare.sh [BUNDLE]     (default: bench/gpu/bundle)
#
# The container is Debian 12 minbase plus python3 (the device has a Python),
# with none of the libraries or -dev packages the build used. NCCL and the
# CUDA runtime (libnccl.so.2 and libcudart.so.13, from $NCCL_ROOT/lib where
# NCCL_ROOT is set, /usr/local/cuda/lib or /usr/local/cuda/lib64; exit 1
# before anything starts where one is in none of them) are copied into the
# layout the device's Python environment has
# (site-packages/nvidia/{nccl,cuda_runtime}/lib), and there is no driver
# (libcuda.so.1): that stands in for the GPU, as the CUDA runtime then finds
# no device. run_bundle.sh must get that far: every library found, every test
# that needs no GPU passed, then exit 3 at the first call into the GPU, saying
# that no GPU was found.
#
# Exit status: 0 when it did, 1 otherwise, 77 (skipped, saying why) when no
# Docker engine can run here (deploy/docker/engine.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="$(cd "${1:-$ROOT/bench/gpu/bundle}" && pwd)"
[ -f "$BUNDLE/run_bundle.sh" ] || {
  echo "no bundle in $BUNDLE: run bench/gpu/bundle.sh first" >&2; exit 1; }
IMAGE=fedgather/bare-gpu-check:local

# NCCL and the CUDA runtime the build used, found before anything starts: $NCCL_ROOT/lib (where the build looks
# first when it is set), then /usr/local/cuda.
LIB_DIRS=(/usr/local/cuda/lib /usr/local/cuda/lib64)
if [ -n "${NCCL_ROOT:-}" ]; then LIB_DIRS=("$NCCL_ROOT/lib" "${LIB_DIRS[@]}"); fi
# find_lib NAME: the path of NAME in the first of LIB_DIRS that has it; exits 1 when none has.
find_lib() {
  local dir
  for dir in "${LIB_DIRS[@]}"; do
    if [ -e "$dir/$1" ]; then echo "$dir/$1"; return 0; fi
  done
  echo "FAIL: no $1 in ${LIB_DIRS[*]} (set NCCL_ROOT to where NCCL is installed)" >&2
  exit 1
}
NCCL_LIB="$(find_lib libnccl.so.2)"
CUDART_LIB="$(find_lib libcudart.so.13)"

# shellcheck source=deploy/docker/engine.sh
. "$ROOT/deploy/docker/engine.sh"

WORK="$(mktemp -d /tmp/fedgather-bare-gpu.XXXXXX)"
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() { engine_stop; rm -rf "$WORK"; }
trap cleanup EXIT

echo "== a Docker engine and Debian 12 minbase"
# shellcheck disable=SC2119  # no packages besides the engine's
engine_install
engine_start
engine_base_images

echo "== $IMAGE: minbase and python3, nothing else"
"$DOCKER" build -q -t "$IMAGE" - >/dev/null <<'EOF'
FROM debian:12
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*
EOF
python_version="$("$DOCKER" run --rm --network none "$IMAGE" python3 -c \
  'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"

echo "== NCCL and the CUDA runtime where the device's Python keeps them; no driver"
stub="$WORK/nvidia"
mkdir -p "$stub/nccl/lib" "$stub/cuda_runtime/lib" "$WORK/out"
cp -L "$NCCL_LIB" "$stub/nccl/lib/"
cp -L "$CUDART_LIB" "$stub/cuda_runtime/lib/"
site_packages="/usr/local/lib/python$python_version/dist-packages"

echo "== run_bundle.sh in the container"
rc=0
"$DOCKER" run --rm --network none \
  -v "$BUNDLE:/bundle:ro" -v "$stub:$site_packages/nvidia:ro" -v "$WORK/out:/out" -e OUT=/out \
  "$IMAGE" bash /bundle/run_bundle.sh || rc=$?
# This run's logs only (.dockerignore keeps them out of the compose build's context).
rm -rf "$ROOT/bench/gpu/bundle-bare-out"
mkdir -p "$ROOT/bench/gpu/bundle-bare-out"
cp -r "$WORK/out/." "$ROOT/bench/gpu/bundle-bare-out/"

echo
if [ "$rc" = 3 ] && grep -q '^run_bundle: [0-9]* tests passed, 0 failures' "$WORK/out/summary.txt" &&
   grep -q '^NO GPU: no GPU was found: no CUDA device' "$WORK/out/summary.txt"; then
  echo "PASS: the bundle ran in a bare container up to the first GPU call, where it found no GPU"
  echo "(its logs: bench/gpu/bundle-bare-out/)"
  exit 0
fi
echo "FAIL: run_bundle.sh exited $rc; want 3 (no GPU) with no failure before it. Its summary:"
cat "$WORK/out/summary.txt" 2>/dev/null || echo "(none)"
exit 1

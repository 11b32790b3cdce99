#!/usr/bin/env bash
# bench/gpu/bundle.sh: packs what the GPU device check runs into one folder
# that travels to a bare, offline GPU machine (the `device` tool's carry,
# 64 MiB at most) and runs there with bench/gpu/run_bundle.sh as its single
# command. That machine is not Debian: it has CUDA and NCCL only inside its
# Python environment, and none of our Debian libraries.
#
#   bench/gpu/bundle.sh [--build-dir DIR] [--out DIR]
#
# 1. configures DIR (default: build-gpu in the repository root; `--build-dir
#    build` reuses tests/run.sh's build) with FEDGATHER_WITH_NCCL=ON and
#    builds the client/nccl tests, nccl_bandwidth, fedgather,
#    fedgather-server and the NCCL module fedgather loads for --gpus (a new
#    DIR: RelWithDebInfo, as tests/run.sh, without the Python module; an
#    existing one keeps its settings);
# 2. copies them, stripped, into OUT/bin (default: bench/gpu/bundle, which git
#    ignores), with every shared library they load into OUT/lib except glibc,
#    libstdc++ and libgcc_s (every Linux has them) and the CUDA runtime, NCCL
#    and the driver (the device provides those: run_bundle.sh finds them);
# 3. writes the join check's input (one F32, one F16 and one empty tensor,
#    each [1, ...]: one slice for one GPU), run_bundle.sh, check_outputs.py's
#    reader and a MANIFEST (commit, what is in it, the GLIBC it needs);
# 4. fails if the bundle is 64 MiB or more.
#
# Then, for example: run(command="bash bench/gpu/bundle/run_bundle.sh",
# carry=["bench/gpu/bundle"]). Exit status: 0 on success, 1 otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="$ROOT/build-gpu"
OUT_DIR="$ROOT/bench/gpu/bundle"
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) [ $# -ge 2 ] || { echo "--build-dir needs a value" >&2; exit 1; }; BUILD_DIR="$2"; shift ;;
    --out) [ $# -ge 2 ] || { echo "--out needs a value" >&2; exit 1; }; OUT_DIR="$2"; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 1 ;;
  esac
  shift
done
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac
case "$OUT_DIR" in /*) ;; *) OUT_DIR="$PWD/$OUT_DIR" ;; esac
LIMIT_BYTES=$((64 * 1024 * 1024))

# The binaries, by their place in the build tree. The gtest ones run one test
# at a time on the device (run_bundle.sh), not through ctest, whose files
# name this machine's paths.
TESTS=(
  tests/client/nccl/client_cpu_local_collective_test
  tests/client/nccl/client_hierarchical_all_gather_test
  tests/client/nccl/client_nccl_status_test
  tests/client/nccl/client_group_nccl_test
  tests/client/nccl/client_nccl_gpu_test
)
TOOLS=(bench/gpu/nccl_bandwidth client/fedgather server/fedgather-server)
# Shared objects loaded at run time, by target and file: the NCCL module,
# which fedgather and the tests look for next to themselves, and the tests'
# stand-in for it.
MODULE_TARGETS=(fedgather_nccl fg_test_fake_nccl_module)
MODULES=(client/libfedgather_nccl.so tests/client/nccl/libfg_test_fake_nccl_module.so)

echo "== configure $BUILD_DIR with FEDGATHER_WITH_NCCL=ON"
mkdir -p "$BUILD_DIR"
CONFIGURE_LOG="$BUILD_DIR/bundle-configure.log"
# A build directory that exists keeps its other settings (tests/run.sh's, say).
settings=(-DFEDGATHER_WITH_NCCL=ON)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  settings+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATHER_BUILD_TESTS=ON -DFEDGATHER_BUILD_PYTHON=OFF)
fi
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja "${settings[@]}" >"$CONFIGURE_LOG" 2>&1 || {
  tail -n 20 "$CONFIGURE_LOG" >&2; exit 1; }
grep "NCCL hand-off" "$CONFIGURE_LOG"

echo "== build"
targets=("${MODULE_TARGETS[@]}")
for path in "${TESTS[@]}" "${TOOLS[@]}"; do targets+=("$(basename "$path")"); done
cmake --build "$BUILD_DIR" -j2 --target "${targets[@]}"

echo "== copy into $OUT_DIR"
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/bin" "$OUT_DIR/lib" "$OUT_DIR/data"
for path in "${TESTS[@]}" "${TOOLS[@]}" "${MODULES[@]}"; do
  strip -o "$OUT_DIR/bin/$(basename "$path")" "$BUILD_DIR/$path"
done

# provided NAME: whether the device brings this library itself.
provided() {
  case "$1" in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*) return 0 ;;
    libstdc++.so.*|libgcc_s.so.*) return 0 ;;
    libcudart.so.*|libnccl.so.*|libcuda.so.*|libnvidia-*) return 0 ;;
  esac
  return 1
}
missing=()
for binary in "$OUT_DIR"/bin/*; do
  while read -r name _ resolved _; do
    provided "$name" && continue
    if [ "$resolved" = "not" ] || [ ! -f "$resolved" ]; then missing+=("$(basename "$binary"): $name"); continue; fi
    [ -e "$OUT_DIR/lib/$name" ] || strip -o "$OUT_DIR/lib/$name" "$(readlink -f "$resolved")"
  done < <(ldd "$binary" | grep '=>')
done
if [ ${#missing[@]} -gt 0 ]; then
  printf 'bundle: not found here: %s\n' "${missing[@]}" >&2
  exit 1
fi

echo "== the join check's input, the runner, the manifest"
PYTHONPATH="$ROOT/deploy/local" python3 - "$OUT_DIR/data/join_input.safetensors" <<'EOF'
# One slice per GPU for `fedgather join --gpus 1`: every tensor is [1, ...].
import random
import sys

from make_inputs import write_safetensors

rng = random.Random(23)
write_safetensors(sys.argv[1], [
    ("weight", "F32", [1, 262147], rng.randbytes(4 * 262147)),  # odd-sized, about 1 MiB
    ("bias", "F16", [1, 7], rng.randbytes(14)),
    ("empty", "U8", [1, 0], b""),
])
EOF
cp "$ROOT/deploy/local/check_outputs.py" "$OUT_DIR/data/"
cp "$ROOT/bench/gpu/run_bundle.sh" "$OUT_DIR/run_bundle.sh"
glibc="$(for f in "$OUT_DIR"/bin/* "$OUT_DIR"/lib/*; do objdump -T "$f"; done 2>/dev/null |
  grep -o 'GLIBC_[0-9.]*' | sort -t. -k2,2n -k3,3n -u | tail -n 1)"
{
  echo "fedgather GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) by bench/gpu/bundle.sh"
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built with: $(grep -o 'NCCL hand-off: .*' "$CONFIGURE_LOG" | head -n 1)"
  echo "needs glibc with $glibc, libstdc++, libgcc_s, libcudart.so.13, libnccl.so.2 and a driver (libcuda.so.1)"
  echo "bin: $(cd "$OUT_DIR/bin" && echo *)"
  echo "lib: $(find "$OUT_DIR/lib" -type f | wc -l) libraries, $(du -sh "$OUT_DIR/lib" | cut -f1)"
} >"$OUT_DIR/MANIFEST"
cat "$OUT_DIR/MANIFEST"

bytes=$(du -sb "$OUT_DIR" | cut -f1)
echo "== $OUT_DIR: $((bytes / 1024 / 1024)) MiB ($bytes bytes)"
if [ "$bytes" -ge "$LIMIT_BYTES" ]; then
  echo "bundle: $bytes bytes is over the device's 64 MiB carry limit" >&2
  exit 1
fi

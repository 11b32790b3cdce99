#!/usr/bin/env bash
# bench/gpu/run_bundle.sh: the GPU device check, run from a bundle that
# bench/gpu/bundle.sh made, as the single command of a device call:
#
#   run(command="bash bench/gpu/bundle/run_bundle.sh", carry=["bench/gpu/bundle"])
#
# The device is bare and offline: nothing is installed or fetched. In about
# 2 minutes (5 at most: every test has 60 s, the whole script 270 s) it
#   1. records the machine (MANIFEST, glibc, nvidia-smi);
#   2. checks that fedgather starts without NCCL and the CUDA runtime (it
#      loads them through its NCCL module for join --gpus only), and that
#      join --gpus then names the missing library;
#   3. finds NCCL (libnccl.so.2) and the CUDA runtime (libcudart.so.13), which
#      such a machine has only inside its Python environment
#      (site-packages/nvidia/*/lib), and puts them and the bundle's lib/ on
#      LD_LIBRARY_PATH; then checks that every binary's libraries resolve;
#   4. runs the client/nccl tests that need no GPU, each test on its own;
#   5. asks the CUDA runtime for a device (client_nccl_gpu_test's first
#      test): with none it stops there, exit 3, saying that no GPU was found
#      and why;
#   6. runs every GPU test on its own with NCCL_DEBUG=WARN; a skip is a
#      failure unless it is one a GPU machine is meant to see (the checks of
#      what happens without a GPU, or a test that needs more GPUs than there
#      are);
#   7. runs `fedgather join --gpus 1` against a local fedgather-server over
#      mutual TLS (certificates from the bundle's own `fedgather provision`)
#      and checks the output byte for byte against the input (join itself
#      reads every GPU's copy back and compares it);
#   8. measures H2D, D2H and ncclAllGather bandwidth (nccl_bandwidth 256).
# Everything goes under $OUT (else the bundle's out/): run_bundle.log, one log
# per test in tests/, nccl_bandwidth.csv, summary.txt.
# Exit status: 0 when everything passed, 1 when something failed, 3 when no
# GPU was found (everything before the first GPU call passed).
set -uo pipefail

# The whole check is bounded: past 270 s, timeout sends SIGTERM to its process
# group, all of it (the test running, the server) and the trap below still
# writes the summary. For that, everything stays in that group (each test's
# and tool's timeout is --foreground, which keeps it there; without it the
# test would run on in a group of its own and the trap wait for it), and the
# tee that keeps the log ignores SIGTERM, so that the trap's output still has
# somewhere to go (tee ends when this script does).
if [ -z "${RUN_BUNDLE_TIMED:-}" ]; then
  RUN_BUNDLE_TIMED=1 exec timeout -k 15 270 bash "${BASH_SOURCE[0]}" "$@"
fi
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-$BUNDLE/out}"
mkdir -p "$OUT/tests"
exec > >(trap '' TERM; exec tee "$OUT/run_bundle.log") 2>&1
TEST_TIMEOUT=60
export GRPC_VERBOSITY=NONE NCCL_DEBUG=WARN

SECONDS=0
FAILURES=()
PASSED=0
step() { echo; echo "== $* (at ${SECONDS} s)"; }
fail() { FAILURES+=("$*"); echo "FAIL: $*"; }
# finish STATUS: the summary, then exit.
finish() {
  {
    echo "run_bundle: $PASSED tests passed, ${#FAILURES[@]} failures, in ${SECONDS} s"
    if [ ${#FAILURES[@]} -gt 0 ]; then printf 'FAIL: %s\n' "${FAILURES[@]}"; fi
    if [ -n "${NO_GPU:-}" ]; then echo "NO GPU: $NO_GPU"; fi
  } | tee "$OUT/summary.txt"
  exit "$1"
}
trap '[ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null; true' EXIT
trap 'fail "stopped: 270 s are over"; finish 1' TERM

step "the machine"
cat "$BUNDLE/MANIFEST"
echo "host: $(uname -srm); $(ldd --version 2>&1 | head -n 1)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$OUT/gpus.csv"
else
  echo "nvidia-smi: not on PATH"
fi

step "fedgather starts without NCCL and the CUDA runtime"
# It loads them (through its NCCL module) only for join --gpus: with neither
# on the library path it must start, and --gpus must name what is missing.
rc=0
LD_LIBRARY_PATH="$BUNDLE/lib" "$BUNDLE/bin/fedgather" --help >/dev/null 2>"$OUT/fedgather_help.err" || rc=$?
if [ "$rc" = 0 ]; then PASSED=$((PASSED + 1)); echo "   ok    fedgather --help"; else
  fail "fedgather --help without NCCL on the library path: exit $rc: $(head -n 3 "$OUT/fedgather_help.err")"; fi
if ldconfig -p 2>/dev/null | grep -qE 'libnccl\.so\.2|libcudart\.so\.13'; then
  echo "   (the system's library path has NCCL or the CUDA runtime: join --gpus without them is not checked here)"
else
  missing="$(LD_LIBRARY_PATH="$BUNDLE/lib" "$BUNDLE/bin/fedgather" join --server 127.0.0.1:1 --tls-dir /nonexistent \
    --group demo --world-size 1 --gpus 1 --input /nonexistent --output /nonexistent 2>&1)"
  echo "   $missing"
  if grep -q 'does not load: lib\(nccl\.so\.2\|cudart\.so\.13\): cannot open shared object file' <<<"$missing"; then
    PASSED=$((PASSED + 1)); echo "   ok    fedgather join --gpus 1 names the missing library"
  else
    fail "fedgather join --gpus 1 without NCCL: want the module's missing library named, got: $missing"
  fi
fi

step "NCCL and the CUDA runtime"
# find_library PATTERN: the first file matching PATTERN in the places a
# Python environment, a CUDA install or the system keep libraries, then
# anywhere on this file system (60 s at most).
find_library() {
  local pattern="$1" roots=() found
  if command -v python3 >/dev/null; then
    while IFS= read -r dir; do roots+=("$dir/nvidia"); done < <(python3 -c \
      'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' \
      2>/dev/null)
  fi
  roots+=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /opt /usr/local)
  for root in "${roots[@]}"; do
    [ -d "$root" ] || continue
    found="$(find "$root" -maxdepth 4 -name "$pattern" \( -type f -o -type l \) 2>/dev/null | head -n 1)"
    if [ -n "$found" ]; then echo "$found"; return; fi
  done
  timeout --foreground -k 5 60 find / -xdev -name "$pattern" \( -type f -o -type l \) 2>/dev/null | head -n 1
}
NCCL_LIB="$(find_library 'libnccl.so.2*')"
CUDART_LIB="$(find_library 'libcudart.so.13*')"
echo "libnccl:   ${NCCL_LIB:-not found}"
echo "libcudart: ${CUDART_LIB:-not found}"
if [ -z "$NCCL_LIB" ] || [ -z "$CUDART_LIB" ]; then
  fail "NCCL or the CUDA runtime is not on this machine (looked in the Python environment, /usr/local/cuda, /usr/lib, /opt, then everywhere)"
  finish 1
fi
LD_LIBRARY_PATH="$BUNDLE/lib:$(dirname "$NCCL_LIB"):$(dirname "$CUDART_LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

step "every binary's libraries resolve"
unresolved=0
for binary in "$BUNDLE"/bin/*; do
  if ldd "$binary" | grep -q 'not found'; then
    fail "$(basename "$binary") cannot load: $(ldd "$binary" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
    unresolved=1
  fi
done
[ "$unresolved" = 0 ] || finish 1
echo "all resolve"

# list_tests BINARY: sets TESTS to its test names, Suite.Test, one a line.
# When --gtest_list_tests fails or lists none, that is a failure (status 1):
# a binary that cannot list its tests must not pass with 0 of them.
list_tests() {
  local listing rc=0 err
  err="$OUT/tests/$(basename "$1").list.err"
  listing="$(timeout --foreground -k 5 "$TEST_TIMEOUT" "$1" --gtest_list_tests 2>"$err")" || rc=$?
  TESTS="$(awk '
    /^[^ ]/ { suite = $1; next }
    /^  /   { print suite $1 }' <<<"$listing")"
  if [ "$rc" != 0 ]; then
    fail "$(basename "$1") --gtest_list_tests: exit $rc: $(head -n 3 "$err")"
    return 1
  fi
  if [ -z "$TESTS" ]; then fail "$(basename "$1") --gtest_list_tests lists no tests"; return 1; fi
}
# SKIP_OK: the skips a GPU machine is meant to see.
SKIP_OK='CUDA device\(s\) present|this machine has CUDA devices|needs [0-9]+ (or more )?GPUs|needs ≥ ?[0-9]+ GPUs'
# run_test BINARY NAME: one test, on its own, with its own timeout and log.
# Sets LAST_SKIP to the skip message when it skipped.
run_test() {
  local binary="$1" name="$2" log rc
  log="$OUT/tests/$(basename "$binary").${name//\//_}.log"
  LAST_SKIP=""
  rc=0
  timeout --foreground -k 5 "$TEST_TIMEOUT" "$binary" --gtest_filter="$name" >"$log" 2>&1 || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    fail "$name: still running after ${TEST_TIMEOUT} s (log: tests/$(basename "$log"))"
    return
  fi
  if [ "$rc" != 0 ]; then
    fail "$name: exit $rc"; grep -E 'Failure|error|Expected|Which is|Value of' "$log" | head -n 8 | sed 's/^/      /'
    return
  fi
  if grep -q '^\[  SKIPPED \]' "$log"; then
    LAST_SKIP="$(grep -A1 'Skipped$' "$log" | tail -n 1)"
    echo "   skip  $name: $LAST_SKIP"
    return
  fi
  PASSED=$((PASSED + 1))
  echo "   ok    $name"
}
# run_binary BINARY: every test of BINARY; a skip fails unless SKIP_OK says it may happen.
run_binary() {
  local binary="$BUNDLE/bin/$1" name
  list_tests "$binary" || return 0
  while IFS= read -r name; do
    run_test "$binary" "$name"
    if [ -n "$LAST_SKIP" ] && ! grep -qE "$SKIP_OK" <<<"$LAST_SKIP"; then
      fail "$name skipped: $LAST_SKIP"
    fi
  done <<<"$TESTS"
}

step "the client/nccl tests that need no GPU"
for binary in client_cpu_local_collective_test client_group_nccl_test client_nccl_status_test \
              client_hierarchical_all_gather_test; do
  run_binary "$binary"
done

step "a GPU (the CUDA runtime, through client_nccl_gpu_test's first test)"
GPU_TEST="$BUNDLE/bin/client_nccl_gpu_test"
list_tests "$GPU_TEST" || finish 1
GPU_TESTS="$TESTS"
first="$(head -n 1 <<<"$GPU_TESTS")"
run_test "$GPU_TEST" "$first"
if [[ "$LAST_SKIP" == "no CUDA device"* ]]; then
  NO_GPU="no GPU was found: $LAST_SKIP"
  echo "$NO_GPU"
  [ ${#FAILURES[@]} -eq 0 ] && finish 3
  finish 1
fi

step "the GPU tests (NCCL_DEBUG=WARN)"
while IFS= read -r name; do
  [ "$name" = "$first" ] && continue
  run_test "$GPU_TEST" "$name"
  if [ -n "$LAST_SKIP" ] && ! grep -qE "$SKIP_OK" <<<"$LAST_SKIP"; then fail "$name skipped: $LAST_SKIP"; fi
done <<<"$GPU_TESTS"

step "fedgather join --gpus 1 against a local server, over mutual TLS"
WORK="$(mktemp -d)"
"$BUNDLE/bin/fedgather" provision --out "$WORK/pki" --participants site-0 --admins ops >"$OUT/provision.log" 2>&1 ||
  fail "fedgather provision: $(tail -n 3 "$OUT/provision.log")"
"$BUNDLE/bin/fedgather-server" --listen 127.0.0.1:0 --port-file "$WORK/port" \
  --cert "$WORK/pki/server/cert.pem" --key "$WORK/pki/server/key.pem" --client-ca "$WORK/pki/server/ca.pem" \
  --policy "$WORK/pki/policy.yaml" --log-format text >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.1; done
if [ ! -s "$WORK/port" ]; then
  fail "fedgather-server did not start: $(tail -n 3 "$OUT/server.log")"
else
  rc=0
  timeout --foreground -k 5 90 "$BUNDLE/bin/fedgather" join --server "127.0.0.1:$(cat "$WORK/port")" \
    --tls-dir "$WORK/pki/site-0" --group demo --world-size 1 --gpus 1 --timeout 60 \
    --input "$BUNDLE/data/join_input.safetensors" --output "$OUT/join_output.safetensors" \
    >"$OUT/join.log" 2>&1 || rc=$?
  cat "$OUT/join.log"
  if [ "$rc" != 0 ]; then
    fail "fedgather join --gpus 1: exit $rc"
  elif ! command -v python3 >/dev/null; then
    fail "no python3 to compare the join's output with its input"
  elif PYTHONPATH="$BUNDLE/data" python3 - "$BUNDLE/data/join_input.safetensors" \
         "$OUT/join_output.safetensors" <<'EOF'
# One node, one GPU: the output holds each input tensor, same dtype and shape, byte for byte.
import sys

from check_outputs import read

inputs, _ = read(sys.argv[1])
outputs, metadata = read(sys.argv[2])
problems = [f"{name}: {outputs.get(name, ('missing',))[:2]} != {tensor[:2]} or other bytes"
            for name, tensor in inputs.items() if outputs.get(name) != tensor]
if set(outputs) != set(inputs):
    problems.append(f"tensors {sorted(outputs)}, want {sorted(inputs)}")
if metadata.get("fedgather.gpus") != "1":
    problems.append(f"metadata fedgather.gpus is {metadata.get('fedgather.gpus')!r}, want '1'")
print("\n".join(problems) or f"the output matches the input byte for byte ({len(inputs)} tensors)")
sys.exit(1 if problems else 0)
EOF
  then
    PASSED=$((PASSED + 1))
  else
    fail "fedgather join --gpus 1: the output is not the input"
  fi
fi
kill "$SERVER_PID" 2>/dev/null
wait "$SERVER_PID" 2>/dev/null
SERVER_PID=""
rm -rf "$WORK"

step "bandwidth (nccl_bandwidth 256)"
rc=0
timeout --foreground -k 5 90 "$BUNDLE/bin/nccl_bandwidth" 256 >"$OUT/nccl_bandwidth.csv" 2>"$OUT/nccl_bandwidth.err" || rc=$?
cat "$OUT/nccl_bandwidth.csv"
if [ "$rc" = 0 ]; then PASSED=$((PASSED + 1)); else fail "nccl_bandwidth: exit $rc: $(tail -n 3 "$OUT/nccl_bandwidth.err")"; fi

[ ${#FAILURES[@]} -eq 0 ] && finish 0
finish 1

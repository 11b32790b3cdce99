#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz for SECONDS each, starting from
# its committed seed corpus (tests/fuzz/corpus/<target>/), in a fuzz build
# (clang, -DFEDGATHER_FUZZ=ON; tests/run.sh --fuzz SECONDS makes one).
#
#   tests/fuzz/run_fuzzers.sh SECONDS BUILD_DIR
#
# New inputs go to a scratch copy of each corpus; a crash, leak, sanitizer
# report or timeout (10 s per input) fails the run and leaves the input in
# $OUT (default /tmp/fedgather-fuzz). Prints each target's executions.
set -euo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 SECONDS BUILD_DIR" >&2; exit 2; fi
SECONDS_EACH="$1"
BUILD_DIR="$2"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/fedgather-fuzz}"
mkdir -p "$OUT"
status=0
for target in frame_decoder safetensors policy audit_verify collective_protocol; do
  fuzzer="$BUILD_DIR/tests/fuzz/${target}_fuzzer"
  corpus="$OUT/corpus-$target"
  rm -rf "$corpus" && mkdir -p "$corpus"
  cp "$ROOT/tests/fuzz/corpus/$target/"* "$corpus/"
  log="$OUT/$target.log"
  if "$fuzzer" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$OUT/$target-" -print_final_stats=1 "$corpus" >"$log" 2>&1; then
    execs="$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')"
    echo "fuzz $target: ok, ${execs:-?} executions in ${SECONDS_EACH} s"
  else
    echo "fuzz $target: FAILED; log $log, input $OUT/$target-*" >&2
    grep -m5 -E "ERROR|SUMMARY|runtime error" "$log" >&2 || tail -n 20 "$log" >&2
    status=1
  fi
done
exit $status

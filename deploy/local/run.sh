#!/usr/bin/env bash
# The local federated simulation, on one machine, no docker: provisions a CA
# and certificates, starts fedgather-server on 127.0.0.1 (a free port), and
# runs N participants (default 4) as concurrent `fedgather join` processes
# over mutual TLS, under the access policy `fedgather provision` writes and
# with a signed audit log. Every participant offers a peer endpoint on
# 127.0.0.1, so with the policy's default (data_plane: auto) the bytes go
# peer to peer on the direct plane; each join's summary and the report name
# the plane that ran. An observer reads the status, an admin reloads the
# policy (the observer is refused), SIGHUP reloads it again. Then the same
# participants train a digits classifier together, federated averaging over
# the same server (examples/fedavg_digits: each site a `fedavg_site` process
# with a non-IID shard, all_reduce and all_gather averages checked against
# each other every round), and the per-round test accuracy table is printed.
# After the server stops, `fedgather audit verify` checks the audit chain.
# Every participant's all_gather output is then checked byte for byte
# against every participant's input (deploy/local/check_outputs.py). The
# last line of output is "final test accuracy: 0.xxx".
#
#   deploy/local/run.sh [--no-build] [--build-dir DIR] [--participants N]
#                       [--mib M] [--rounds R] [--keep]
#
#   --no-build        skip installing dependencies and building; use the
#                     binaries already in the build directory
#   --build-dir DIR   build directory (default: build, in the repository root)
#   --participants N  number of sites site-1..site-N (default 4)
#   --mib M           size of each participant's "weight" tensor (default 4)
#   --rounds R        FedAvg rounds of the digits simulation (default 30; the
#                     final accuracy must reach 0.90; with more than 10
#                     participants the digits phase is skipped)
#   --keep            keep the work directory (certificates, inputs, outputs,
#                     logs) instead of deleting it
#
# Environment: FEDGATHER_SEED (the inputs' random seed; printed, so a run can
# be repeated), FEDGATHER_JOIN_TIMEOUT (seconds each join may take, default
# 120).
# Exit status: 0 when every participant passed and the federated model
# reached 0.90 test accuracy, 1 otherwise, 2 on usage errors.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() {
  cat >&2 <<'EOF'
usage: deploy/local/run.sh [--no-build] [--build-dir DIR] [--participants N] [--mib M] [--rounds R] [--keep]
  --no-build        skip installing dependencies and building
  --build-dir DIR   build directory (default: build in the repository root)
  --participants N  number of sites site-1..site-N (default 4)
  --mib M           MiB of each participant's "weight" tensor (default 4)
  --rounds R        FedAvg rounds of the digits simulation (default 30)
  --keep            keep the work directory instead of deleting it
EOF
  exit "${1:-2}"
}
need_value() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then echo "$1 needs a value" >&2; usage; fi
}

BUILD_DIR="$ROOT/build"
BUILD=1
PARTICIPANTS=4
MIB=4
ROUNDS=30
MIN_ACCURACY=0.90
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) BUILD=0 ;;
    --build-dir) need_value "$@"; BUILD_DIR="$2"; shift ;;
    --participants) need_value "$@"; PARTICIPANTS="$2"; shift ;;
    --mib) need_value "$@"; MIB="$2"; shift ;;
    --rounds) need_value "$@"; ROUNDS="$2"; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
  shift
done
[[ "$PARTICIPANTS" =~ ^[1-9][0-9]*$ ]] || { echo "--participants must be a positive integer" >&2; exit 2; }
[[ "$MIB" =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "--mib must be a positive number" >&2; exit 2; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "--rounds must be a positive integer" >&2; exit 2; }
# A relative build directory is relative to where the script was started.
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac
SEED="${FEDGATHER_SEED:-$RANDOM}"
JOIN_TIMEOUT="${FEDGATHER_JOIN_TIMEOUT:-120}"
[[ "$SEED" =~ ^[0-9]{1,9}$ ]] || { echo "FEDGATHER_SEED must be a non-negative integer" >&2; exit 2; }
[[ "$JOIN_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || { echo "FEDGATHER_JOIN_TIMEOUT must be a positive integer" >&2; exit 2; }

if [ "$BUILD" = 1 ]; then
  echo "== installing dependencies"
  bash "$ROOT/deploy/install-deps.sh"
  echo "== configuring and building fedgather, fedgather-server and fedavg_site in $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFEDGATHER_WITH_TORCH=ON >/dev/null
  cmake --build "$BUILD_DIR" -j2 --target fedgather fedgather-server fedavg_site
fi
CLI="$BUILD_DIR/client/fedgather"
SERVER="$BUILD_DIR/server/fedgather-server"
FEDAVG="$BUILD_DIR/examples/fedavg_digits/fedavg_site"
DIGITS="$ROOT/examples/fedavg_digits/data/digits.csv.gz"
for binary in "$CLI" "$SERVER" "$FEDAVG"; do
  [ -x "$binary" ] || { echo "missing $binary: build first (run without --no-build)" >&2; exit 1; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/fedgather-sim.XXXXXX")"
SERVER_PID=""
JOIN_PIDS=()
# Stops whatever is still running (TERM, then KILL after 5 s) and removes the
# work directory. Runs on every exit: success, failure, CTRL-C, kill.
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local pids=("${JOIN_PIDS[@]}")
  if [ -n "$SERVER_PID" ]; then pids+=("$SERVER_PID"); fi
  if [ ${#pids[@]} -gt 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "${pids[@]}" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  # With --keep the path was printed at the start, so that the last line of
  # output stays the final accuracy.
  if [ "$KEEP" != 1 ]; then rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT
trap 'echo "terminated" >&2; exit 143' TERM

if [ "$KEEP" = 1 ]; then echo "== work directory (kept): $WORK"; fi

NAMES=()
for i in $(seq 1 "$PARTICIPANTS"); do NAMES+=("site-$i"); done
LIST="$(IFS=,; echo "${NAMES[*]}")"

echo "== provisioning a CA, a server certificate and $PARTICIPANTS participant certificates"
"$CLI" provision --out "$WORK/pki" --server-names localhost,127.0.0.1 --participants "$LIST" --group demo \
  --observers dashboard --admins ops
echo "   participants: $LIST (identities spiffe://fedgather/site-N), group demo"
echo "   observer: dashboard, admin: ops; access policy: $WORK/pki/policy.yaml"

echo "== starting fedgather-server on 127.0.0.1 (free port)"
"$SERVER" --listen 127.0.0.1:0 --port-file "$WORK/port" \
  --cert "$WORK/pki/server/cert.pem" --key "$WORK/pki/server/key.pem" \
  --client-ca "$WORK/pki/ca.pem" --policy "$WORK/pki/policy.yaml" \
  --audit-log "$WORK/audit.jsonl" --state-dir "$WORK/state" \
  --round-timeout "$JOIN_TIMEOUT" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PORT=""
for _ in $(seq 1 200); do  # at most ~20 s
  if [ -s "$WORK/port" ]; then
    PORT="$(tr -d '[:space:]' <"$WORK/port")"
    [[ "$PORT" =~ ^[0-9]+$ ]] && break
    PORT=""
  fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    rc=0; wait "$SERVER_PID" || rc=$?
    SERVER_PID=""
    echo "FAIL: fedgather-server exited with status $rc before listening:" >&2
    tail -n 20 "$WORK/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$PORT" ]; then
  echo "FAIL: fedgather-server wrote no port file within 20 s; log tail:" >&2
  tail -n 20 "$WORK/server.log" >&2
  exit 1
fi
echo "   listening on 127.0.0.1:$PORT (pid $SERVER_PID)"

echo "== writing random inputs (FEDGATHER_SEED=$SEED repeats them)"
for i in "${!NAMES[@]}"; do
  python3 "$ROOT/deploy/local/make_inputs.py" "$WORK/${NAMES[$i]}.in.safetensors" "$((SEED * 1000 + i + 1))" "$MIB"
done

echo "== $PARTICIPANTS participants join group 'demo' and all_gather (timeout ${JOIN_TIMEOUT} s each)"
start_ms=$(( $(date +%s%N) / 1000000 ))
for name in "${NAMES[@]}"; do
  timeout -k 5 "$((JOIN_TIMEOUT + 30))" \
    "$CLI" join --server "127.0.0.1:$PORT" --tls-dir "$WORK/pki/$name" --group demo \
    --world-size "$PARTICIPANTS" --input "$WORK/$name.in.safetensors" \
    --output "$WORK/$name.out.safetensors" --timeout "$JOIN_TIMEOUT" \
    --peer-listen 127.0.0.1:0 \
    >"$WORK/$name.stdout" 2>"$WORK/$name.stderr" &
  JOIN_PIDS+=($!)
done
JOIN_RC=()
for i in "${!NAMES[@]}"; do
  rc=0; wait "${JOIN_PIDS[$i]}" || rc=$?
  JOIN_RC+=("$rc")
done
JOIN_PIDS=()
elapsed_ms=$(( $(date +%s%N) / 1000000 - start_ms ))
printf '   all joins finished in %d.%03d s\n' $((elapsed_ms / 1000)) $((elapsed_ms % 1000))

echo "== admin checks: status as the observer, a policy reload by the admin and by SIGHUP"
ADMIN_FAILED=0
if "$CLI" status --server "127.0.0.1:$PORT" --tls-dir "$WORK/pki/dashboard" --group demo \
    >"$WORK/status.txt" 2>&1 && grep -q "your role: observer" "$WORK/status.txt"; then
  sed 's/^/   /' "$WORK/status.txt"
else
  echo "FAIL: fedgather status as the observer:"; sed 's/^/   /' "$WORK/status.txt"
  ADMIN_FAILED=1
fi
if ! "$CLI" policy reload --server "127.0.0.1:$PORT" --tls-dir "$WORK/pki/ops" | sed 's/^/   /'; then
  echo "FAIL: fedgather policy reload as the admin"; ADMIN_FAILED=1
fi
if "$CLI" policy reload --server "127.0.0.1:$PORT" --tls-dir "$WORK/pki/dashboard" \
    >"$WORK/denied.txt" 2>&1 || ! grep -q PERMISSION_DENIED "$WORK/denied.txt"; then
  echo "FAIL: the observer was not refused a policy reload:"; cat "$WORK/denied.txt"
  ADMIN_FAILED=1
else
  echo "   the observer's reload was refused: $(cat "$WORK/denied.txt")"
fi
kill -HUP "$SERVER_PID"
for _ in $(seq 1 100); do  # at most ~10 s
  grep -q "SIGHUP: policy reloaded" "$WORK/server.log" && break
  sleep 0.1
done
if grep -q "SIGHUP: policy reloaded" "$WORK/server.log"; then
  echo "   SIGHUP: policy reloaded"
else
  echo "FAIL: no policy reload after SIGHUP"; ADMIN_FAILED=1
fi

FEDAVG_FAILED=0
FINAL_LINE=""
PLANE_LINE=""  # the training's data plane (every site offers a peer endpoint)
if [ "$PARTICIPANTS" -gt 10 ]; then
  echo "== federated digits training skipped: the label split needs 1..10 participants"
else
  echo "== $PARTICIPANTS participants train a digits classifier together: FedAvg, $ROUNDS rounds"
  echo "   (examples/fedavg_digits; non-IID shards; all_reduce and all_gather averages checked every round)"
  start_ms=$(( $(date +%s%N) / 1000000 ))
  for name in "${NAMES[@]}"; do
    OMP_NUM_THREADS=1 timeout -k 5 "$((JOIN_TIMEOUT + 30))" \
      "$FEDAVG" --server "127.0.0.1:$PORT" --tls-dir "$WORK/pki/$name" --group demo \
      --world-size "$PARTICIPANTS" --data "$DIGITS" --rounds "$ROUNDS" --aggregate both \
      --min-accuracy "$MIN_ACCURACY" --timeout "$JOIN_TIMEOUT" \
      --peer-listen 127.0.0.1:0 \
      >"$WORK/$name.fedavg.stdout" 2>"$WORK/$name.fedavg.stderr" &
    JOIN_PIDS+=($!)
  done
  FEDAVG_RC=()
  for i in "${!NAMES[@]}"; do
    rc=0; wait "${JOIN_PIDS[$i]}" || rc=$?
    FEDAVG_RC+=("$rc")
  done
  JOIN_PIDS=()
  elapsed_ms=$(( $(date +%s%N) / 1000000 - start_ms ))
  # Rank 0 prints the setup and the table; every site ends with its accuracy.
  LEADER=""
  for name in "${NAMES[@]}"; do
    if head -n 1 "$WORK/$name.fedavg.stdout" | grep -q '^fedavg_digits:'; then LEADER="$name"; fi
  done
  if [ -n "$LEADER" ]; then
    grep -v '^final test accuracy:' "$WORK/$LEADER.fedavg.stdout" | sed 's/^/   /' || true
    FINAL_LINE="$(grep '^final test accuracy:' "$WORK/$LEADER.fedavg.stdout" | tail -n 1 || true)"
    PLANE_LINE="$(grep '^data plane:' "$WORK/$LEADER.fedavg.stdout" | tail -n 1 || true)"
  fi
  printf '   all %d sites finished in %d.%03d s\n' "$PARTICIPANTS" $((elapsed_ms / 1000)) $((elapsed_ms % 1000))
  for i in "${!NAMES[@]}"; do
    name="${NAMES[$i]}"; rc="${FEDAVG_RC[$i]}"
    theirs="$(grep '^final test accuracy:' "$WORK/$name.fedavg.stdout" | tail -n 1 || true)"
    if [ "$rc" != 0 ]; then
      echo "FAIL: fedavg_site $name exited $rc"
      tail -n 5 "$WORK/$name.fedavg.stderr" | sed 's/^/   stderr: /' || true
      FEDAVG_FAILED=1
    elif [ -z "$FINAL_LINE" ] || [ "$theirs" != "$FINAL_LINE" ]; then
      echo "FAIL: fedavg_site $name reports '$theirs', rank 0 '$FINAL_LINE'"
      FEDAVG_FAILED=1
    fi
  done
  if [ -n "$FINAL_LINE" ]; then
    ACCURACY="${FINAL_LINE#final test accuracy: }"
    if ! awk -v a="$ACCURACY" -v m="$MIN_ACCURACY" 'BEGIN { exit !(a + 0 >= m + 0) }'; then
      echo "FAIL: final test accuracy $ACCURACY is below $MIN_ACCURACY"
      FEDAVG_FAILED=1
    fi
  else
    echo "FAIL: no site reported a final test accuracy"
    FEDAVG_FAILED=1
  fi
fi

echo "== stopping fedgather-server (SIGTERM)"
SERVER_RC=0
kill -TERM "$SERVER_PID" 2>/dev/null || true
for _ in $(seq 1 100); do  # at most ~10 s
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$SERVER_PID" 2>/dev/null; then
  echo "   fedgather-server did not stop within 10 s of SIGTERM; killing it"
  kill -KILL "$SERVER_PID" 2>/dev/null || true
fi
wait "$SERVER_PID" || SERVER_RC=$?
SERVER_PID=""
echo "   fedgather-server exited with status $SERVER_RC"

echo "== verifying the audit log's hash chain and signatures"
AUDIT_RC=0
"$CLI" audit verify --cert "$WORK/pki/server/cert.pem" "$WORK/audit.jsonl" >"$WORK/audit.txt" 2>&1 || AUDIT_RC=$?
sed 's/^/   /' "$WORK/audit.txt"

echo "== checking every output byte for byte"
CHECK_RC=0
python3 "$ROOT/deploy/local/check_outputs.py" --group demo "$WORK" "${NAMES[@]}" >"$WORK/check.txt" 2>&1 || CHECK_RC=$?

echo
echo "== report"
echo "participants: $PARTICIPANTS ($LIST), server 127.0.0.1:$PORT, seed $SEED"
grep -v -e '^PASS ' -e '^FAIL ' "$WORK/check.txt" | sed 's/^/  /' || true
FAILED=0
for i in "${!NAMES[@]}"; do
  name="${NAMES[$i]}"; rc="${JOIN_RC[$i]}"
  case "$rc" in
    0) echo "$name: join exit 0" ;;
    124|137) echo "$name: join exit $rc (killed after $((JOIN_TIMEOUT + 30)) s)" ;;
    *) echo "$name: join exit $rc" ;;
  esac
  summary="$(tail -n 1 "$WORK/$name.stdout")"
  if [ -n "$summary" ]; then echo "  summary: $summary"; fi
  if [ "$rc" != 0 ] && [ -s "$WORK/$name.stderr" ]; then
    tail -n 5 "$WORK/$name.stderr" | sed 's/^/  stderr: /'
  fi
  verdict="$(grep -e "^PASS $name:" -e "^FAIL $name:" "$WORK/check.txt" || true)"
  if [ -z "$verdict" ]; then verdict="FAIL $name: no check result"; fi
  if [ "$rc" != 0 ] && [[ "$verdict" == PASS* ]]; then
    verdict="FAIL $name: join exited $rc although its output checks out"
  fi
  if [[ "$verdict" != PASS* ]]; then FAILED=$((FAILED + 1)); fi
  echo "  $verdict"
done
if grep -q '^FAIL:' "$WORK/check.txt"; then
  grep '^FAIL:' "$WORK/check.txt"
  FAILED=$((FAILED + 1))
fi
[ "$CHECK_RC" = 0 ] || [ "$FAILED" -gt 0 ] || FAILED=1
if [ "$AUDIT_RC" != 0 ]; then
  echo "FAIL: fedgather audit verify exited $AUDIT_RC"
  FAILED=$((FAILED + 1))
fi
FAILED=$((FAILED + ADMIN_FAILED + FEDAVG_FAILED))
if [ "$SERVER_RC" != 0 ]; then
  echo "FAIL: fedgather-server exited $SERVER_RC on SIGTERM (want 0)"
  FAILED=$((FAILED + 1))
fi

echo
if [ "$FAILED" = 0 ]; then
  echo "PASS: $PARTICIPANTS participants gathered every contribution over mutual TLS and trained together; the audit chain verifies"
  if [ -n "$PLANE_LINE" ]; then echo "training's $PLANE_LINE"; fi
  if [ -n "$FINAL_LINE" ]; then echo "$FINAL_LINE"; fi
  exit 0
fi
if [ "$KEEP" = 1 ]; then
  echo "FAIL: see above; fedgather-server log tail ($WORK/server.log):"
else
  echo "FAIL: see above (--keep keeps the logs and files); fedgather-server log tail:"
fi
tail -n 30 "$WORK/server.log" | sed 's/^/  /'
if [ -n "$FINAL_LINE" ]; then echo "$FINAL_LINE"; fi
exit 1

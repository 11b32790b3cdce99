#!/usr/bin/env bash
# The local federated simulation: provisions a CA and certificates, starts
# fedgather-server on 127.0.0.1, and runs N participants (default 4) as
# separate `fedgather join` processes over mutual TLS. Every participant's
# output is checked byte for byte against every other participant's input.
#
#   deploy/local/run.sh [--no-build] [--build-dir DIR] [--participants N] [--mib M]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="$ROOT/build"
BUILD=1
PARTICIPANTS=4
MIB=4
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) BUILD=0 ;;
    --build-dir) BUILD_DIR="$(cd "$2" 2>/dev/null && pwd || echo "$2")"; shift ;;
    --participants) PARTICIPANTS="$2"; shift ;;
    --mib) MIB="$2"; shift ;;
    *) echo "usage: $0 [--no-build] [--build-dir DIR] [--participants N] [--mib M]" >&2; exit 2 ;;
  esac
  shift
done

if [ "$BUILD" = 1 ]; then
  echo "== installing dependencies"
  bash "$ROOT/deploy/install-deps.sh"
  echo "== building in $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATHER_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD_DIR" -j2 --target fedgather fedgather-server
fi
CLI="$BUILD_DIR/client/fedgather"
SERVER="$BUILD_DIR/server/fedgather-server"
for binary in "$CLI" "$SERVER"; do
  [ -x "$binary" ] || { echo "missing $binary: build first (drop --no-build)" >&2; exit 1; }
done

WORK="$(mktemp -d -t fedgather-sim-XXXXXX)"
SERVER_PID=""
JOIN_PIDS=()
cleanup() {
  for pid in "${JOIN_PIDS[@]}" $SERVER_PID; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

NAMES=()
for i in $(seq 1 "$PARTICIPANTS"); do NAMES+=("site-$i"); done
LIST="$(IFS=,; echo "${NAMES[*]}")"

echo "== provisioning a CA and certificates for $LIST"
"$CLI" provision --out "$WORK/pki" --server-names localhost,127.0.0.1 --participants "$LIST"

echo "== starting fedgather-server"
"$SERVER" --listen 127.0.0.1:0 --port-file "$WORK/port" \
  --cert "$WORK/pki/server/cert.pem" --key "$WORK/pki/server/key.pem" \
  --client-ca "$WORK/pki/ca.pem" --groups "$WORK/pki/groups.yaml" \
  --round-timeout 120 2>"$WORK/server.log" &
SERVER_PID=$!
for _ in $(seq 1 200); do
  [ -s "$WORK/port" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "server exited:"; cat "$WORK/server.log"; exit 1; }
  sleep 0.1
done
[ -s "$WORK/port" ] || { echo "server did not report its port"; cat "$WORK/server.log"; exit 1; }
PORT="$(cat "$WORK/port")"
echo "   listening on 127.0.0.1:$PORT"

echo "== ${PARTICIPANTS} participants join group 'demo' and all_gather ~${MIB} MiB each"
for i in "${!NAMES[@]}"; do
  python3 "$ROOT/deploy/local/make_inputs.py" "$WORK/${NAMES[$i]}.in.safetensors" "$((i + 1))" "$MIB"
done
for name in "${NAMES[@]}"; do
  "$CLI" join --server "127.0.0.1:$PORT" --tls-dir "$WORK/pki/$name" --group demo \
    --world-size "$PARTICIPANTS" --input "$WORK/$name.in.safetensors" \
    --output "$WORK/$name.out.safetensors" --timeout 120 >"$WORK/$name.log" 2>&1 &
  JOIN_PIDS+=($!)
done
FAILED=0
for i in "${!NAMES[@]}"; do
  if ! wait "${JOIN_PIDS[$i]}"; then FAILED=1; fi
done
JOIN_PIDS=()

echo
echo "== report"
for name in "${NAMES[@]}"; do echo "   $name: $(tail -n 1 "$WORK/$name.log")"; done
CHECK=0
python3 "$ROOT/deploy/local/check_outputs.py" "$WORK" "${NAMES[@]}" >"$WORK/check.txt" || CHECK=1
sed 's/^/   /' "$WORK/check.txt"
if [ "$FAILED" = 0 ] && [ "$CHECK" = 0 ]; then
  echo "PASS: $PARTICIPANTS participants gathered every contribution over mutual TLS"
  exit 0
fi
echo "FAIL: see above; server log tail:"
tail -n 20 "$WORK/server.log"
exit 1

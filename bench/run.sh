#!/usr/bin/env bash
# bench/run.sh: fedgather's all_gather and all_reduce, over mutual TLS and in
# the plaintext comparison mode, side by side with Gloo (torch.distributed)
# and MPI (OpenMPI over TCP and shared memory) in one run of the peers'
# harness (../shared/bench/peers/run_all.sh), then two fedgather-only runs:
# the server's peak RSS at N=8 x 256 MiB, and how the time grows with N at
# 1 MiB up to N=64. Writes the results section at the top of
# bench/RESULTS.md (the other sections are kept).
#
#   bench/run.sh            # installs what is missing (apt-get), builds, runs
#
# Environment knobs (defaults in brackets):
#   BUILD_DIR [build-bench]   build tree (relative to the repository root)
#   PEERS_DIR [../shared/bench/peers]  the peers' harness
#   OUT [/tmp/fedgather-bench/<timestamp>]  raw outputs of this run
#   REPS [3]  NPROCS [4]  SIZES [4096,1048576,16777216,67108864]   side by side
#   RSS_N [8]  RSS_SIZE [268435456]       peak-RSS run (all_gather, TLS)
#   SCALE_NS ["2 4 8 16 32 64"]  SCALE_SIZE [1048576]   growth with N
#   SKIP_INSTALL SKIP_BUILD SKIP_PEERS SKIP_RSS SKIP_SCALE SKIP_LIMITS [0]
#   RESULTS [bench/RESULTS.md]  where the section goes (empty: nowhere)
# Takes about 25 minutes on the 2-core machine of bench/RESULTS.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${BUILD_DIR:-build-bench}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
PEERS_DIR="${PEERS_DIR:-$ROOT/../shared/bench/peers}"
OUT="${OUT:-/tmp/fedgather-bench/$(date +%Y%m%d-%H%M%S)}"
REPS="${REPS:-3}"
NPROCS="${NPROCS:-4}"
SIZES="${SIZES:-4096,1048576,16777216,67108864}"
RSS_N="${RSS_N:-8}"
RSS_SIZE="${RSS_SIZE:-268435456}"
SCALE_NS="${SCALE_NS:-2 4 8 16 32 64}"
SCALE_SIZE="${SCALE_SIZE:-1048576}"
RESULTS="${RESULTS-$ROOT/bench/RESULTS.md}"
PY=/usr/bin/python3  # Debian's python, which has torch (the peers need it)

log() { echo "[$(date +%T)] bench/run.sh: $*" >&2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# ---- dependencies -------------------------------------------------------------
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  log "dependencies"
  bash deploy/install-deps.sh
  # What the peers' harness needs besides (see its README.md).
  PEER_PACKAGES=(python3-torch openmpi-bin libopenmpi-dev iperf3 procps iproute2
                 bsdextrautils)
  missing=()
  for p in "${PEER_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi
if [ ! -x "$PEERS_DIR/run_all.sh" ]; then
  echo "bench/run.sh: no peers harness at $PEERS_DIR (set PEERS_DIR)" >&2
  exit 2
fi

# ---- build --------------------------------------------------------------------
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "building $BUILD_DIR"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFEDGATHER_BUILD_PYTHON=OFF > "$OUT/cmake.log"
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target allgather_bench fedgather-server
fi
BENCH="$BUILD_DIR/bench/allgather_bench"

# ---- side by side: Gloo, MPI, fedgather (TLS, plaintext) -----------------------
# One launch runs the fedgather modes (impl fedgather_tls, fedgather_plain,
# then fedgather_tls_direct: every op over the ring of mutual-TLS peer
# links, the server keeping the control frames); the peers' harness rotates it into
# its order like the others and times out each command after T_CMD seconds.
status=0
if [ "${SKIP_PEERS:-0}" != 1 ]; then
  log "side by side: N=$NPROCS, sizes $SIZES, $REPS reps -> $OUT/peers"
  EXTRA_CMD="$BENCH --np {N} --sizes {SIZES} --timeout-s 850; a=\$?; "
  EXTRA_CMD+="$BENCH --insecure --np {N} --sizes {SIZES} --timeout-s 850; b=\$?; "
  EXTRA_CMD+="$BENCH --data-plane direct --np {N} --sizes {SIZES} --timeout-s 850; c=\$?; "
  EXTRA_CMD+="[ \$a = 0 ] && [ \$b = 0 ] && [ \$c = 0 ]"
  PEERS_WORK="$OUT/peers-work" REPS="$REPS" NPROCS="$NPROCS" SIZES="$SIZES" \
    T_CMD=900 SKIP_LIMITS="${SKIP_LIMITS:-0}" \
    EXTRA_IMPL=fedgather EXTRA_CMD="$EXTRA_CMD" \
    "$PEERS_DIR/run_all.sh" "$OUT/peers" || status=$?
  [ $status = 0 ] || log "the side-by-side run reported failures (exit $status); see $OUT/peers/run.log"
fi

# ---- server peak RSS at N=RSS_N, S=RSS_SIZE -----------------------------------
# The ranks' outputs share one tmpfs mapping (--shared-output: N private
# N*S outputs would not fit in this machine's memory); the server is
# unchanged. One warm-up and one timed iteration: this run measures memory.
if [ "${SKIP_RSS:-0}" != 1 ]; then
  log "server peak RSS: N=$RSS_N, S=$RSS_SIZE -> $OUT/rss.txt"
  "$BENCH" --np "$RSS_N" --sizes "$RSS_SIZE" --ops all_gather --shared-output \
    --warmup 1 --min-iters 1 --target-s 0 --timeout-s 1800 > "$OUT/rss.txt" ||
    { status=1; log "the RSS run failed; see $OUT/rss.txt"; }
fi

# ---- growth with N at SCALE_SIZE ----------------------------------------------
# Both planes, with the server's default flags first. When that fails (on 2
# cores, N=64 can starve a member's heartbeat past the default 5 s timeout),
# once more with a 60 s heartbeat timeout, reported under impl
# fedgather_tls[_direct]_hb60.
if [ "${SKIP_SCALE:-0}" != 1 ]; then
  log "growth with N: N in $SCALE_NS, S=$SCALE_SIZE, relay and direct -> $OUT/scale.txt"
  : > "$OUT/scale.txt"
  for plane in relay direct; do
    for n in $SCALE_NS; do
      impl=fedgather_tls
      [ "$plane" = direct ] && impl=fedgather_tls_direct
      "$BENCH" --np "$n" --sizes "$SCALE_SIZE" --ops all_gather --data-plane "$plane" \
        --timeout-s 1800 >> "$OUT/scale.txt" 2>> "$OUT/scale.err" && continue
      log "N=$n ($plane) failed with the default server flags; again with --heartbeat-timeout=60"
      "$BENCH" --np "$n" --sizes "$SCALE_SIZE" --ops all_gather --data-plane "$plane" \
        --timeout-s 1800 --impl-name "${impl}_hb60" --server-arg=--heartbeat-timeout=60 \
        --server-arg=--heartbeat-interval=5 >> "$OUT/scale.txt" 2>> "$OUT/scale.err" ||
        { status=1; log "N=$n ($plane) failed; see $OUT/scale.txt and $OUT/scale.err"; }
    done
  done
fi

# ---- bench/RESULTS.md -----------------------------------------------------------
if [ -n "$RESULTS" ]; then
  log "writing $RESULTS"
  $PY bench/make_results.py --out "$OUT" --results "$RESULTS" --nprocs "$NPROCS" \
    --rerun "bench/run.sh  # REPS=$REPS NPROCS=$NPROCS SIZES=$SIZES"
fi
log "done (exit $status); raw outputs in $OUT"
exit $status

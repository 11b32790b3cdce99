#!/usr/bin/env bash
# bench/net/run.sh: fedgather (relay and direct planes, over mutual TLS),
# Gloo and MPI over TCP on one emulated network (bench/net/netns.sh), each
# op's time given as a fraction of its link bound:
#   all_gather  (N-1)*S / L        all_reduce  2(N-1)/N * S / L
# with L the participants' link rate. Cases, each on a fresh network:
#   link      N ranks, every link at RATE_MBIT (the server's too): IMPLS;
#   fat hub   the same, the server's link N times faster: fedgather only;
#   growth    N in GROWTH_NS at RATE_MBIT: fedgather direct and relay.
# Each (case, impl, op) is one launch with the peers' method
# (../shared/bench/peers/README.md), and its machine CPU use (/proc/stat,
# 1.0 = every core busy) is recorded beside it.
#
#   bench/net/run.sh                 # needs root; about 15 minutes
#   SMOKE=1 bench/net/run.sh         # 2 ranks, 1 MiB, fedgather only (the suite's check)
#
# Environment knobs (defaults in brackets):
#   RATE_MBIT [200]  N [8]  SIZE [16777216]  GROWTH_NS ["2 4"]
#   IMPLS ["fedgather_tls_direct fedgather_tls gloo mpi_tcp"]
#   OPS [all_gather,all_reduce]  MIN_ITERS [5]  TARGET_S [0.5]  T_CMD [900]
#   NET_QUEUE_MS [5]  each shaped direction's queue, in ms of its rate
#   SKIP_FAT_HUB SKIP_GROWTH [0]
#   BUILD_DIR [build]  PEERS_DIR [../shared/bench/peers]
#   OUT [/tmp/fedgather-net/<timestamp>]  RESULTS [bench/RESULTS.md] (empty: nowhere)
# Exit status: 0 when every launch gave its lines, 1 otherwise, 77 when
# this machine cannot make the network (not root, no iproute2, no netns).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=bench/net/netns.sh
source "$HERE/netns.sh"

SMOKE="${SMOKE:-0}"
if [ "$SMOKE" = 1 ]; then
  : "${N:=2}" "${SIZE:=1048576}" "${RATE_MBIT:=1000}" "${GROWTH_NS:=}"
  : "${IMPLS:=fedgather_tls_direct fedgather_tls}" "${MIN_ITERS:=2}"
  : "${SKIP_FAT_HUB:=1}" "${RESULTS:=}" "${T_CMD:=120}"
fi
RATE_MBIT="${RATE_MBIT:-200}"
N="${N:-8}"
SIZE="${SIZE:-16777216}"
GROWTH_NS="${GROWTH_NS-2 4}"
IMPLS="${IMPLS:-fedgather_tls_direct fedgather_tls gloo mpi_tcp}"
OPS="${OPS:-all_gather,all_reduce}"
MIN_ITERS="${MIN_ITERS:-5}"
TARGET_S="${TARGET_S:-0.5}"
T_CMD="${T_CMD:-900}"
BUILD_DIR="${BUILD_DIR:-build}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
PEERS_DIR="${PEERS_DIR:-$ROOT/../shared/bench/peers}"
OUT="${OUT:-/tmp/fedgather-net/$(date +%Y%m%d-%H%M%S)}"
RESULTS="${RESULTS-$ROOT/bench/RESULTS.md}"
PY=/usr/bin/python3  # Debian's python, which has torch (Gloo needs it)
BENCH="$BUILD_DIR/bench/allgather_bench"
export NET_PREFIX="fgnet$$"  # one network per run: runs can overlap

log() { echo "[$(date +%T)] bench/net: $*" >&2; }
skip() { echo "bench/net: skipped: $*" >&2; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root (ip netns, tc)"
{ command -v ip && command -v tc; } > /dev/null || skip "needs iproute2 (ip, tc)"
ip netns add "$NET_PREFIX-probe" 2> /dev/null || skip "cannot make a network namespace here"
probe_ok=1
{ ip -n "$NET_PREFIX-probe" link add name probe0 type veth peer name probe1 &&
    tc -n "$NET_PREFIX-probe" qdisc add dev probe0 root handle 1: htb &&
    tc -n "$NET_PREFIX-probe" qdisc add dev probe1 root bfifo limit 1000; } 2> /dev/null || probe_ok=0
ip netns del "$NET_PREFIX-probe"
[ "$probe_ok" = 1 ] || skip "this kernel cannot make veth pairs or shape them (htb, bfifo)"
[ -x "$BENCH" ] || { echo "bench/net: no $BENCH (build it first)" >&2; exit 2; }

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
RAW="$OUT/raw.csv"
echo "case,rate_mbit,hub_mbit,cpu_busy,impl,op,N,bytes_per_rank,median_s,algbw_GBps,busbw_GBps,min_s,p90_s,mean_s,iters" > "$RAW"
trap 'net_down "$NET_PREFIX"' EXIT

if [[ " $IMPLS " == *" mpi_tcp "* ]]; then
  mpicc -O2 -o "$OUT/mpi_allgather" "$PEERS_DIR/mpi_allgather.c" -lm
fi

# cpu_ticks prints busy and total jiffies of all cores (/proc/stat).
cpu_ticks() {
  awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat
}

# impl_cmd IMPL N SIZE OP: the launch of one implementation on the network.
impl_cmd() {
  local impl=$1 n=$2 size=$3 op=$4 r hosts=()
  for ((r = 0; r < n; r++)); do hosts+=("$(net_host "$r")"); done
  local host_list
  host_list=$(IFS=,; echo "${hosts[*]}")
  local method=(--sizes "$size" --ops "$op" --min-iters "$MIN_ITERS" --target-s "$TARGET_S")
  case $impl in
    fedgather_tls | fedgather_tls_direct | fedgather_tls_hb60)
      local plane=relay server_args=()
      [ "$impl" = fedgather_tls_direct ] && plane=direct
      [ "$impl" = fedgather_tls_hb60 ] &&
        server_args=(--server-arg=--heartbeat-timeout=60 --server-arg=--heartbeat-interval=5)
      "$BENCH" --np "$n" "${method[@]}" --data-plane "$plane" --timeout-s "$T_CMD" \
        --impl-name "$impl" "${server_args[@]}" \
        --server-host "$NET_SERVER_HOST" --rank-hosts "$host_list" \
        --server-wrap "ip netns exec $NET_PREFIX-s" \
        --rank-wrap "ip netns exec $NET_PREFIX-{rank}" ;;
    gloo)
      NET_RANK0_HOST="${hosts[0]}" PEERS_DIR="$PEERS_DIR" \
        "$PY" "$HERE/gloo_in_netns.py" --nprocs "$n" "${method[@]}" --timeout-s "$T_CMD" ;;
    mpi_tcp)  # mpirun in the server's namespace, one rank per participant's
      ip netns exec "$NET_PREFIX-s" mpirun --allow-run-as-root --oversubscribe \
        --mca pml ob1 --mca rtc ^hwloc --mca plm_rsh_agent "$HERE/netns_rsh.sh" \
        --mca oob_tcp_if_include "$NET_SUBNET.0/24" \
        --mca btl tcp,self --mca btl_tcp_if_include "$NET_SUBNET.0/24" \
        -H "$host_list" -np "$n" "$OUT/mpi_allgather" --impl mpi_tcp "${method[@]}" ;;
    *) echo "#ERROR unknown impl $impl" ;;
  esac
}

failures=0
# launch CASE N SIZE HUB_MBIT IMPL OP: one launch on the network that is up;
# its line goes to raw.csv. Returns 1 when it gave no result line.
launch() {
  local label=$1 n=$2 size=$3 hub=$4 impl=$5 op=$6
  log "$label: $impl $op N=$n S=$size, links $RATE_MBIT Mbit/s, server $hub Mbit/s"
  local before after busy line out="$OUT/$label-$impl-$op-$n" started=$SECONDS
  before=$(cpu_ticks)
  timeout -k 10 "$T_CMD" bash -c "$(declare -f impl_cmd net_host); \
    $(declare -p BENCH PY HERE OUT PEERS_DIR MIN_ITERS TARGET_S T_CMD NET_SUBNET NET_SERVER_HOST NET_PREFIX); \
    impl_cmd $impl $n $size $op" > "$out.out" 2> "$out.err" || true
  after=$(cpu_ticks)
  cat "$out.err" >> "$OUT/run.log"
  busy=$(echo "$before $after" | awk '{printf "%.2f", ($3 - $1) / ($4 - $2)}')
  line=$(grep -E "^[a-z0-9_]+,$op,$n,$size," "$out.out" | head -1 || true)
  if [ -z "$line" ]; then
    log "  FAILED (no result line; see $out.out and $out.err)"
    # What the launch said, for the report: its first error line.
    echo "$label,$impl,$op,$n,$(cat "$out.err" "$out.out" |
      grep -m1 -E 'UNAVAILABLE|DEADLINE|ERROR|rror' | cut -c1-300)" >> "$OUT/failed.csv"
    return 1
  fi
  echo "$label,$RATE_MBIT,$hub,$busy,$line" >> "$RAW"
  log "  $(echo "$line" | cut -d, -f5) s median, CPU $busy busy, $((SECONDS - started)) s"
}

# run_case CASE N SIZE HUB_MBIT IMPL...: every impl and op on a fresh
# network. A relay launch that fails with the server's default flags is
# run again with a 60 s heartbeat timeout (impl fedgather_tls_hb60): on
# equal links the relay's server link is the bottleneck, and a member whose
# TCP flow gets nothing through it for 5 s loses the op; the report shows
# both.
run_case() {
  local label=$1 n=$2 size=$3 hub=$4
  shift 4
  net_down "$NET_PREFIX"
  net_up "$NET_PREFIX" "$n" "$RATE_MBIT" "$hub" || { log "cannot make the network"; exit 1; }
  local impl op
  for impl in "$@"; do
    for op in ${OPS//,/ }; do
      launch "$label" "$n" "$size" "$hub" "$impl" "$op" && continue
      if [ "$impl" = fedgather_tls ]; then
        log "  again with --heartbeat-timeout 60"
        launch "$label" "$n" "$size" "$hub" fedgather_tls_hb60 "$op" && continue
      fi
      failures=$((failures + 1))
    done
  done
}

log "network $NET_PREFIX, results in $OUT"
if iperf_path=$(command -v iperf3); then  # what TCP itself gets of one link
  net_up "$NET_PREFIX" 2 "$RATE_MBIT" "$RATE_MBIT"
  ip netns exec "$NET_PREFIX-1" "$iperf_path" -s -1 -D
  sleep 0.5
  ip netns exec "$NET_PREFIX-0" "$iperf_path" -c "$(net_host 1)" -t 3 -J > "$OUT/iperf3.json" || true
  net_down "$NET_PREFIX"
fi
read -r -a impls <<< "$IMPLS"
run_case link "$N" "$SIZE" "$RATE_MBIT" "${impls[@]}"
if [ "${SKIP_FAT_HUB:-0}" != 1 ]; then
  run_case fat_hub "$N" "$SIZE" $((N * RATE_MBIT)) fedgather_tls_direct fedgather_tls
fi
if [ "${SKIP_GROWTH:-0}" != 1 ]; then
  for n in $GROWTH_NS; do
    run_case growth "$n" "$SIZE" "$RATE_MBIT" fedgather_tls_direct fedgather_tls
  done
fi

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) cpus,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "params: RATE_MBIT=$RATE_MBIT N=$N SIZE=$SIZE GROWTH_NS='$GROWTH_NS' IMPLS='$IMPLS' OPS=$OPS MIN_ITERS=$MIN_ITERS TARGET_S=$TARGET_S NET_QUEUE_MS=$NET_QUEUE_MS"
  echo "tcp: congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
} > "$OUT/env.txt"
"$PY" "$HERE/report.py" --out "$OUT" ${RESULTS:+--results "$RESULTS"}
log "done: $failures failed launches; $OUT/summary.md"
[ "$failures" = 0 ]

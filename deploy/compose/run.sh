#!/usr/bin/env bash
# The docker-compose federated simulation, as a user runs it: the compose
# file beside this script (deploy/compose/docker-compose.yml), as committed,
# in a real Docker engine.
#
#   1. installs Debian's docker.io and docker-compose if missing (as root);
#   2. starts dockerd if none answers, and stops it at the end only if this
#      script started it;
#   3. makes the base images the Dockerfile's FROM lines name (debian:12,
#      debian:12-slim) from Debian's mirror with debootstrap (installed if
#      missing) when they are missing (Docker Hub is not reachable here); they
#      are reused after that;
#   4. builds both images (BuildKit, Debian's docker CLI);
#   5. starts the server (provisioning first), checks the hardening of the
#      running server container and of a container made with a site's exact
#      settings (uid, capabilities, no-new-privileges, seccomp, read-only
#      root, its own certificate volume only), then runs the four sites'
#      FedAvg digits training to the end while it watches the server's health;
#   6. checks each site's exit code and final test accuracy (>= 0.90), that
#      /metrics answers at the Prometheus target deploy/compose/prometheus.yml
#      defines, that the server exits 0 on `docker stop`, and that the audit
#      chain in its volume verifies;
#   7. prints a report with the time each step took, then
#      `docker-compose down -v`.
#
#   deploy/compose/run.sh [--rounds R] [--keep]
#
#   --rounds R  FedAvg rounds (default 30; the final accuracy must reach 0.90)
#   --keep      leave the containers and volumes (no `down -v`)
#
# Environment: FEDGATHER_COMPOSE_PROJECT (the compose project, default
# fedgather-sim), FEDGATHER_DEBIAN_MIRROR (debootstrap's mirror, default
# http://deb.debian.org/debian).
# Exit status: 0 when every check passed, 1 otherwise, 2 on usage errors,
# 77 (skipped, saying why) when no Docker engine can run here: the tools are
# missing and this is not root, dockerd does not come up, or it cannot start
# a container.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
COMPOSE_FILE="$ROOT/deploy/compose/docker-compose.yml"
PROMETHEUS_FILE="$ROOT/deploy/compose/prometheus.yml"
PROJECT="${FEDGATHER_COMPOSE_PROJECT:-fedgather-sim}"
ROUNDS=30
KEEP=0
MIN_ACCURACY=0.90
SITES=(site-1 site-2 site-3 site-4)
# The engine, Debian's docker CLI ($DOCKER) and the base images.
# shellcheck source=deploy/docker/engine.sh
. "$ROOT/deploy/docker/engine.sh"
# docker-compose's builds call `docker`: Debian's, not /usr/local/bin's.
export PATH="/usr/bin:/usr/sbin:$PATH"

usage() {
  echo "usage: deploy/compose/run.sh [--rounds R] [--keep]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) [ $# -ge 2 ] || usage; ROUNDS="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) usage ;;
  esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "--rounds must be a positive integer" >&2; usage; }

# ---- steps, their times, the failures ------------------------------------------------------------------------
STEP_NAMES=()
STEP_SECONDS=()
STEP_START=0
FAILURES=()
step() {  # step NAME: ends the previous step's clock and starts this one's
  step_end
  STEP_NAMES+=("$1")
  STEP_START=$(date +%s)
  echo "== $1"
}
step_end() {
  if [ ${#STEP_NAMES[@]} -gt ${#STEP_SECONDS[@]} ]; then
    STEP_SECONDS+=($(( $(date +%s) - STEP_START )))
  fi
}
fail() {
  FAILURES+=("$*")
  echo "FAIL: $*"
}

compose() {
  DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1 FEDGATHER_ROUNDS="$ROUNDS" \
    docker-compose -f "$COMPOSE_FILE" -p "$PROJECT" "$@"
}
# The container compose 1.29 names for SERVICE.
container() { echo "${PROJECT}_$1_1"; }
inspect() { "$DOCKER" inspect --format "$2" "$(container "$1")" 2>/dev/null || true; }

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  if [ "$KEEP" = 0 ] && "$DOCKER" info >/dev/null 2>&1; then
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  engine_stop
}
trap cleanup EXIT
# A timeout's SIGTERM (tests/run.sh) or ^C still takes the containers down and stops the dockerd this started.
trap 'exit 143' TERM
trap 'exit 130' INT

# ---- 1. the engine and the tools ----------------------------------------------------------------------------
step "installing Docker's engine and docker-compose (Debian packages) if missing"
engine_install docker-compose
echo "   $("$DOCKER" --version); $(docker-compose --version)"

# ---- 2. the daemon ------------------------------------------------------------------------------------------
step "starting dockerd if none answers"
engine_start

# ---- 3. the base images -------------------------------------------------------------------------------------
step "base images debian:12 and debian:12-slim"
engine_base_images

# ---- 4. the images ------------------------------------------------------------------------------------------
step "building fedgather/server:local and fedgather/fedavg-site:local (BuildKit)"
compose build provision site-1
for image in fedgather/server:local fedgather/fedavg-site:local; do
  size=$("$DOCKER" image inspect --format '{{.Size}}' "$image")
  echo "   $image: $((size / 1000000)) MB"
done
# shellcheck disable=SC2016  # expanded in the container
torch="$("$DOCKER" run --rm --entrypoint /bin/bash fedgather/server:local -c \
  'shopt -s nullglob; found=(/usr/lib/*/libtorch*.so* /usr/lib/*/libc10.so*); echo "libtorch files: ${#found[@]}"' \
  2>&1 || true)"
if [ "$torch" = "libtorch files: 0" ]; then
  echo "   fedgather/server:local holds no LibTorch"
else
  fail "the server image holds LibTorch, or could not be searched: $torch"
fi

# ---- 5. the server, then the sites --------------------------------------------------------------------------
compose down -v --remove-orphans >/dev/null 2>&1 || true
step "provisioning and starting the server"
compose up -d server
healthy=0
for _ in $(seq 90); do
  [ "$(inspect server '{{.State.Health.Status}}')" = healthy ] && { healthy=1; break; }
  sleep 1
done
[ "$(inspect provision '{{.State.ExitCode}}')" = 0 ] || fail "provision exited $(inspect provision '{{.State.ExitCode}}')"
if [ "$healthy" = 1 ]; then
  echo "   server healthy"
else
  fail "the server is not healthy after 90 s"
  compose logs --tail=20 provision server || true
fi

step "hardening of the running server and of a container with a site's settings"
# check_hardening NAME COMMAND...: COMMAND runs a shell script in the container and prints key=value lines.
# shellcheck disable=SC2016  # expanded in the container, not here
HARDENING_SCRIPT='
  echo "uid=$(id -u)"
  echo "capeff=$(awk "/^CapEff/ {print \$2}" /proc/self/status)"
  echo "nonewprivs=$(awk "/^NoNewPrivs/ {print \$2}" /proc/self/status)"
  echo "seccomp=$(awk "/^Seccomp:/ {print \$2}" /proc/self/status)"
  if touch /fedgather-write-probe 2>/dev/null; then echo "rootfs=writable"; else echo "rootfs=read-only"; fi
  echo "tls=$(awk "\$5 ~ /^\/etc\/fedgather/ {print \$5}" /proc/self/mountinfo | sort | tr "\n" " ")"
'
check_hardening() {
  local name="$1"; shift
  local out
  out="$("$@" /bin/bash -c "$HARDENING_SCRIPT" 2>&1)" || true
  local expect_tls="$EXPECT_TLS"
  for want in "uid=10001" "capeff=0000000000000000" "nonewprivs=1" "seccomp=2" "rootfs=read-only" \
              "tls=$expect_tls"; do
    if ! grep -qxF -- "$want" <<<"$out"; then
      fail "$name: want $want; it has: $(tr '\n' ' ' <<<"$out")"
      return
    fi
  done
  echo "   $name: uid 10001, CapEff 0, NoNewPrivs 1, seccomp 2 (filter), read-only root, mounts ${expect_tls% }"
}
# Both have one certificate mount, at /etc/fedgather/tls.
EXPECT_TLS="/etc/fedgather/tls "
check_hardening "server (running)" "$DOCKER" exec "$(container server)"
# A site with its exact compose settings. That the volume at /etc/fedgather/tls is the site's own, and that no
# other site's is mounted, is checked on the training's containers below (their Mounts).
check_hardening "site-1 (compose run, the service's settings)" compose run --rm --no-deps -T site-1

step "four sites train the digits classifier together: FedAvg, $ROUNDS rounds"
compose up -d --no-deps "${SITES[@]}"
deadline=$(( $(date +%s) + 900 ))
unhealthy_seen=""
while :; do
  running=0
  for site in "${SITES[@]}"; do
    [ "$(inspect "$site" '{{.State.Status}}')" = exited ] || running=$((running + 1))
  done
  health="$(inspect server '{{.State.Health.Status}}')"
  [ "$health" = healthy ] || unhealthy_seen="$health"
  [ "$running" = 0 ] && break
  if [ "$(date +%s)" -gt "$deadline" ]; then
    fail "$running site(s) still running after 900 s"
    break
  fi
  sleep 1
done
if [ -z "$unhealthy_seen" ]; then
  echo "   the server stayed healthy throughout"
else
  fail "the server was '$unhealthy_seen' during the training"
fi
FINAL_LINE=""
for site in "${SITES[@]}"; do
  rc="$(inspect "$site" '{{.State.ExitCode}}')"
  line="$("$DOCKER" logs "$(container "$site")" 2>&1 | grep '^final test accuracy:' | tail -n 1 || true)"
  plane="$("$DOCKER" logs "$(container "$site")" 2>&1 | grep -m1 -i 'data plane' || true)"
  echo "   $site: exit $rc; ${line:-no final accuracy}"
  [ -n "$plane" ] && [ "$site" = site-1 ] && echo "   $site: $plane"
  [ "$rc" = 0 ] || fail "$site exited $rc"
  if [ -z "$line" ]; then
    fail "$site reported no final test accuracy"
    "$DOCKER" logs --tail 15 "$(container "$site")" 2>&1 | sed 's/^/     /'
    continue
  fi
  # Its own certificate volume, and no other site's.
  mounts="$(inspect "$site" '{{range .Mounts}}{{.Name}} {{end}}')"
  if [ "$mounts" = "${PROJECT//[^a-z0-9_-]/}_${site}-tls " ]; then
    echo "   $site: mounts only its own certificate volume, ${mounts% }"
  else
    fail "$site mounts '$mounts', not only its own certificate volume"
  fi
  accuracy="${line##*: }"
  if ! awk -v a="$accuracy" -v m="$MIN_ACCURACY" 'BEGIN { exit !(a >= m) }'; then
    fail "$site: final test accuracy $accuracy is below $MIN_ACCURACY"
  fi
  FINAL_LINE="$line"
done

# ---- 6. metrics, stop, audit --------------------------------------------------------------------------------
step "/metrics at the Prometheus target deploy/compose/prometheus.yml defines"
target="$(grep -oE "targets: *\[ *['\"]?[A-Za-z0-9_.-]+:[0-9]+" "$PROMETHEUS_FILE" | head -n 1 |
  sed -E "s/.*\[ *['\"]?//")"
if [ -z "$target" ]; then
  fail "no scrape target in $PROMETHEUS_FILE"
else
  # From a container on the compose network, with the site image's bash (/dev/tcp); 10 s at most for the
  # connection and the answer (timeout, in the container, so that it ends with them).
  metrics="$(compose run --rm --no-deps -T site-1 timeout 10 /bin/bash -c "
    exec 3<>/dev/tcp/${target%:*}/${target#*:}
    printf 'GET /metrics HTTP/1.0\r\nHost: $target\r\n\r\n' >&3
    cat <&3" 2>&1 || true)"
  if grep -q '^HTTP/1\.[01] 200' <<<"$metrics" && grep -q '^fedgather_' <<<"$metrics"; then
    echo "   http://$target/metrics: 200, $(grep -c '^fedgather_' <<<"$metrics") fedgather_ samples"
  else
    fail "http://$target/metrics did not answer 200 with fedgather_ samples: $(head -c 300 <<<"$metrics")"
  fi
fi

step "stopping the server (docker stop)"
"$DOCKER" stop --time 40 "$(container server)" >/dev/null
server_rc="$(inspect server '{{.State.ExitCode}}')"
echo "   exit $server_rc"
[ "$server_rc" = 0 ] || fail "the server exited $server_rc on docker stop"

step "verifying the audit chain in the server's volume"
if compose run --rm --no-deps -T server fedgather audit verify \
    --cert /etc/fedgather/tls/cert.pem /var/log/fedgather/audit.jsonl; then
  echo "   the audit chain verifies"
else
  fail "fedgather audit verify failed"
fi
step_end

# ---- 7. report ----------------------------------------------------------------------------------------------
echo "== report"
echo "compose project $PROJECT, $ROUNDS rounds, sites ${SITES[*]}"
for i in "${!STEP_NAMES[@]}"; do
  printf '  %4d s  %s\n' "${STEP_SECONDS[$i]}" "${STEP_NAMES[$i]}"
done
if [ ${#FAILURES[@]} -eq 0 ]; then
  echo "PASS: the compose simulation trained to the end over mutual TLS; the server stayed healthy, its hardening" \
       "holds live, /metrics answers, it stopped cleanly and the audit chain verifies"
  [ -n "$FINAL_LINE" ] && echo "$FINAL_LINE"
  exit 0
fi
printf 'FAIL: %s\n' "${FAILURES[@]}"
[ "$KEEP" = 1 ] && echo "(--keep: the containers and volumes are left for inspection)"
exit 1

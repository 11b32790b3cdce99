# shellcheck shell=bash
# deploy/docker/engine.sh: a Docker engine to run containers in, for scripts
# that source it (deploy/compose/run.sh, bench/gpu/check_bundle_bare.sh).
# Debian's docker.io, started by hand where no daemon answers (these machines
# have no systemd), and the base images the Dockerfile names, made from
# Debian's mirror since Docker Hub cannot be reached (../shared/STACK.md).
#
#   . deploy/docker/engine.sh
#   engine_install [PACKAGE...]   docker.io and PACKAGE... (Debian) if missing
#   engine_start                  dockerd, if none answers
#   engine_base_images            debian:12 and debian:12-slim, if missing
#                                 (debootstrap, installed if missing);
#                                 then checks that a container starts
#   engine_stop                   stops the dockerd engine_start started
#
# Where no engine can run here (a tool is missing and this is not root,
# dockerd does not come up, or it cannot start a container) a function says
# why and exits the script with 77, the status that means "skipped".
# DOCKER is Debian's CLI: /usr/local/bin/docker on these machines is another
# one, without buildx, through which BuildKit builds fail.
# Environment: FEDGATHER_DEBIAN_MIRROR (default http://deb.debian.org/debian).

DOCKER=/usr/bin/docker
ENGINE_MIRROR="${FEDGATHER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ENGINE_DOCKERD_PID=""

engine_install() {
  local missing=() package
  [ -x /usr/bin/docker ] && [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] || engine_apt_install "${missing[@]}"
}

# engine_apt_install PACKAGE...: installs them (Debian), as root; else exits 77.
engine_apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "SKIP: need $*: run as root, or install them (apt-get install $*)" >&2
    exit 77
  fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

engine_start() {
  if "$DOCKER" info >/dev/null 2>&1; then
    echo "   a Docker daemon answers; it stays running afterwards"
    return 0
  fi
  [ "$(id -u)" = 0 ] || { echo "SKIP: no Docker daemon answers, and starting one needs root" >&2; exit 77; }
  local log
  log="$(mktemp /tmp/fedgather-dockerd.XXXXXX.log)"
  # In a session of its own, so that a signal to the caller's process group (tests/run.sh's timeout, ^C) does
  # not stop dockerd before the caller's cleanup has used it (docker-compose down -v). This shell has no job
  # control, so setsid is not a group leader and execs dockerd without forking: $! is dockerd's pid.
  setsid /usr/sbin/dockerd >"$log" 2>&1 &
  ENGINE_DOCKERD_PID=$!
  for _ in $(seq 60); do "$DOCKER" info >/dev/null 2>&1 && break; sleep 1; done
  if ! "$DOCKER" info >/dev/null 2>&1; then
    echo "SKIP: dockerd did not answer within 60 s, so no engine can run here; its log ($log):" >&2
    tail -n 20 "$log" >&2
    exit 77
  fi
  echo "   started dockerd (pid $ENGINE_DOCKERD_PID, log $log); it is stopped at the end"
}

engine_base_images() {
  if "$DOCKER" image inspect debian:12 >/dev/null 2>&1 && "$DOCKER" image inspect debian:12-slim >/dev/null 2>&1; then
    echo "   debian:12 and debian:12-slim present; reused"
  else
    # By path: /usr/sbin is not on a non-root user's PATH.
    [ -x /usr/sbin/debootstrap ] || engine_apt_install debootstrap
    local rootfs
    rootfs="$(mktemp -d /tmp/fedgather-rootfs.XXXXXX)"
    echo "   debootstrap --variant=minbase bookworm from $ENGINE_MIRROR"
    /usr/sbin/debootstrap --variant=minbase bookworm "$rootfs" "$ENGINE_MIRROR" >"$rootfs.log" 2>&1 || {
      echo "debootstrap failed; the end of its log ($rootfs.log):" >&2
      tail -n 20 "$rootfs.log" >&2
      rm -rf --one-file-system "$rootfs"
      return 1
    }
    # The same suites as Debian's own images: the release, its updates and the security archive.
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $ENGINE_MIRROR bookworm main
deb $ENGINE_MIRROR bookworm-updates main
deb ${ENGINE_MIRROR%/debian}/debian-security bookworm-security main
EOF
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    # A minbase system is about as small as Debian's slim image: one image, both names.
    tar -C "$rootfs" -c . | "$DOCKER" import --change 'CMD ["bash"]' - debian:12 >/dev/null
    "$DOCKER" tag debian:12 debian:12-slim
    rm -rf "$rootfs" "$rootfs.log"
    echo "   imported debian:12 (also tagged debian:12-slim): $("$DOCKER" image inspect --format '{{.Size}}' debian:12) bytes"
  fi
  # A daemon that answers but cannot start a container (no overlay filesystem, no cgroups: a nested container
  # without privileges) is no engine either.
  local probe
  if ! probe="$("$DOCKER" run --rm --network none debian:12 true 2>&1)"; then
    echo "SKIP: dockerd answers but cannot run a container here: $probe" >&2
    exit 77
  fi
}

engine_stop() {
  [ -n "$ENGINE_DOCKERD_PID" ] || return 0
  kill "$ENGINE_DOCKERD_PID" 2>/dev/null || true
  for _ in $(seq 30); do kill -0 "$ENGINE_DOCKERD_PID" 2>/dev/null || break; sleep 1; done
  ENGINE_DOCKERD_PID=""
}

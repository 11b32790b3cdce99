#!/usr/bin/env bash
# Validates the deploy artefacts offline, with no container engine and no cluster (tests/run.sh runs it):
#   - YAML style: yamllint (deploy/.yamllint) over deploy/compose, deploy/k8s and deploy/testdata;
#   - docker-compose: `docker-compose config -q` (Debian's docker-compose 1.29, which parses offline) accepts
#     deploy/compose/docker-compose.yml;
#   - Kubernetes: `kubectl kustomize` renders deploy/k8s/base and every deploy/k8s/overlays/*; every rendered
#     object validates against the Kubernetes OpenAPI schemas of the npm package kubernetes-models
#     (deploy/k8s/validate/validate.mjs, versions pinned in its package-lock.json); the pod security, probe,
#     resource and site-count invariants hold (deploy/k8s/validate/check_invariants.py);
#     deploy/k8s/make-secrets.sh turns a provision-shaped directory into valid Secrets, without the CA key;
#   - Dockerfile: hadolint where installed (it is not installable here); the npm linter dockerfile-utils; with a
#     build directory, that the runtime stages install every shared library the built binaries link
#     (deploy/docker/check_runtime_deps.py);
#   - and that each check fails when it should: the broken files in deploy/testdata, and mutations of the
#     rendered manifests, must be rejected, each with the error expected of it.
#
#   deploy/validate.sh [--build-dir DIR] [--no-install]
#
#   --build-dir DIR  where fedgather, fedgather-server and fedavg_site were built (default: build in the
#                    repository root); the runtime-library check runs only when they are there
#   --no-install     fail instead of installing missing tools
#
# Installs what is missing (apt-get, with sudo when not root: docker-compose without its recommended Docker
# engine, kubernetes-client when there is no kubectl, yamllint, python3-yaml, nodejs and npm; then `npm ci` in
# deploy/k8s/validate). Works from any directory.
# Exit status: 0 when every check passed, 1 when any failed, 2 on usage errors.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { echo "usage: deploy/validate.sh [--build-dir DIR] [--no-install]" >&2; exit "${1:-2}"; }

BUILD_DIR="$ROOT/build"
INSTALL=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir)
      if [ $# -lt 2 ] || [ -z "$2" ]; then echo "--build-dir needs a value" >&2; usage; fi
      BUILD_DIR="$2"; shift ;;
    --build-dir=*) BUILD_DIR="${1#--build-dir=}" ;;
    --no-install) INSTALL=0 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
  shift
done
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac
cd "$ROOT"

# Debian's python3 (with python3-yaml), whatever python3 comes first on PATH.
PYTHON=/usr/bin/python3
VALIDATE_JS="$ROOT/deploy/k8s/validate"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/fedgather-validate.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# ---------------------------------------------------------------------------------------------------------------
echo "== tools"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
apt_updated=0
apt_install() {
  if [ "$INSTALL" = 0 ]; then echo "validate: missing $*, and --no-install" >&2; exit 1; fi
  if [ "$apt_updated" = 0 ]; then $SUDO apt-get update -q >/dev/null; apt_updated=1; fi
  echo "validate: installing $*"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "$@" >/dev/null
}
have_package() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
engine_before=0
if command -v dockerd >/dev/null; then engine_before=1; fi
command -v docker-compose >/dev/null || apt_install docker-compose
if [ "$engine_before" = 0 ] && command -v dockerd >/dev/null; then
  echo "validate: installing docker-compose brought in a Docker engine (dockerd); it should not" >&2
  exit 1
fi
command -v kubectl >/dev/null || apt_install kubernetes-client
command -v yamllint >/dev/null || apt_install yamllint
have_package python3-yaml || apt_install python3-yaml
{ command -v node >/dev/null && command -v npm >/dev/null; } || apt_install nodejs npm
# npm ci (exactly the lockfile's versions) when node_modules is missing or older than the lockfile.
if [ ! -f "$VALIDATE_JS/node_modules/.package-lock.json" ] ||
   [ "$VALIDATE_JS/package-lock.json" -nt "$VALIDATE_JS/node_modules/.package-lock.json" ]; then
  if [ "$INSTALL" = 0 ]; then echo "validate: deploy/k8s/validate needs npm ci, and --no-install" >&2; exit 1; fi
  (cd "$VALIDATE_JS" && npm ci --no-audit --no-fund --loglevel=error)
fi
npm_version() { node -p "require('$VALIDATE_JS/node_modules/$1/package.json').version"; }
echo "   $(docker-compose version --short 2>/dev/null | sed 's/^/docker-compose /')"
echo "   kubectl $(kubectl version --client -o json 2>/dev/null |
  "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')"
echo "   $(yamllint --version)"
echo "   node $(node --version), kubernetes-models $(npm_version kubernetes-models), yaml $(npm_version yaml)," \
  "dockerfile-utils $(npm_version dockerfile-utils)"
echo "   python3-yaml $("$PYTHON" -c 'import yaml; print(yaml.__version__)')"
if command -v shellcheck >/dev/null; then echo "   $(shellcheck --version | sed -n 's/^version: /shellcheck /p')"; fi
if command -v hadolint >/dev/null; then
  echo "   $(hadolint --version)"
else
  echo "   hadolint: not installed (not packaged in Debian 12; npm's 'hadolint' downloads its binary at run time)"
fi

# ---------------------------------------------------------------------------------------------------------------
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "   ok: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "   FAIL: $*"; }
# expect_ok NAME CMD...: CMD must exit 0.
expect_ok() {
  local name="$1"; shift
  if "$@" >"$WORK/out" 2>&1; then pass "$name"; else fail "$name"; sed 's/^/      /' "$WORK/out"; fi
}
# expect_fail NAME TEXT CMD...: CMD must exit non-zero and say TEXT (so that it failed for the reason meant).
expect_fail() {
  local name="$1" text="$2"; shift 2
  local rc=0
  "$@" >"$WORK/out" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    fail "$name: passed, but must fail"; sed 's/^/      /' "$WORK/out"
  elif ! grep -qF -- "$text" "$WORK/out"; then
    fail "$name: failed (exit $rc) without saying '$text'"; sed 's/^/      /' "$WORK/out"
  else
    pass "$name (rejected: $(grep -F -m1 -- "$text" "$WORK/out" | sed 's/^ *//' | cut -c1-110))"
  fi
}

# ---------------------------------------------------------------------------------------------------------------
echo "== YAML style (yamllint -s)"
expect_ok "yamllint deploy/compose deploy/k8s deploy/testdata" \
  yamllint -s -c deploy/.yamllint deploy/compose deploy/k8s deploy/testdata

# ---------------------------------------------------------------------------------------------------------------
echo "== Grafana dashboard: JSON, and every series it queries is one the server serves"
expect_ok "deploy/grafana/fedgather-dashboard.json" \
  /usr/bin/python3 deploy/grafana/check_dashboard.py deploy/grafana/fedgather-dashboard.json server/observe/server_metrics.cc
expect_fail "grafana-unknown-metric.json" "unknown series" \
  /usr/bin/python3 deploy/grafana/check_dashboard.py deploy/testdata/grafana-unknown-metric.json \
  server/observe/server_metrics.cc

# ---------------------------------------------------------------------------------------------------------------
echo "== docker-compose config (offline: DOCKER_HOST points nowhere)"
compose_config() { DOCKER_HOST=unix:///nonexistent/docker.sock docker-compose -f "$1" config -q; }
expect_ok "deploy/compose/docker-compose.yml" compose_config deploy/compose/docker-compose.yml
expect_fail "compose-bad-condition.yml" "service_completed_successfully" \
  compose_config deploy/testdata/compose-bad-condition.yml
expect_fail "compose-top-level-name.yml" "'name' does not match" \
  compose_config deploy/testdata/compose-top-level-name.yml
expect_fail "compose-wrong-type.yml" "is not a valid boolean value" \
  compose_config deploy/testdata/compose-wrong-type.yml

# ---------------------------------------------------------------------------------------------------------------
echo "== Kubernetes: render, OpenAPI schemas, invariants"
validate_k8s() { node "$VALIDATE_JS/validate.mjs" "$@"; }
invariants() { "$PYTHON" "$VALIDATE_JS/check_invariants.py" "$@"; }
for dir in deploy/k8s/base deploy/k8s/overlays/*/; do
  dir="${dir%/}"
  out="$WORK/$(echo "$dir" | tr / _).yaml"
  # Newer kustomize warns on stderr about the fields kept for kubectl 1.20's; keep stdout only.
  if kubectl kustomize "$dir" >"$out" 2>"$WORK/kustomize.err"; then
    pass "kubectl kustomize $dir ($(grep -c '^kind:' "$out") objects)"
  else
    fail "kubectl kustomize $dir"; sed 's/^/      /' "$WORK/kustomize.err"; continue
  fi
  expect_ok "schemas: $dir" validate_k8s "$out"
  expect_ok "invariants: $dir" invariants "$out"
done
expect_fail "schemas reject k8s-wrong-type.yaml" "/spec/replicas: must be integer" \
  validate_k8s deploy/testdata/k8s-wrong-type.yaml
expect_fail "schemas reject k8s-bad-enum.yaml" "/spec/type: must be equal to one of the allowed values" \
  validate_k8s deploy/testdata/k8s-bad-enum.yaml
expect_fail "schemas reject k8s-unknown-kind.yaml" "unknown kind StatefulSets" \
  validate_k8s deploy/testdata/k8s-unknown-kind.yaml
expect_ok "schemas accept k8s-privileged.yaml (it is well-formed)" \
  validate_k8s deploy/testdata/k8s-privileged.yaml
for want in "privileged is true" "runs as UID 0" "no resources.limits.memory" "no readinessProbe" \
            "no livenessProbe"; do
  expect_fail "invariants reject k8s-privileged.yaml" "$want" invariants deploy/testdata/k8s-privileged.yaml
done
# Mutations of the rendered base: each must break one invariant.
base="$WORK/deploy_k8s_base.yaml"
grep -v 'allowPrivilegeEscalation: false' "$base" >"$WORK/mut-escalation.yaml"
expect_fail "invariants reject the base without allowPrivilegeEscalation: false" \
  "allowPrivilegeEscalation is not false" invariants "$WORK/mut-escalation.yaml"
grep -v 'readOnlyRootFilesystem: true' "$base" >"$WORK/mut-rootfs.yaml"
expect_fail "invariants reject the base without readOnlyRootFilesystem" \
  "readOnlyRootFilesystem is not true" invariants "$WORK/mut-rootfs.yaml"
sed 's/^  replicas: 2$/  replicas: 3/' "$base" >"$WORK/mut-replicas.yaml"
expect_fail "invariants reject 3 site replicas with a world size of 2" \
  "replicas 3 exceed the policy's world_size 2" invariants "$WORK/mut-replicas.yaml"
sed 's/^  replicas: 2$/  replicas: 1/' "$base" >"$WORK/mut-secrets.yaml"
expect_fail "invariants reject 1 site replica with 2 projected site Secrets" \
  "all-sites projects ['fedgather-site-0', 'fedgather-site-1'], want ['fedgather-site-0']" \
  invariants "$WORK/mut-secrets.yaml"

echo "== deploy/k8s/make-secrets.sh"
# A directory shaped like `fedgather provision` output (the script copies files; it does not parse them).
pki="$WORK/pki"
for d in server site-0 site-1 site-10 ops; do
  mkdir -p "$pki/$d"
  for f in cert.pem key.pem ca.pem; do printf -- '-----BEGIN TEST-----\n%s %s\n-----END TEST-----\n' "$d" "$f" \
    >"$pki/$d/$f"; done
done
printf 'not for the cluster\n' >"$pki/ca-key.pem"
secrets_ok() {
  bash deploy/k8s/make-secrets.sh "$pki" >"$WORK/secrets.yaml" &&
    validate_k8s "$WORK/secrets.yaml" &&
    [ "$(grep '^  name:' "$WORK/secrets.yaml" | tr -d ' ' | tr '\n' ' ')" = \
      "name:fedgather-server-tls name:fedgather-site-0 name:fedgather-site-1 name:fedgather-site-10 " ] &&
    ! grep -q "$(printf 'not for the cluster\n' | base64)" "$WORK/secrets.yaml"
}
expect_ok "make-secrets.sh: the server and site-0, site-1, site-10 Secrets (not ops, not the CA key), valid" \
  secrets_ok
rm -r "$pki/site-0" "$pki/site-1" "$pki/site-10"
expect_fail "make-secrets.sh without site directories" "no site-N directories" \
  bash deploy/k8s/make-secrets.sh "$pki"

# ---------------------------------------------------------------------------------------------------------------
echo "== Dockerfile"
if command -v hadolint >/dev/null; then
  expect_ok "hadolint deploy/docker/Dockerfile" hadolint deploy/docker/Dockerfile
fi
dockerfile_lint() { "$VALIDATE_JS/node_modules/.bin/dockerfile-utils" lint "$1"; }
expect_ok "dockerfile-utils lint deploy/docker/Dockerfile" dockerfile_lint deploy/docker/Dockerfile
expect_fail "dockerfile-utils rejects Dockerfile.broken" "Unknown flag: intervall" \
  dockerfile_lint deploy/testdata/Dockerfile.broken
runtime_deps() { "$PYTHON" deploy/docker/check_runtime_deps.py "$1" "$BUILD_DIR"; }
if [ -x "$BUILD_DIR/server/fedgather-server" ] && [ -x "$BUILD_DIR/client/fedgather" ] &&
   [ -x "$BUILD_DIR/examples/fedavg_digits/fedavg_site" ]; then
  expect_ok "the runtime stages install every library the binaries in $BUILD_DIR link" \
    runtime_deps deploy/docker/Dockerfile
  sed 's/ libyaml-cpp0\.7//' deploy/docker/Dockerfile >"$WORK/Dockerfile.no-yaml-cpp"
  expect_fail "the runtime-library check notices a missing package" "does not install libyaml-cpp" \
    runtime_deps "$WORK/Dockerfile.no-yaml-cpp"
else
  echo "   (no binaries in $BUILD_DIR: the runtime-library check is skipped)"
fi

if command -v shellcheck >/dev/null; then
  echo "== shellcheck"
  expect_ok "shellcheck deploy/validate.sh deploy/k8s/make-secrets.sh" \
    shellcheck deploy/validate.sh deploy/k8s/make-secrets.sh
fi

echo
echo "not run here (no container engine, no cluster): docker build, docker-compose up, kubectl apply;"
echo "see deploy/compose/README.md and deploy/k8s/README.md"
echo "validate: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]

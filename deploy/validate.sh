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
command -v openssl >/dev/null || apt_install openssl
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
render() { kubectl kustomize "$1" >"$2" 2>"$WORK/kustomize.err"; }
for dir in deploy/k8s/base deploy/k8s/overlays/*/; do
  dir="${dir%/}"
  out="$WORK/$(echo "$dir" | tr / _).yaml"
  # Newer kustomize warns on stderr about the fields kept for kubectl 1.20's; keep stdout only.
  if render "$dir" "$out"; then
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

# mutate IN OUT CODE: OUT is IN's objects after the Python statements CODE, which see `docs` (the objects),
# obj(kind, name) (one of them), job (Job site's pod spec), site (its container site) and server (the server's
# container).
mutate() {
  "$PYTHON" - "$1" "$2" "$3" <<'EOF'
import sys
import yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1], encoding="utf-8")) if d]
def obj(kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
def named(items, name):
    return next(i for i in items if i["name"] == name)
job = obj("Job", "site")["spec"]["template"]["spec"]
site = named(job["containers"], "site")
server = named(obj("StatefulSet", "fedgather-server")["spec"]["template"]["spec"]["containers"], "server")
exec(sys.argv[3])
with open(sys.argv[2], "w", encoding="utf-8") as out:
    yaml.safe_dump_all(docs, out, sort_keys=False)
EOF
}
# rejects NAME TEXT CODE: the rendered base, mutated by CODE, must fail the invariants saying TEXT.
base="$WORK/deploy_k8s_base.yaml"
mutation=0
rejects() {
  mutation=$((mutation + 1))
  mutate "$base" "$WORK/mut-$mutation.yaml" "$3"
  expect_fail "invariants reject the base $1" "$2" invariants "$WORK/mut-$mutation.yaml"
}
# Each mutation of the rendered base breaks one invariant.
rejects "without allowPrivilegeEscalation: false" "allowPrivilegeEscalation is not false" \
  'del server["securityContext"]["allowPrivilegeEscalation"]'
rejects "without readOnlyRootFilesystem" "readOnlyRootFilesystem is not true" \
  'del site["securityContext"]["readOnlyRootFilesystem"]'
# The sites (item 1 of the deploy issue): an Indexed Job that ends with its sites and fails as a whole.
rejects "with 3 sites and a world size of 2" "completions 3 exceed the policy's world_size 2" \
  'obj("Job", "site")["spec"].update(completions=3, parallelism=3)'
rejects "with 1 site and 2 projected site Secrets" \
  "all-sites projects ['fedgather-site-0', 'fedgather-site-1'], want ['fedgather-site-0']" \
  'obj("Job", "site")["spec"].update(completions=1, parallelism=1)'
rejects "with the sites as a StatefulSet" "the sites must be an Indexed Job" \
  'obj("Job", "site").update(apiVersion="apps/v1", kind="StatefulSet")'
rejects "with parallelism below completions" "parallelism 1 is not completions 2" \
  'obj("Job", "site")["spec"]["parallelism"] = 1'
rejects "with restartPolicy OnFailure" "restartPolicy is 'OnFailure', not Never" \
  'job["restartPolicy"] = "OnFailure"'
rejects "without backoffLimit" "backoffLimit is None, not set" \
  'del obj("Job", "site")["spec"]["backoffLimit"]'
rejects "without ttlSecondsAfterFinished" "ttlSecondsAfterFinished is None, not set" \
  'del obj("Job", "site")["spec"]["ttlSecondsAfterFinished"]'
rejects "without the podFailurePolicy's FailJob rule" "podFailurePolicy has no FailJob rule" \
  'obj("Job", "site")["spec"]["podFailurePolicy"]["rules"].pop()'
rejects "with the DisruptionTarget rule after FailJob" "DisruptionTarget rule comes after its FailJob rule" \
  'obj("Job", "site")["spec"]["podFailurePolicy"]["rules"].reverse()'
rejects "with a site that does not exec fedavg_site" "does not end by exec'ing the site" \
  'site["command"][-1] = site["command"][-1].replace("exec fedavg_site", "fedavg_site")'
rejects "with a site that idles after training" "sleep infinity: a Job's pod must end when its work does" \
  'site["command"][-1] = site["command"][-1].replace("exec fedavg_site", "sleep infinity &\nexec fedavg_site")'
rejects "with an init container that takes its site from the pod name" \
  "container own-certificate: does not take its site from JOB_COMPLETION_INDEX" \
  'c = job["initContainers"][0]; c["command"][-1] = c["command"][-1].replace("JOB_COMPLETION_INDEX", "POD_NAME")'
rejects "with a liveness probe on the site" "container site: has a livenessProbe" \
  'site["livenessProbe"] = {"exec": {"command": ["fedgather", "health"]}}'
rejects "without the sites' subdomain" "subdomain is None, not a headless Service" \
  'del job["subdomain"]'
# The CRL (item 2).
rejects "without --crl" "no --crl: revoking a certificate would change nothing" \
  'server["command"] = [w for w in server["command"] if not w.startswith("--crl=")]'
rejects "with no crl.pem in the ConfigMap" "ConfigMap fedgather-policy has no key crl.pem" \
  'del obj("ConfigMap", "fedgather-policy")["data"]["crl.pem"]'
rejects "with a crl.pem that is not a CRL" "neither empty nor a PEM X509 CRL" \
  'obj("ConfigMap", "fedgather-policy")["data"]["crl.pem"] = "\n"'
# Disruptions and shutdown (item 4).
rejects "with a grace period equal to the drain" \
  "terminationGracePeriodSeconds 30 is not at least 10 s more than --drain-timeout 30" \
  'obj("StatefulSet", "fedgather-server")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30'
rejects "with the default drain (30 s) and a grace period of 35 s" \
  "terminationGracePeriodSeconds 35 is not at least 10 s more than --drain-timeout 30" \
  'server["command"] = [w for w in server["command"] if not w.startswith("--drain-timeout")]
obj("StatefulSet", "fedgather-server")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 35'
rejects "with the server's default --resume-grace" "--resume-grace is 10 (the default): with --state-dir" \
  'server["command"] = [w for w in server["command"] if not w.startswith("--resume-grace")]'
rejects "with sites that give up on a restarting server in 10 s" \
  "Job site's --resume-grace is 10 (the default), shorter than the server's 120 s" \
  'site["command"][-1] = site["command"][-1].replace("--resume-grace=120", "")'
rejects "with a PodDisruptionBudget of minAvailable 1 over 1 replica" "minAvailable 1 >= the 1 replicas it selects" \
  'spec = obj("PodDisruptionBudget", "fedgather-server")["spec"]; del spec["maxUnavailable"]; spec["minAvailable"] = 1'
# DNS (item 5).
rejects "without the sites' DNS policy" "no NetworkPolicy lets the sites reach DNS (UDP port 53)" \
  'docs.remove(obj("NetworkPolicy", "site-egress-dns"))'
# IPv6 and the server's headless Service (item 8).
rejects "with the server on 0.0.0.0" "--listen is 0.0.0.0:50051, not [::]:PORT" \
  'server["command"] = [w.replace("[::]", "0.0.0.0") if w.startswith("--listen=") else w for w in server["command"]]'
rejects "with the sites' peer links on 0.0.0.0" "--peer-listen is '0.0.0.0:7070', not [::]:PORT" \
  "site[\"command\"][-1] = site[\"command\"][-1].replace(\"'[::]:7070'\", \"0.0.0.0:7070\")"
rejects "with the server's serviceName the ClusterIP Service" \
  "serviceName fedgather-server is not a headless Service" \
  'obj("StatefulSet", "fedgather-server")["spec"]["serviceName"] = "fedgather-server"'
# Sites outside the cluster (item 6): mutations of the rendered external-sites overlay.
external="$WORK/deploy_k8s_overlays_external-sites.yaml"
mutate "$external" "$WORK/mut-external-cluster.yaml" \
  'obj("Service", "fedgather-server-external")["spec"]["externalTrafficPolicy"] = "Cluster"'
expect_fail "invariants reject the external-sites LoadBalancer with externalTrafficPolicy Cluster" \
  "externalTrafficPolicy is Cluster, not Local" invariants "$WORK/mut-external-cluster.yaml"
mutate "$external" "$WORK/mut-external-cidr.yaml" \
  'peers = obj("NetworkPolicy", "server-ingress-external-sites")["spec"]["ingress"][0]["from"]
peers[1]["ipBlock"]["cidr"] = "203.0.113.0/24"'
expect_fail "invariants reject external-sites ipBlocks that differ from loadBalancerSourceRanges" \
  "differ from its loadBalancerSourceRanges" invariants "$WORK/mut-external-cidr.yaml"

# The overlay knobs the README documents render with this kubectl and keep the invariants.
knob="$WORK/knob"
mkdir -p "$knob"
cp deploy/k8s/dns/site-egress-dns-strict.yaml "$knob/"
# kubectl 1.20's kustomize takes only relative bases.
cat >"$knob/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
bases:
  - $(realpath -m --relative-to="$knob" deploy/k8s/overlays/four-sites)
patchesStrategicMerge:
  - site-egress-dns-strict.yaml
images:
  - name: fedgather/server
    newName: registry.example.org/fedgather/server
    newTag: "1.0"
  - name: fedgather/fedavg-site
    newName: registry.example.org/fedgather/fedavg-site
    newTag: "1.0"
EOF
knob_ok() {
  render "$knob" "$WORK/knob.yaml" && validate_k8s "$WORK/knob.yaml" && invariants "$WORK/knob.yaml" &&
    # The strict DNS rule replaced the base's, and every image (3 containers, 1 init container) was renamed.
    grep -q 'cidr: 169.254.0.0/16' "$WORK/knob.yaml" &&
    [ "$(grep -c 'image: registry.example.org/fedgather/[a-z-]*:1.0$' "$WORK/knob.yaml")" = 3 ] &&
    ! grep 'image:' "$WORK/knob.yaml" | grep -v registry.example.org
}
expect_ok "four-sites with deploy/k8s/dns/site-egress-dns-strict.yaml and images: for a registry" knob_ok

echo "== deploy/k8s/make-secrets.sh, the server certificate's names, ignore files"
# A directory shaped like `fedgather provision` output: placeholder PEM files, except the server certificate,
# which make-secrets.sh checks with openssl.
pki="$WORK/pki"
for d in server site-0 site-1 site-10 ops; do
  mkdir -p "$pki/$d"
  for f in cert.pem key.pem ca.pem; do printf -- '-----BEGIN TEST-----\n%s %s\n-----END TEST-----\n' "$d" "$f" \
    >"$pki/$d/$f"; done
done
printf 'not for the cluster\n' >"$pki/ca-key.pem"
# server_cert NAMES: a self-signed server certificate for the DNS names NAMES (comma-separated).
server_cert() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=fedgather-server \
    -addext "subjectAltName=$(echo "$1" | sed 's/^/DNS:/; s/,/,DNS:/g')" \
    -keyout "$pki/server/key.pem" -out "$pki/server/cert.pem" 2>/dev/null
}
server_cert fedgather-server,fedgather-server.fedgather.svc,localhost
secrets_ok() {
  bash deploy/k8s/make-secrets.sh "$pki" --out "$WORK/secrets.yaml" &&
    [ "$(stat -c %a "$WORK/secrets.yaml")" = 600 ] &&
    validate_k8s "$WORK/secrets.yaml" &&
    [ "$(grep '^  name:' "$WORK/secrets.yaml" | tr -d ' ' | tr '\n' ' ')" = \
      "name:fedgather-server-tls name:fedgather-site-0 name:fedgather-site-1 name:fedgather-site-10 " ] &&
    ! grep -q "$(printf 'not for the cluster\n' | base64)" "$WORK/secrets.yaml"
}
expect_ok "make-secrets.sh: the server and site-0, site-1, site-10 Secrets (not ops, not the CA key), valid, 0600" \
  secrets_ok
expect_fail "make-secrets.sh refuses a file in the work tree that git does not ignore" \
  "inside the git work tree" bash deploy/k8s/make-secrets.sh "$pki" --out "$ROOT/deploy/k8s/keys.yaml"
server_cert fedgather-server,localhost
expect_fail "make-secrets.sh rejects a server certificate without fedgather-server.fedgather.svc" \
  "does not name fedgather-server.fedgather.svc" bash deploy/k8s/make-secrets.sh "$pki" --stdout
server_cert fedgather-server,fedgather-server.fedgather.svc,localhost
rm -r "$pki/site-0" "$pki/site-1" "$pki/site-10"
expect_fail "make-secrets.sh without site directories" "no site-N directories" \
  bash deploy/k8s/make-secrets.sh "$pki" --stdout

# ignores_secrets GITIGNORE DOCKERIGNORE: git ignores secrets.yaml and fedgather-secrets.yaml anywhere under
# GITIGNORE's rules, and DOCKERIGNORE leaves them out of the build context.
ignores_secrets() {
  local repo="$WORK/ignore-check" name
  rm -rf "$repo"; git init -q "$repo"; cp "$1" "$repo/.gitignore"
  for name in secrets.yaml deploy/k8s/secrets.yaml fedgather-secrets.yaml; do
    git -C "$repo" check-ignore -q --no-index "$name" || { echo "$1 does not ignore $name"; return 1; }
  done
  for pattern in '**/secrets.yaml' '**/*-secrets.yaml'; do
    grep -qxF -- "$pattern" "$2" || { echo "$2 does not exclude $pattern"; return 1; }
  done
}
if command -v git >/dev/null; then
  expect_ok ".gitignore and .dockerignore cover secrets.yaml and *-secrets.yaml" \
    ignores_secrets .gitignore .dockerignore
  grep -v 'secrets' .gitignore >"$WORK/gitignore.no-secrets"
  expect_fail "the ignore check notices a .gitignore without secrets.yaml" "does not ignore secrets.yaml" \
    ignores_secrets "$WORK/gitignore.no-secrets" .dockerignore
else
  echo "   (no git: the ignore-file check is skipped)"
fi

# A PKI from `fedgather provision` with the README's --server-names: the server certificate names what the
# sites (fedgather-server), the Service's DNS name and the probes (localhost) dial; its CRL (fedgather revoke,
# no certificate) passes the CRL invariant in the ConfigMap.
fedgather="$BUILD_DIR/client/fedgather"
if [ -x "$fedgather" ]; then
  names="$(grep -o -m1 -- '--server-names [^ ]*' deploy/k8s/README.md | cut -d' ' -f2)"
  real="$WORK/provisioned"
  provisioned_ok() {
    local host
    "$fedgather" provision --out "$real" --participants site-0,site-1 --admins ops --server-names "$names" &&
      for host in fedgather-server.fedgather.svc fedgather-server localhost; do
        openssl x509 -noout -in "$real/server/cert.pem" -checkhost "$host" | grep "does match certificate" ||
          { echo "the server certificate does not name $host"; return 1; }
      done &&
      bash deploy/k8s/make-secrets.sh "$real" --out "$WORK/provisioned-secrets.yaml" &&
      "$fedgather" revoke --ca-dir "$real" --crl "$real/crl.pem" &&
      mutate "$base" "$WORK/with-crl.yaml" \
        "obj('ConfigMap', 'fedgather-policy')['data']['crl.pem'] = open('$real/crl.pem').read()" &&
      invariants "$WORK/with-crl.yaml"
  }
  expect_ok "fedgather provision with the README's --server-names: the Service's names and localhost, Secrets, CRL" \
    provisioned_ok
else
  echo "   (no $fedgather: the check of a provisioned PKI is skipped)"
fi

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
  scripts=(deploy/validate.sh deploy/k8s/make-secrets.sh deploy/k8s/e2e.sh deploy/compose/run.sh
           deploy/docker/engine.sh bench/gpu/bundle.sh bench/gpu/run_bundle.sh bench/gpu/check_bundle_bare.sh)
  expect_ok "shellcheck -x ${scripts[*]}" shellcheck -x "${scripts[@]}"
fi

echo
echo "offline only: docker build and docker-compose up run in deploy/compose/run.sh (tests/run.sh runs it);"
echo "kubectl apply needs a cluster (deploy/k8s/README.md)"
echo "validate: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]

#!/usr/bin/env bash
# End-to-end run of a deploy/k8s overlay on a real cluster, with kubectl's current context:
#   1. creates the overlay's namespace, which must not exist yet, applies the Secrets (--secrets) into it, then
#      the overlay (kubectl apply -k);
#   2. waits for the server to be ready and for Job `site` to complete or fail;
#   3. checks that every completion index has a site pod whose container `site` exited 0, and that the server
#      still answers its health check (kubectl exec ... fedgather health);
#   4. prints a report and deletes what it applied (kubectl delete -k: the namespace, with its Secrets and
#      PersistentVolumeClaims), unless --keep.
#
#   deploy/k8s/e2e.sh [OVERLAY] --secrets FILE [--timeout SECONDS] [--keep]
#
#   OVERLAY         a kustomization directory (default overlays/four-sites; a relative path is looked up from the
#                   current directory, then from deploy/k8s). Its namespace is the one Namespace it renders
#                   (base/namespace.yaml, named by the kustomization's `namespace:`).
#   --secrets FILE  the Secret manifests (deploy/k8s/make-secrets.sh output, for that namespace), applied after
#                   the namespace is created and before the overlay
#   --timeout S     seconds for the whole run, from apply to the Job's end (default 900)
#   --keep          leave everything running (for kubectl logs and describe)
#
# Needs: kubectl and a cluster that enforces NetworkPolicies (Calico, Cilium; kind's default CNI does not, and
# then the run proves less), a default StorageClass for the server's PVCs, Kubernetes 1.26 or newer (Indexed
# Job with podFailurePolicy), and the images the overlay names, loaded into the nodes (kind load docker-image
# fedgather/server:local fedgather/fedavg-site:local) or pushed to a registry the overlay's `images:` names.
# The run is refused (exit 2) when the overlay's namespace exists already: the end deletes the namespace with
# everything in it, so e2e.sh only ever runs in a namespace it created. A real deployment's Job `site` may be gone
# (ttlSecondsAfterFinished) while its server, Secrets and PVCs are still there.
# Exit status: 0 when every site exited 0 and the server is healthy, 1 otherwise, 2 on usage errors and when the
# namespace exists already.
set -euo pipefail

K8S="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() {
  echo "usage: deploy/k8s/e2e.sh [OVERLAY] --secrets FILE [--timeout SECONDS] [--keep]" >&2
  exit "${1:-2}"
}

OVERLAY=""
SECRETS=""
TIMEOUT=900
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --secrets|--timeout)
      if [ $# -lt 2 ] || [ -z "$2" ]; then echo "$1 needs a value" >&2; usage; fi
      if [ "$1" = --secrets ]; then SECRETS="$2"; else TIMEOUT="$2"; fi
      shift ;;
    --keep) KEEP=1 ;;
    -h|--help) usage 0 ;;
    -*) echo "unknown option: $1" >&2; usage ;;
    *) if [ -n "$OVERLAY" ]; then echo "one OVERLAY only" >&2; usage; fi; OVERLAY="$1" ;;
  esac
  shift
done
OVERLAY="${OVERLAY:-overlays/four-sites}"
if [ ! -d "$OVERLAY" ] && [ -d "$K8S/$OVERLAY" ]; then OVERLAY="$K8S/$OVERLAY"; fi
[ -f "$OVERLAY/kustomization.yaml" ] || { echo "e2e: $OVERLAY has no kustomization.yaml" >&2; usage; }
case "$TIMEOUT" in ''|*[!0-9]*) echo "--timeout must be a number of seconds" >&2; usage ;; esac
# The namespace does not exist before the run, so the Secrets cannot be there already.
[ -n "$SECRETS" ] || { echo "e2e: --secrets FILE is needed (deploy/k8s/make-secrets.sh output)" >&2; usage; }
[ -r "$SECRETS" ] || { echo "e2e: cannot read $SECRETS" >&2; exit 2; }
command -v kubectl >/dev/null || { echo "e2e: kubectl not found" >&2; exit 1; }

# The overlay's namespace: the name of the one Namespace it renders, which kubectl delete -k deletes at the end.
# kubectl label --local parses the rendering offline and sends nothing (the label is only in what it prints).
namespaces="$(kubectl kustomize "$OVERLAY" 2>/dev/null |
  kubectl label --local -f - e2e=render -o jsonpath='{.kind}{" "}{.metadata.name}{"\n"}' |
  awk '$1 == "Namespace" { print $2 }')" ||
  { echo "e2e: cannot render $OVERLAY (see kubectl kustomize $OVERLAY)" >&2; exit 2; }
if [ -z "$namespaces" ] || [ "$(wc -l <<<"$namespaces")" != 1 ]; then
  shown="no Namespace"
  if [ -n "$namespaces" ]; then shown="the Namespaces ${namespaces//$'\n'/, }"; fi
  echo "e2e: $OVERLAY renders $shown; it must render exactly one (base/namespace.yaml), which e2e.sh creates" \
    "and deletes" >&2
  exit 2
fi
NS="$namespaces"

kc() { kubectl -n "$NS" "$@"; }
say() { echo "e2e: $*"; }
DEADLINE=$((SECONDS + TIMEOUT))
left() { local s=$((DEADLINE - SECONDS)); echo $((s > 0 ? s : 1)); }

kubectl cluster-info >/dev/null || { echo "e2e: no cluster answers (kubectl cluster-info)" >&2; exit 1; }
# Only a namespace this run creates is deleted at the end: an existing one may hold a real deployment.
if kubectl get namespace "$NS" >/dev/null 2>&1; then
  echo "e2e: namespace $NS exists already, and e2e.sh deletes its namespace at the end. If it holds nothing you" \
    "need, delete it first (kubectl delete namespace $NS) and run again; else run an overlay with another" \
    "namespace (its kustomization's namespace:, and make-secrets.sh --namespace for the Secrets)" >&2
  exit 2
fi

cleanup() {
  if [ "$KEEP" = 1 ]; then
    say "--keep: left running; delete with kubectl delete -k $OVERLAY"
  else
    say "deleting (kubectl delete -k $OVERLAY)"
    kubectl delete -k "$OVERLAY" --ignore-not-found --wait=false >/dev/null || true
  fi
}

say "context $(kubectl config current-context 2>/dev/null || echo '?'), overlay $OVERLAY, namespace $NS"
# create fails if the namespace appeared since the check; only after it succeeded is there something to delete.
# --save-config: kubectl apply -k then updates it (its labels) like an object it applied.
kubectl create namespace "$NS" --save-config >/dev/null
trap cleanup EXIT
# -n: kubectl refuses Secrets made for another namespace.
kc apply -f "$SECRETS" >/dev/null
kubectl apply -k "$OVERLAY"

FAILED=0

say "waiting for the server to be ready"
if ! kc rollout status statefulset/fedgather-server --timeout="$(left)s"; then
  say "FAIL: the server did not become ready"; FAILED=1
fi

say "waiting for Job site to complete or fail (up to $(left) s)"
state=""
while [ "$SECONDS" -lt "$DEADLINE" ]; do
  state="$(kc get job site -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}' || true)"
  case " $state " in *" Complete "*|*" Failed "*) break ;; esac
  sleep 5
done
case " $state " in
  *" Complete "*) say "Job site: Complete" ;;
  *" Failed "*)
    say "FAIL: Job site failed: $(kc get job site -o jsonpath='{.status.conditions[?(@.type=="Failed")].message}')"
    FAILED=1 ;;
  *) say "FAIL: Job site neither completed nor failed in $TIMEOUT s (conditions: ${state:-none})"; FAILED=1 ;;
esac

completions="$(kc get job site -o jsonpath='{.spec.completions}' || true)"
echo
echo "site pods (index, pod, phase, exit status of container site, result):"
declare -A succeeded=()
# One line per pod, fields separated by |: completion index, name, phase, exit status of container site (empty
# while it runs), the status of its DisruptionTarget condition (True when the cluster evicted or preempted it).
pods_columns='{range .items[*]}{.metadata.annotations.batch\.kubernetes\.io/job-completion-index}{"|"}'
pods_columns+='{.metadata.name}{"|"}{.status.phase}{"|"}'
pods_columns+='{.status.containerStatuses[?(@.name=="site")].state.terminated.exitCode}{"|"}'
pods_columns+='{.status.conditions[?(@.type=="DisruptionTarget")].status}{"\n"}{end}'
while IFS='|' read -r index pod phase code disrupted; do
  [ -n "$pod" ] || continue
  result="$(kc logs "$pod" -c site 2>/dev/null | grep -m1 'final test accuracy' || true)"
  printf '  site-%s  %-24s %-10s exit %-4s %s\n' "$index" "$pod" "$phase" "${code:--}" "$result"
  if [ "$code" = 0 ]; then
    succeeded[$index]=1
  elif [ "$disrupted" = True ]; then
    # The podFailurePolicy's Ignore rule: the Job replaced it (its 143 is SIGTERM's); its index is judged by the
    # replacement's exit below.
    say "pod $pod (site-$index) was disrupted by the cluster (DisruptionTarget); not judged by its exit ${code:--}"
  elif [ -n "$code" ]; then
    say "FAIL: pod $pod (site-$index) exited $code"; FAILED=1
  fi
done < <(kc get pods -l job-name=site -o jsonpath="$pods_columns")
for ((i = 0; i < ${completions:-0}; i++)); do
  if [ -z "${succeeded[$i]:-}" ]; then say "FAIL: no pod of site-$i exited 0"; FAILED=1; fi
done

echo
if kc exec fedgather-server-0 -c server -- \
     fedgather health --server=localhost:50051 --tls-dir=/etc/fedgather/tls --timeout=5; then
  say "server health: SERVING"
else
  say "FAIL: the server's health check failed"; FAILED=1
fi

if [ "$FAILED" != 0 ]; then
  echo
  say "the server's last log lines:"
  kc logs fedgather-server-0 -c server --tail=20 2>/dev/null | sed 's/^/    /' || true
  say "FAILED"
  exit 1
fi
say "passed: ${completions} sites exited 0, the server is healthy"

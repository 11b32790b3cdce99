#!/usr/bin/env bash
# Turns `fedgather provision` output into Kubernetes Secret manifests for deploy/k8s, on standard output:
#   fedgather-server-tls   from PKI_DIR/server/{cert,key,ca}.pem
#   fedgather-site-N       from PKI_DIR/site-N/{cert,key,ca}.pem, for every site-N directory (N = 0, 1, ...)
# Each Secret holds the keys cert.pem, key.pem and ca.pem, the layout of a `--tls-dir`. The CA key (ca-key.pem)
# and the observer and admin directories are never included: keep them off the cluster.
#
#   deploy/k8s/make-secrets.sh PKI_DIR [--namespace NS] > secrets.yaml
#   kubectl apply -f secrets.yaml        # then: kubectl apply -k deploy/k8s/overlays/four-sites
#
# PKI_DIR comes from, for example:
#   fedgather provision --out pki --participants site-0,site-1,site-2,site-3 --admins ops \
#     --server-names fedgather-server,fedgather-server.fedgather.svc,fedgather-server.fedgather.svc.cluster.local,localhost
# (localhost: the server's probes dial it). Copy pki/policy.yaml over the overlay's policy.yaml.
#
# Runs offline: `kubectl create secret generic --dry-run=client -o yaml` needs no cluster.
# Exit status: 0 on success, 1 when a file is missing or no site was found, 2 on usage errors.
set -euo pipefail

usage() { echo "usage: deploy/k8s/make-secrets.sh PKI_DIR [--namespace NS]" >&2; exit "${1:-2}"; }

PKI=""
NAMESPACE=fedgather
while [ $# -gt 0 ]; do
  case "$1" in
    --namespace)
      if [ $# -lt 2 ] || [ -z "$2" ]; then echo "--namespace needs a value" >&2; usage; fi
      NAMESPACE="$2"; shift ;;
    --namespace=*) NAMESPACE="${1#--namespace=}" ;;
    -h|--help) usage 0 ;;
    -*) echo "unknown option: $1" >&2; usage ;;
    *) if [ -n "$PKI" ]; then echo "one PKI_DIR only" >&2; usage; fi; PKI="$1" ;;
  esac
  shift
done
[ -n "$PKI" ] || usage
command -v kubectl >/dev/null || { echo "make-secrets: kubectl not found (Debian: kubernetes-client)" >&2; exit 1; }

# secret NAME DIR: one Secret from DIR's cert.pem, key.pem and ca.pem.
secret() {
  local name="$1" dir="$2" f
  for f in cert.pem key.pem ca.pem; do
    [ -s "$dir/$f" ] || { echo "make-secrets: missing $dir/$f" >&2; exit 1; }
  done
  echo "---"
  kubectl create secret generic "$name" --namespace "$NAMESPACE" --dry-run=client -o yaml \
    --from-file=cert.pem="$dir/cert.pem" --from-file=key.pem="$dir/key.pem" --from-file=ca.pem="$dir/ca.pem"
}

secret fedgather-server-tls "$PKI/server"
sites=0
# Numeric order, so site-10 follows site-9.
while IFS= read -r dir; do
  name="$(basename "$dir")"
  secret "fedgather-$name" "$dir"
  sites=$((sites + 1))
done < <(find "$PKI" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended -regex '.*/site-(0|[1-9][0-9]*)' \
           | sort -t- -k2,2n)
if [ "$sites" = 0 ]; then
  echo "make-secrets: no site-N directories in $PKI (the StatefulSet's pods are site-0, site-1, ...)" >&2
  exit 1
fi
echo "make-secrets: fedgather-server-tls and $sites site Secrets for namespace $NAMESPACE" >&2

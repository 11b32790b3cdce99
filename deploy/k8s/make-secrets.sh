#!/usr/bin/env bash
# Turns `fedgather provision` output into Kubernetes Secret manifests for deploy/k8s:
#   fedgather-server-tls   from PKI_DIR/server/{cert,key,ca}.pem
#   fedgather-site-N       from PKI_DIR/site-N/{cert,key,ca}.pem, for every site-N directory (N = 0, 1, ...)
# Each Secret holds the keys cert.pem, key.pem and ca.pem, the layout of a `--tls-dir`. The CA key (ca-key.pem)
# and the observer and admin directories are never included: keep them off the cluster.
#
#   deploy/k8s/make-secrets.sh PKI_DIR [--namespace NS] [--out FILE | --stdout]
#   kubectl apply -f FILE        # then: kubectl apply -k deploy/k8s/overlays/four-sites; then delete FILE
#
#   --namespace NS  the Secrets' namespace (default fedgather); the server certificate must name
#                   fedgather-server.NS.svc
#   --out FILE      where to write the manifests (default: $XDG_RUNTIME_DIR/fedgather-secrets.yaml, or
#                   /tmp/fedgather-secrets.yaml without XDG_RUNTIME_DIR), mode 0600. A FILE inside a git work
#                   tree is refused unless git ignores it, so that the keys are not committed by accident.
#   --stdout        write them to standard output instead (e.g. | kubectl apply -f -)
#
# PKI_DIR comes from, for example:
#   fedgather provision --out pki --participants site-0,site-1,site-2,site-3 --admins ops \
#     --server-names fedgather-server,fedgather-server.fedgather.svc,fedgather-server.fedgather.svc.cluster.local,localhost
# The server certificate must name fedgather-server (the sites dial fedgather-server:50051),
# fedgather-server.NS.svc and localhost (the server's probes dial it); this script checks those three with
# `openssl x509 -checkhost` and stops when one is missing. Copy pki/policy.yaml over the overlay's policy.yaml,
# and make the CRL with `fedgather revoke --ca-dir pki --crl pki/crl.pem` (no certificate: an empty, signed CRL)
# and copy it over the overlay's crl.pem.
#
# Runs offline: `kubectl create secret generic --dry-run=client -o yaml` needs no cluster. Needs openssl.
# Exit status: 0 on success, 1 when a file is missing, no site was found, the server certificate lacks a name
# or FILE is refused, 2 on usage errors.
set -euo pipefail

usage() {
  echo "usage: deploy/k8s/make-secrets.sh PKI_DIR [--namespace NS] [--out FILE | --stdout]" >&2
  exit "${1:-2}"
}

PKI=""
NAMESPACE=fedgather
OUT="${XDG_RUNTIME_DIR:-/tmp}/fedgather-secrets.yaml"
TO_STDOUT=0
while [ $# -gt 0 ]; do
  case "$1" in
    --namespace|--out)
      if [ $# -lt 2 ] || [ -z "$2" ]; then echo "$1 needs a value" >&2; usage; fi
      if [ "$1" = --namespace ]; then NAMESPACE="$2"; else OUT="$2"; fi
      shift ;;
    --namespace=*) NAMESPACE="${1#--namespace=}" ;;
    --out=*) OUT="${1#--out=}" ;;
    --stdout) TO_STDOUT=1 ;;
    -h|--help) usage 0 ;;
    -*) echo "unknown option: $1" >&2; usage ;;
    *) if [ -n "$PKI" ]; then echo "one PKI_DIR only" >&2; usage; fi; PKI="$1" ;;
  esac
  shift
done
[ -n "$PKI" ] || usage
command -v kubectl >/dev/null || { echo "make-secrets: kubectl not found (Debian: kubernetes-client)" >&2; exit 1; }
command -v openssl >/dev/null || { echo "make-secrets: openssl not found (Debian: openssl)" >&2; exit 1; }

# The names the server certificate must carry: what the sites and the probes dial.
cert="$PKI/server/cert.pem"
[ -s "$cert" ] || { echo "make-secrets: missing $cert" >&2; exit 1; }
for name in fedgather-server "fedgather-server.$NAMESPACE.svc" localhost; do
  if ! checked="$(openssl x509 -noout -in "$cert" -checkhost "$name" 2>&1)"; then
    echo "make-secrets: $cert: not a certificate: $checked" >&2
    exit 1
  fi
  if ! grep -q "does match certificate" <<<"$checked"; then
    echo "make-secrets: $cert does not name $name; provision the server with --server-names" \
      "fedgather-server,fedgather-server.$NAMESPACE.svc,fedgather-server.$NAMESPACE.svc.cluster.local,localhost" >&2
    exit 1
  fi
done

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

# manifests: every Secret on standard output.
manifests() {
  secret fedgather-server-tls "$PKI/server"
  local sites=0 dir
  # Numeric order, so site-10 follows site-9.
  while IFS= read -r dir; do
    secret "fedgather-$(basename "$dir")" "$dir"
    sites=$((sites + 1))
  done < <(find "$PKI" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended -regex '.*/site-(0|[1-9][0-9]*)' \
             | sort -t- -k2,2n)
  if [ "$sites" = 0 ]; then
    echo "make-secrets: no site-N directories in $PKI (the site Job's pods are site-0, site-1, ...)" >&2
    exit 1
  fi
  echo "make-secrets: fedgather-server-tls and $sites site Secrets for namespace $NAMESPACE" >&2
}

if [ ! -s "$PKI/crl.pem" ]; then
  echo "make-secrets: no $PKI/crl.pem; make one with \`fedgather revoke --ca-dir $PKI --crl $PKI/crl.pem\` and" \
    "copy it over your overlay's crl.pem (deploy/k8s/README.md, \"Revoking a certificate\")" >&2
fi

if [ "$TO_STDOUT" = 1 ]; then
  # All of them or nothing: printed only once every Secret was made, so that a pipe into kubectl apply never
  # applies some of them (set -e again: command substitution clears it).
  all="$(set -e; manifests)"
  printf '%s\n' "$all"
  exit 0
fi

dir="$(dirname "$OUT")"
[ -d "$dir" ] || { echo "make-secrets: $dir is not a directory" >&2; exit 1; }
if command -v git >/dev/null && [ "$(git -C "$dir" rev-parse --is-inside-work-tree 2>/dev/null)" = true ] &&
   ! git -C "$dir" check-ignore -q --no-index -- "$(basename "$OUT")"; then
  echo "make-secrets: $OUT is inside the git work tree $(git -C "$dir" rev-parse --show-toplevel) and git does" \
    "not ignore it; write the keys outside the tree (--out FILE, or the default" \
    "\${XDG_RUNTIME_DIR:-/tmp}/fedgather-secrets.yaml) or --stdout" >&2
  exit 1
fi
# Written to a new file beside OUT, then renamed over it: the keys are never in a file another user can read, and
# a symbolic link at OUT is replaced, not followed.
umask 077
tmp="$(mktemp "$dir/.fedgather-secrets.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
manifests >"$tmp"
chmod 0600 "$tmp"
mv -f "$tmp" "$OUT"
trap - EXIT
echo "make-secrets: wrote $OUT (mode 0600); kubectl apply -f $OUT, then delete it" >&2

#!/usr/bin/env bash
# check_cli_links_no_cuda.sh FEDGATHER [MODULE]: the fedgather CLI starts on
# a host without NCCL or CUDA, because it does not link them (docs/gpu.md);
# the NCCL module it loads for `join --gpus` does, and exports only the two
# symbols of client/nccl/nccl_module.h. Reads the ELF files (readelf, nm);
# runs nothing. Exit status 0 when all of that holds, 1 otherwise, each
# failure named.
set -euo pipefail
cli="$1"
module="${2:-}"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

cli_needs="$(needed "$cli")"
grep -q '^libgrpc++' <<<"$cli_needs" || fail "$cli needs no libgrpc++: not the CLI, or readelf read nothing"
cuda="$(grep -E '^lib(nccl|cudart|cuda)\.' <<<"$cli_needs" || true)"
[ -z "$cuda" ] || fail "$cli needs $(echo "$cuda" | tr '\n' ' ')(it must load them only for join --gpus)"
echo "$cli needs: $(echo "$cli_needs" | tr '\n' ' ')"

if [ -n "$module" ]; then
  module_needs="$(needed "$module")"
  echo "$module needs: $(echo "$module_needs" | tr '\n' ' ')"
  for lib in libnccl.so.2 libcudart.so.13; do
    grep -qx "$lib" <<<"$module_needs" || fail "$module does not need $lib"
  done
  grep -q '^libgrpc' <<<"$module_needs" && fail "$module needs gRPC (--as-needed should have dropped it)"
  exports="$(nm -D --defined-only "$module" | awk '$2 == "T" { print $3 }' | sort | tr '\n' ' ')"
  echo "$module exports: $exports"
  [ "$exports" = "fedgather_nccl_module_abi fedgather_nccl_module_create " ] ||
    fail "$module exports $exports; want fedgather_nccl_module_abi fedgather_nccl_module_create"
fi
[ "$failures" = 0 ] && echo "PASS" && exit 0
exit 1

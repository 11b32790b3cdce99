#!/bin/bash
# bench/net/netns_rsh.sh HOST COMMAND...: OpenMPI's remote shell
# (--mca plm_rsh_agent) on the emulated network of bench/net/netns.sh. It
# runs COMMAND in the namespace of the participant whose address is HOST,
# so each "host" mpirun launches on is one participant's namespace.
# NET_PREFIX names the network (exported by bench/net/run.sh).
set -eu
host=$1
shift
rank=$((${host##*.} - 1))
exec ip netns exec "$NET_PREFIX-$rank" /bin/sh -c "$*"

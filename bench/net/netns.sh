# shellcheck shell=bash
# bench/net/netns.sh: an emulated network of network namespaces, sourced by
# bench/net/run.sh (needs root and iproute2).
#
#   net_up PREFIX N RATE_MBIT HUB_MBIT   make it; net_down PREFIX   remove it
#
# PREFIX-sw holds a bridge. Participant r (0 <= r < N) lives in PREFIX-r
# with address 10.79.0.(r+1) on its interface eth0, the server in PREFIX-s
# with 10.79.0.200; each eth0 is a veth whose other end is a port of the
# bridge. Every participant's link is shaped to RATE_MBIT in both
# directions, the server's to HUB_MBIT: an HTB class on eth0 limits what
# the node sends and one on the bridge port limits what it receives.
# Behind each class waits a byte-limited FIFO of NET_QUEUE_MS of the link's
# rate (default 5 ms), as a switch port's buffer. HTB's default FIFO counts
# packets, and veth hands it segmentation-offload packets of up to 64 KiB,
# so its 1000 "packets" would hold up to 64 MiB: seconds of queue, behind
# which every ACK and control frame of the other direction waits
# (docs/decisions.md, "bench/net"). Nothing else is emulated (this kernel
# has no netem: no delay, no loss).

NET_SUBNET=10.79.0
NET_SERVER_HOST=$NET_SUBNET.200
NET_QUEUE_MS=${NET_QUEUE_MS:-5}

net_host() { echo "$NET_SUBNET.$(($1 + 1))"; }  # participant r's address

# net_shape NS DEV MBIT: DEV in NS sends at most MBIT Mbit/s, with a queue
# of NET_QUEUE_MS at that rate.
net_shape() {
  tc -n "$1" qdisc add dev "$2" root handle 1: htb default 1 &&
    tc -n "$1" class add dev "$2" parent 1: classid 1:1 htb \
      rate "$3mbit" ceil "$3mbit" quantum 60000 &&
    tc -n "$1" qdisc add dev "$2" parent 1:1 handle 10: bfifo \
      limit $(($3 * 125 * NET_QUEUE_MS))
}

# net_node PREFIX NAME PORT ADDRESS MBIT: namespace PREFIX-NAME, linked to
# the bridge through port PORT, shaped to MBIT both ways.
net_node() {
  local prefix=$1 ns=$1-$2 port=$3 address=$4 mbit=$5
  ip netns add "$ns" &&
    ip -n "$ns" link set lo up &&
    ip link add eth0 netns "$ns" type veth peer name "$port" netns "$prefix-sw" &&
    ip -n "$ns" addr add "$address/24" dev eth0 &&
    ip -n "$ns" link set eth0 up &&
    ip -n "$prefix-sw" link set "$port" master br0 &&
    ip -n "$prefix-sw" link set "$port" up &&
    net_shape "$ns" eth0 "$mbit" &&
    net_shape "$prefix-sw" "$port" "$mbit"
}

net_up() {
  local prefix=$1 n=$2 mbit=$3 hub_mbit=$4 r
  ip netns add "$prefix-sw" &&
    ip -n "$prefix-sw" link add br0 type bridge &&
    ip -n "$prefix-sw" link set br0 up &&
    net_node "$prefix" s vs "$NET_SERVER_HOST" "$hub_mbit" || return 1
  for ((r = 0; r < n; r++)); do
    net_node "$prefix" "$r" "v$r" "$(net_host "$r")" "$mbit" || return 1
  done
}

# net_down removes every namespace named PREFIX-*, and with them their links.
net_down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$1-" || true); do
    ip netns del "$ns"
  done
}

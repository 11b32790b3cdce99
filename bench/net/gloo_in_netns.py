#!/usr/bin/python3
"""The peers' Gloo benchmark (../shared/bench/peers/gloo_allgather.py), each
rank in its own network namespace of bench/net/netns.sh.

  NET_PREFIX=P NET_RANK0_HOST=10.79.0.1 PEERS_DIR=DIR \\
    /usr/bin/python3 gloo_in_netns.py --nprocs N --sizes S ...

The peers' script forks its ranks; here each forked rank first enters
namespace P-<rank> (setns), uses its eth0 (GLOO_SOCKET_IFNAME) and meets the
others at rank 0's address instead of 127.0.0.1. The method, the checks and
the CSV lines are the peers' own, unchanged.
"""
import ctypes
import os
import sys

sys.path.insert(0, os.environ["PEERS_DIR"])
import gloo_allgather  # noqa: E402  (the peers' benchmark)

CLONE_NEWNET = 0x40000000
_measure_rank = gloo_allgather.worker


def _enter_namespace(name):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name}")
    finally:
        os.close(fd)


def worker(rank, n, port, args, sizes, ops, q):
    _enter_namespace(f"{os.environ['NET_PREFIX']}-{rank}")
    os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
    import torch.distributed as dist
    init = dist.init_process_group
    rank0 = os.environ["NET_RANK0_HOST"]

    def init_at_rank0(backend, init_method, **kwargs):
        return init(backend, init_method=init_method.replace("127.0.0.1", rank0),
                    **kwargs)

    dist.init_process_group = init_at_rank0
    _measure_rank(rank, n, port, args, sizes, ops, q)


gloo_allgather.worker = worker  # main() forks its ranks with this
gloo_allgather.main()

#!/usr/bin/env python3
"""Latency of a small dist.all_gather, backend fedgather (mutual TLS through a
local fedgather-server) against gloo (loopback TCP), measured in one run on
the same machine with the same tensors.

    PYTHONPATH=build/python FEDGATHER_BUILD_DIR=build \
        /usr/bin/python3 python/bench/all_gather_latency.py [--world-size 4]
        [--bytes 4096] [--iters 200] [--warmup 20]

Starts the server and world-size processes per backend (tests/python/fgtest.py
provisions the certificates). Each rank times `iters` all_gathers after
`warmup`, separated by nothing (back to back); rank 0 reports the median and
p90 of its per-call times, and the mean. Prints one line per backend.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))


def rank_main(argv):
    backend, init_method, rank, world, nbytes, iters, warmup = argv
    rank, world, nbytes, iters, warmup = map(int, (rank, world, nbytes, iters, warmup))
    import torch
    import torch.distributed as dist
    if backend == "fedgather":
        import fedgather.torch  # noqa: F401
    dist.init_process_group(backend, init_method=init_method, rank=rank,
                            world_size=world)
    x = torch.full((nbytes // 4,), float(rank), dtype=torch.float32)
    outs = [torch.empty_like(x) for _ in range(world)]
    times = []
    for i in range(warmup + iters):
        start = time.perf_counter()
        dist.all_gather(outs, x)
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed)
    for r, o in enumerate(outs):
        assert torch.equal(o, torch.full_like(x, float(r))), "wrong result"
    if rank == 0:
        times.sort()
        print(f"RESULT {backend} median_us={statistics.median(times) * 1e6:.0f} "
              f"p90_us={times[int(0.9 * len(times))] * 1e6:.0f} "
              f"mean_us={statistics.mean(times) * 1e6:.0f}", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--bytes", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    import fgtest
    sites = [f"site-{i + 1}" for i in range(args.world_size)]
    me = os.path.abspath(__file__)
    common = [str(args.world_size), str(args.bytes), str(args.iters), str(args.warmup)]
    lines = []
    with fgtest.Cluster({"bench": sites}) as cluster:
        results = fgtest.run_ranks(
            lambda r: [me, "--rank-main", "fedgather",
                       f"fedgather://{cluster.address}?group=bench&tls_dir="
                       f"{cluster.tls_dir(sites[r])}", str(r)] + common,
            args.world_size)
        for r in results:
            if r.returncode != 0:
                sys.exit(f"fedgather rank {r.rank} failed:\n{r.output}")
        lines += [l for l in results[0].output.splitlines() if l.startswith("RESULT")]
    store = "file://" + os.path.join(tempfile.mkdtemp(prefix="fedgather-bench."), "store")
    results = fgtest.run_ranks(
        lambda r: [me, "--rank-main", "gloo", store, str(r)] + common,
        args.world_size)
    for r in results:
        if r.returncode != 0:
            sys.exit(f"gloo rank {r.rank} failed:\n{r.output}")
    lines += [l for l in results[0].output.splitlines() if l.startswith("RESULT")]
    print(f"dist.all_gather of {args.bytes} bytes per rank, world size "
          f"{args.world_size}, {args.iters} calls after {args.warmup} warm-up, "
          f"rank 0's per-call time:")
    for line in lines:
        print("  " + line[len("RESULT "):])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-main":
        rank_main(sys.argv[2:])
    else:
        main()

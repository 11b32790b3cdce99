"""One rank of a torch.distributed test run; started by test_torch_backend.py.

    collectives_worker.py SCENARIO --backend B --init-method URL --rank R
                          --world-size N --out FILE [--fifo PATH]

Scenarios:
  ops       all_gather, all_gather_into_tensor, all_reduce (SUM, AVG, MIN,
            MAX), broadcast for float32, float64, int64 and bfloat16, then
            all_gather_object of dicts and async_op=True; saves every result
            (torch.save) to --out. The same inputs with either backend. gloo
            in torch 1.13 has no bfloat16, no AVG and no all_gather_into_tensor,
            so for gloo those are computed from what it does have, exactly:
            bfloat16 travels as float32 (lossless both ways), AVG is SUM
            divided by the world size in the tensor's dtype, and
            all_gather_into_tensor is all_gather concatenated.
  async     async_op=True: rank 0 starts an all_gather and checks that it is
            not completed while rank 1 has not started (rank 1 waits on the
            FIFO --fifo, which rank 0 writes after that check), then both wait.
  mismatch  ranks gather tensors of different shapes; prints the error.
  join      only init_process_group; prints the error if it fails.
The exit status is 0 when the scenario ran (errors it expects are printed as
"ERROR: ..." lines), 1 on anything unexpected.
"""

import argparse
import os
import sys
import traceback

import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.float64, torch.int64, torch.bfloat16]
SHAPE = (3, 5)


def gather_input(rank: int, dtype: torch.dtype) -> torch.Tensor:
    """Full-precision random values (bit patterns matter, order does not)."""
    g = torch.Generator().manual_seed(1000 * rank + DTYPES.index(dtype))
    if dtype == torch.int64:
        return torch.randint(-2**40, 2**40, SHAPE, generator=g, dtype=torch.int64)
    return torch.randn(SHAPE, generator=g, dtype=torch.float64).to(dtype)


def reduce_input(rank: int, dtype: torch.dtype) -> torch.Tensor:
    """Small integers: sums are exact in every dtype and every order, so any
    reduction order gives the same bits (the server reduces in arrival
    order, the direct plane in its ring's, gloo in its own)."""
    g = torch.Generator().manual_seed(5000 + 1000 * rank + DTYPES.index(dtype))
    return torch.randint(-20, 21, SHAPE, generator=g, dtype=torch.int64).to(dtype)


def object_input(rank: int) -> dict:
    return {"rank": rank, "site": f"site-{rank + 1}", "values": list(range(rank + 2)),
            "nested": {"scale": rank * 1.5, "ok": rank % 2 == 0}}


class Ops:
    """The collectives, as the backend under test offers them."""

    def __init__(self, backend: str, world: int):
        self.gloo = backend == "gloo"
        self.world = world

    def _wire(self, t):  # gloo (torch 1.13) has no bfloat16
        return t.float() if self.gloo and t.dtype == torch.bfloat16 else t

    def all_gather(self, t):
        x = self._wire(t)
        outs = [torch.empty_like(x) for _ in range(self.world)]
        dist.all_gather(outs, x)
        return [o.to(t.dtype) for o in outs]

    def all_gather_into_tensor(self, t):
        if self.gloo:
            return torch.cat(self.all_gather(t))
        out = torch.empty((self.world * t.shape[0],) + tuple(t.shape[1:]), dtype=t.dtype)
        dist.all_gather_into_tensor(out, t)
        return out

    def all_reduce(self, t, op):
        x = self._wire(t).clone()
        if self.gloo and op == dist.ReduceOp.AVG:
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            return (x.to(t.dtype) / self.world).to(t.dtype)
        dist.all_reduce(x, op=op)
        return x.to(t.dtype)

    def broadcast(self, t, root):
        x = self._wire(t).clone()
        dist.broadcast(x, root)
        return x.to(t.dtype)


def run_ops(args, results):
    ops = Ops(args.backend, args.world_size)
    root = args.world_size - 1
    for dtype in DTYPES:
        name = str(dtype).replace("torch.", "")
        g = gather_input(args.rank, dtype)
        r = reduce_input(args.rank, dtype)
        results[f"all_gather/{name}"] = torch.stack(ops.all_gather(g))
        results[f"all_gather_into_tensor/{name}"] = ops.all_gather_into_tensor(g)
        for op_name in ("SUM", "MIN", "MAX", "AVG"):
            if op_name == "AVG" and not dtype.is_floating_point:
                continue
            op = getattr(dist.ReduceOp, op_name)
            results[f"all_reduce_{op_name}/{name}"] = ops.all_reduce(r, op)
        results[f"broadcast/{name}"] = ops.broadcast(g, root)
    gathered = [None] * args.world_size
    dist.all_gather_object(gathered, object_input(args.rank))
    results["all_gather_object"] = gathered

    # async_op=True: three collectives in flight at once, waited in order.
    x = gather_input(args.rank, torch.float32)
    outs = [torch.empty_like(x) for _ in range(args.world_size)]
    y = reduce_input(args.rank, torch.float64).clone()
    z = gather_input(args.rank, torch.int64).clone()
    works = [dist.all_gather(outs, x, async_op=True),
             dist.all_reduce(y, async_op=True),
             dist.broadcast(z, 0, async_op=True)]
    for w in works:
        w.wait()
    results["async/completed"] = [w.is_completed() for w in works]
    results["async/all_gather"] = torch.stack(outs)
    results["async/all_reduce"] = y
    results["async/broadcast"] = z
    dist.barrier()


def run_async(args, results):
    x = torch.arange(4, dtype=torch.float32) + 10 * args.rank
    outs = [torch.empty_like(x) for _ in range(args.world_size)]
    if args.rank == 0:
        work = dist.all_gather(outs, x, async_op=True)
        results["completed_before_peer"] = work.is_completed()
        with open(args.fifo, "w") as fifo:  # lets rank 1 start
            fifo.write("go\n")
        work.wait()
        results["completed_after_wait"] = work.is_completed()
        future = dist.all_reduce(x.clone(), async_op=True).get_future()
        results["future_value"] = future.wait()[0]
    else:
        with open(args.fifo) as fifo:  # blocks until rank 0 has checked
            fifo.read()
        dist.all_gather(outs, x)
        dist.all_reduce(x.clone())
    results["all_gather"] = torch.stack(outs)


def run_mismatch(args, results):
    x = torch.zeros((2, 3 + args.rank), dtype=torch.float32)  # shapes differ
    outs = [torch.empty_like(x) for _ in range(args.world_size)]
    try:
        dist.all_gather(outs, x)
        print("NO ERROR", flush=True)
    except RuntimeError as e:
        print(f"ERROR: {e}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["ops", "async", "mismatch", "join"])
    parser.add_argument("--backend", required=True)
    parser.add_argument("--init-method", default=None)
    parser.add_argument("--rank", type=int, default=-1)
    parser.add_argument("--world-size", type=int, default=-1)
    parser.add_argument("--out")
    parser.add_argument("--fifo")
    args = parser.parse_args()
    if args.backend == "fedgather":
        import fedgather.torch  # noqa: F401  registers the backend
    try:
        dist.init_process_group(args.backend, init_method=args.init_method,
                                rank=args.rank, world_size=args.world_size)
    except RuntimeError as e:
        if args.scenario == "join":
            print(f"ERROR: {e}", flush=True)
            return 0
        raise
    args.rank, args.world_size = dist.get_rank(), dist.get_world_size()
    results = {"rank": args.rank, "world_size": args.world_size}
    if args.scenario == "ops":
        run_ops(args, results)
    elif args.scenario == "async":
        run_async(args, results)
    elif args.scenario == "mismatch":
        run_mismatch(args, results)
    if args.out:
        torch.save(results, args.out)
    dist.destroy_process_group()
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)

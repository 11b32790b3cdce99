#!/usr/bin/env python3
"""DDP-style training over torch.distributed, with every rank's gradients
collected by dist.all_gather, as in the classic all_gather tutorial; the
backend is fedgather (mutual TLS through a fedgather-server) unless told
otherwise. Only the backend name differs from gloo code.

    # with a server and certificates as in the README's quick start:
    python3 examples/ddp_all_gather.py --rank 0 --world-size 2 \
        --init-method "fedgather://127.0.0.1:$PORT?group=demo&tls_dir=pki/site-1" &
    python3 examples/ddp_all_gather.py --rank 1 --world-size 2 \
        --init-method "fedgather://127.0.0.1:$PORT?group=demo&tls_dir=pki/site-2"

    # or env:// with FEDGATHER_SERVER, FEDGATHER_TLS_DIR, FEDGATHER_GROUP,
    # RANK and WORLD_SIZE set, and no --init-method.

Each rank fits a linear model to its own shard of synthetic data. Every step
it all_gathers each parameter's gradient, prints what it gathered, averages
the gradients itself and steps. The model starts from rank 0's parameters
(dist.broadcast). At the end every rank checks, with all_gather_object, that
all ranks hold the same parameters, and prints their SHA-256 (the same with
any backend: the averaging is local and the gather exact). Exits 1 if the
ranks disagree.
"""

import argparse
import hashlib
import sys

import torch
import torch.distributed as dist


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="fedgather")
    parser.add_argument("--init-method", default=None,
                        help="fedgather://HOST:PORT?group=G&tls_dir=DIR (default env://)")
    parser.add_argument("--rank", type=int, default=-1)
    parser.add_argument("--world-size", type=int, default=-1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    return parser.parse_args()


def main():
    args = parse_args()
    if args.backend == "fedgather":
        import fedgather.torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend, init_method=args.init_method,
                            rank=args.rank, world_size=args.world_size)
    rank, world = dist.get_rank(), dist.get_world_size()

    # This rank's data: y = x . w_true + 0.5 + noise, a different shard each.
    g = torch.Generator().manual_seed(1234 + rank)
    x = torch.randn(64, 4, generator=g)
    w_true = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    y = x @ w_true + 0.5 + 0.01 * torch.randn(64, 1, generator=g)

    torch.manual_seed(rank)  # different on purpose: rank 0's wins below
    model = torch.nn.Linear(4, 1)
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    for step in range(args.steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for name, p in model.named_parameters():
            gathered = [torch.empty_like(p.grad) for _ in range(world)]
            dist.all_gather(gathered, p.grad)
            print(f"rank {rank} step {step} {name}.grad from every rank: "
                  f"{[[round(v, 4) for v in t.flatten().tolist()] for t in gathered]}",
                  flush=True)
            p.grad.copy_(torch.stack(gathered).mean(0))
        optimizer.step()
        print(f"rank {rank} step {step} local loss {loss.item():.5f}", flush=True)

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    everyone = [None] * world
    dist.all_gather_object(everyone, digest)
    same = all(d == digest for d in everyone)
    print(f"rank {rank} final parameters sha256 {digest}; "
          f"identical on every rank: {same}", flush=True)
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

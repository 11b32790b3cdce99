"""One rank of the Pythonic API test (test_module.py):

    module_worker.py SERVER TLS_DIR GROUP WORLD_SIZE RANK OUT

Runs every collective of fedgather.Group on inputs derived from the rank and
saves the results (torch.save) to OUT. Expected errors are saved as strings.
"""

import sys

import torch

import fedgather


def tensor_input(rank):
    return torch.arange(6, dtype=torch.float32).reshape(2, 3) + 100 * rank


def dict_input(rank):
    return {"w": torch.full((4,), float(rank), dtype=torch.float64),
            "b": torch.tensor([rank, -rank], dtype=torch.int64)}


def main():
    server, tls_dir, group_name, world, rank, out = sys.argv[1:7]
    world, rank = int(world), int(rank)
    # Each rank offers a peer endpoint: every collective still works.
    group = fedgather.Client(server, tls_dir).join(
        group_name, world, rank, peer_listen="127.0.0.1:0")
    res = {"rank": group.rank, "world_size": group.world_size,
           "name": group.name, "identities": group.identities,
           "peer_endpoints": group.peer_endpoints,
           "data_plane": group.data_plane,
           "data_plane_reason": group.data_plane_reason}
    res["all_gather"] = group.all_gather(tensor_input(rank))
    res["contributors"] = group.last_contributors
    res["all_gather_dict"] = group.all_gather(dict_input(rank))
    res["all_reduce_sum"] = group.all_reduce(dict_input(rank), "sum")
    res["weighted_mean"] = group.weighted_mean(
        torch.full((3,), float(rank + 1), dtype=torch.float64), weight=rank + 1)
    res["all_gather_v"] = group.all_gather_v(torch.ones(rank + 1, 2))
    res["all_gather_object"] = group.all_gather_object({"rank": rank, "msg": "hi"})
    t = torch.full((3,), float(rank))
    res["broadcast"] = group.broadcast(t, root=world - 1)
    res["broadcast_same_tensor"] = res["broadcast"] is t
    try:
        group.all_reduce(torch.ones(2, dtype=torch.int64), "mean")
        res["mean_of_ints"] = "no error"
    except fedgather.Error as e:
        res["mean_of_ints"] = ("fedgather.Error", isinstance(e, RuntimeError), str(e))
    group.close()
    torch.save(res, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

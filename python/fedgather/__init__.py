"""fedgather: all_gather and all_reduce across organisations, over mutual TLS.

A participant connects to a fedgather-server with the certificate, key and CA
that ``fedgather provision`` wrote into its TLS directory, joins a group, and
runs collectives on CPU tensors::

    import fedgather
    group = fedgather.Client("127.0.0.1:50051", "pki/site-1").join("demo", 4)
    stacked = group.all_gather(tensor)              # [4, *tensor.shape]
    avg = group.all_reduce(update, "weighted_mean", weight=num_examples)
    group.last_contributors                         # ranks the round used

``import fedgather.torch`` registers the torch.distributed backend
"fedgather" (see fedgather/torch.py).

Every call blocks until the collective has completed on every rank, or fails
with fedgather.Error (a RuntimeError) whose message starts with the status
code (INVALID_ARGUMENT, PERMISSION_DENIED, UNAVAILABLE, DEADLINE_EXCEEDED,
...) and carries the server's message, the same on every rank.
"""

import pickle
from typing import Any, Dict, List, Optional, Union

import torch  # noqa: F401  (loads LibTorch's Python bindings before _C)

from . import _C

Error = _C.Error

__all__ = ["Client", "Group", "Error"]

_REDUCE_OPS = ("sum", "mean", "min", "max", "weighted_mean")
TensorOrDict = Union[torch.Tensor, Dict[str, torch.Tensor]]


class Client:
    """A participant's connection settings: the server and its TLS directory.

    ``tls_dir`` holds cert.pem, key.pem and ca.pem. Nothing is dialled until
    join().
    """

    def __init__(self, server: str, tls_dir: str):
        self.server = server
        self.tls_dir = tls_dir

    def join(self, group: str, world_size: int, rank: Optional[int] = None,
             timeout: float = 300.0, peer_listen: str = "",
             peer_advertise: str = "") -> "Group":
        """Joins ``group``; blocks until every member has joined.

        ``rank`` None lets the server assign ranks by sorted identity.
        ``peer_listen`` (HOST:PORT, port 0 for any) offers the group a peer
        endpoint for the direct data plane, dialled by the others at
        ``peer_advertise`` when given (needed for a wildcard listen host).
        Raises Error: PERMISSION_DENIED when this identity is not a member
        (or there is no such group), INVALID_ARGUMENT for a wrong world size
        or rank, ALREADY_EXISTS when the rank is taken, DEADLINE_EXCEEDED when
        the group did not form within ``timeout`` seconds, UNAVAILABLE when
        the server cannot be reached or refuses the TLS handshake.
        """
        session = _C.Session.join(self.server, self.tls_dir, group,
                                  int(world_size), rank, float(timeout),
                                  peer_listen, peer_advertise)
        return Group(session)


class Group:
    """This participant's membership of a formed group.

    Collectives run one at a time in the order they are called (from any
    thread); each blocks until it completes on every rank. Tensors must be
    CPU tensors; inputs are made contiguous. ``timeout`` (seconds) bounds a
    call on this side; the server's round deadline is the primary bound.
    After each successful collective ``last_contributors`` lists the ranks
    whose contributions the round committed: every rank, except in a group
    with a quorum whose round closed at its deadline (then the missing ranks'
    rows are zeros and reductions cover the contributors only).
    """

    def __init__(self, session):
        self._session = session
        self.last_contributors: List[int] = []

    @property
    def rank(self) -> int:
        return self._session.rank

    @property
    def world_size(self) -> int:
        return self._session.world_size

    @property
    def name(self) -> str:
        return self._session.group

    @property
    def epoch(self) -> int:
        return self._session.epoch

    @property
    def identities(self) -> List[str]:
        """identities[r] is the certificate identity of rank r."""
        return list(self._session.identities)

    @property
    def peer_endpoints(self) -> List[str]:
        """peer_endpoints[r] is the peer endpoint rank r offered, or ""."""
        return list(self._session.peer_endpoints)

    @property
    def data_plane(self) -> str:
        """"direct" when this epoch's collectives go over peer links,
        "relay" when they go through the server (docs/protocol.md, "Data
        planes"). It falls back to "relay" after a failed collective."""
        return self._session.data_plane

    @property
    def data_plane_reason(self) -> str:
        """Why the server chose the data plane, or why it fell back."""
        return self._session.data_plane_reason

    def _done(self, outcome):
        result, contributors = outcome
        self.last_contributors = list(contributors)
        return result

    def all_gather(self, tensors: TensorOrDict, timeout: float = 3600.0):
        """Every rank's tensor stacked in rank order: [world, *shape].

        A dict of name -> tensor returns name -> [world, *shape]; every rank
        must pass the same names, dtypes and shapes (INVALID_ARGUMENT on every
        rank otherwise).
        """
        if isinstance(tensors, dict):
            return self._done(self._session.all_gather_map(
                {k: v.contiguous() for k, v in tensors.items()}, timeout))
        return self._done(self._session.all_gather(tensors.contiguous(),
                                                   timeout))

    def all_gather_v(self, tensor: torch.Tensor,
                     timeout: float = 3600.0) -> List[torch.Tensor]:
        """Every rank's tensor at its own size (dim 0 may differ), in rank order."""
        return self._done(self._session.all_gather_v(tensor.contiguous(),
                                                     timeout))

    def all_gather_bytes(self, data: bytes,
                         timeout: float = 3600.0) -> List[bytes]:
        """Every rank's byte string, in rank order."""
        return self._done(self._session.all_gather_bytes(bytes(data), timeout))

    def all_gather_object(self, obj: Any, timeout: float = 3600.0) -> List[Any]:
        """Every rank's picklable object, in rank order (pickled on the wire).

        Unpickling runs code the sender chose: use it only among parties
        that trust one another's objects, as with torch.distributed.
        """
        return [pickle.loads(part) for part in
                self.all_gather_bytes(pickle.dumps(obj), timeout)]

    def all_reduce(self, tensors: TensorOrDict, op: str = "sum",
                   weight: float = 1.0, timeout: float = 3600.0):
        """The element-wise reduction of every rank's tensor (a new tensor).

        ``op``: sum, mean, min, max or weighted_mean (FedAvg:
        sum(weight_r * x_r) / sum(weight_r), ``weight`` this rank's example
        count, positive). Reduced on the server as the bytes arrive; floating
        tensors accumulate in fp32 (fp64 for float64), integers exactly; mean
        and weighted_mean take floating tensors only. A dict reduces each
        name.
        """
        if op not in _REDUCE_OPS:
            raise ValueError(f"unknown reduce op {op!r}, expected one of "
                             f"{', '.join(_REDUCE_OPS)}")
        if isinstance(tensors, dict):
            return self._done(self._session.all_reduce_map(
                {k: v.contiguous() for k, v in tensors.items()}, op,
                float(weight), timeout))
        return self._done(self._session.all_reduce(
            tensors.contiguous(), op, float(weight), timeout))

    def weighted_mean(self, tensors: TensorOrDict, weight: float,
                      timeout: float = 3600.0):
        """all_reduce(tensors, "weighted_mean", weight): FedAvg's average."""
        return self.all_reduce(tensors, "weighted_mean", weight, timeout)

    def broadcast(self, tensor: torch.Tensor, root: int,
                  timeout: float = 3600.0) -> torch.Tensor:
        """Overwrites ``tensor`` (contiguous) with rank ``root``'s, in place;
        returns it."""
        return self._done(self._session.broadcast(tensor, int(root), timeout))

    def close(self) -> None:
        """Leaves the group (ends its epoch for the other members)."""
        self._session = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

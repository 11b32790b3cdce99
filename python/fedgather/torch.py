"""The torch.distributed backend "fedgather".

After ``import fedgather.torch``::

    dist.init_process_group(
        "fedgather",
        init_method="fedgather://HOST:PORT?group=G&tls_dir=DIR",
        rank=r, world_size=n)

or, with FEDGATHER_SERVER (HOST:PORT), FEDGATHER_TLS_DIR and FEDGATHER_GROUP
in the environment (and RANK and WORLD_SIZE, or the rank and world_size
arguments), ``init_method="env://"`` or no init_method at all. A member
offers a peer endpoint for the direct data plane with the query's
peer_listen=HOST:PORT (and peer_advertise=HOST:PORT), or
FEDGATHER_PEER_LISTEN and FEDGATHER_PEER_ADVERTISE. Then
dist.all_gather, all_gather_into_tensor, all_gather_object, all_reduce (SUM,
AVG, MIN, MAX), broadcast and barrier run over fedgather, with async_op too.

The rendezvous is the fedgather join itself: it blocks until every member of
the group has joined, over mutual TLS, and a rank left out (rank -1 or
omitted) is assigned by the server. No TCPStore and no MASTER_ADDR are
needed; the participants never connect to one another. The store that
init_process_group gets is a _FedgatherStore, which serves only the
store-based barrier that ends init_process_group (its counting add() is an
all_gather over the group). Subgroups (dist.new_group) are not supported.

With env:// and MASTER_ADDR set (torchrun), torch's TCPStore is used for its
barrier and the backend joins the group from FEDGATHER_* when it is created.
"""

import importlib
import itertools
import os
import pickle
import threading
from datetime import timedelta
from typing import Dict, Optional
from urllib.parse import parse_qs, unquote, urlparse

import torch.distributed as dist
# The module (torch.distributed.rendezvous is also the name of a function).
_rendezvous = importlib.import_module("torch.distributed.rendezvous")

from . import _C

BACKEND = "fedgather"

__all__ = ["BACKEND"]


_SESSION_KEY = "fedgather_session_token"
_tokens = itertools.count()
# token -> store. Also what keeps each store's Python object alive: torch
# holds only the C++ side of a Python store, which calls back into it.
_stores: Dict[str, "_FedgatherStore"] = {}


class _FedgatherStore(dist.Store):
    """The store a fedgather rendezvous returns: it holds the joined session.

    set/get are local to this process (nothing in init_process_group needs
    them shared). add(key, 0) reads the local count; add(key, n) with n != 0
    is collective: every rank must call it, in the same order, and the count
    grows by the sum of every rank's n. That is exactly what the store-based
    barrier at the end of init_process_group does.
    """

    def __init__(self, session):
        super().__init__()
        self.session = session
        # The process group factory finds this store's session by this key,
        # through the PrefixStores torch wraps the store in.
        self.token = f"{os.getpid()}-{next(_tokens)}"
        _stores[self.token] = self
        self._data: Dict[str, bytes] = {_SESSION_KEY: self.token.encode()}
        self._counts: Dict[str, int] = {}
        self._lock = threading.Lock()

    def set(self, key, value):
        with self._lock:
            self._data[key] = value if isinstance(value, bytes) else str(value).encode()

    def get(self, key):
        with self._lock:
            if key in self._data:
                return self._data[key]
            if key.endswith("/" + _SESSION_KEY):
                return self._data[_SESSION_KEY]
        raise RuntimeError(
            f"fedgather store: no key {key!r}; the fedgather rendezvous store is "
            "local to each participant (it serves init_process_group only; "
            "dist.new_group is not supported with fedgather)")

    def add(self, key, amount):
        amount = int(amount)
        if amount != 0:
            parts, _ = self.session.all_gather_bytes(
                pickle.dumps((key, amount)), 3600.0)
            total = 0
            for part in parts:
                other_key, other_amount = pickle.loads(part)
                if other_key != key:
                    raise RuntimeError(
                        f"fedgather store: ranks added to different keys "
                        f"({key!r} here, {other_key!r} elsewhere)")
                total += other_amount
            with self._lock:
                self._counts[key] = self._counts.get(key, 0) + total
        with self._lock:
            return self._counts.get(key, 0)

    def check(self, keys):
        with self._lock:
            return all(k in self._data or k in self._counts for k in keys)

    def wait(self, keys, timeout=None):
        if not self.check(keys):
            raise RuntimeError(
                f"fedgather store: keys {keys} are not set here; the fedgather "
                "rendezvous store is local to each participant")

    def num_keys(self):
        with self._lock:
            return len(self._data) + len(self._counts)

    def delete_key(self, key):
        with self._lock:
            return (self._data.pop(key, None) is not None or
                    self._counts.pop(key, None) is not None)


def _join(server: str, tls_dir: str, group: str, world_size: int,
          rank: Optional[int], timeout: timedelta, peer_listen: str = "",
          peer_advertise: str = ""):
    if not server or not tls_dir or not group:
        raise ValueError(
            "fedgather needs the server (HOST:PORT), the TLS directory and the "
            "group: fedgather://HOST:PORT?group=G&tls_dir=DIR, or "
            "FEDGATHER_SERVER, FEDGATHER_TLS_DIR and FEDGATHER_GROUP")
    if world_size is None or world_size < 1:
        raise ValueError("fedgather needs the world size (world_size= or "
                         "WORLD_SIZE)")
    return _C.Session.join(server, tls_dir, group, int(world_size),
                           None if rank is None or rank < 0 else int(rank),
                           timeout.total_seconds(), peer_listen,
                           peer_advertise)


def _peer_from_env():
    """FEDGATHER_PEER_LISTEN and FEDGATHER_PEER_ADVERTISE, "" when unset."""
    return (os.environ.get("FEDGATHER_PEER_LISTEN", ""),
            os.environ.get("FEDGATHER_PEER_ADVERTISE", ""))


def _int_or_none(value) -> Optional[int]:
    return None if value in (None, "") else int(value)


def _fedgather_rendezvous_handler(url: str, timeout: timedelta = dist.default_pg_timeout,
                                  **kwargs):
    result = urlparse(url)
    query = {k: unquote(v[-1]) for k, v in parse_qs(result.query).items()}
    if result.scheme == "env":  # env:// without MASTER_ADDR (see below)
        server = os.environ.get("FEDGATHER_SERVER", "")
        tls_dir = os.environ.get("FEDGATHER_TLS_DIR", "")
        group = os.environ.get("FEDGATHER_GROUP", "")
        rank = _int_or_none(query.get("rank", os.environ.get("RANK")))
        world_size = _int_or_none(query.get("world_size",
                                            os.environ.get("WORLD_SIZE")))
        peer_listen, peer_advertise = _peer_from_env()
    else:
        server = result.netloc
        tls_dir = query.get("tls_dir", "")
        group = query.get("group", "")
        rank = _int_or_none(query.get("rank"))
        world_size = _int_or_none(query.get("world_size"))
        peer_listen, peer_advertise = _peer_from_env()
        peer_listen = query.get("peer_listen", peer_listen)
        peer_advertise = query.get("peer_advertise", peer_advertise)
    session = _join(server, tls_dir, group, world_size, rank, timeout,
                    peer_listen, peer_advertise)
    yield (_FedgatherStore(session), session.rank, session.world_size)
    raise RuntimeError("fedgather: re-rendezvous is not supported")


def _create_process_group(store, rank: int, world_size: int, timeout: timedelta):
    try:
        token = store.get(_SESSION_KEY).decode()
    except Exception:  # not a fedgather rendezvous store
        token = None
    if token is not None and token in _stores:
        session = _stores[token].session
    else:  # env:// with a TCPStore (torchrun): join from the environment
        session = _join(os.environ.get("FEDGATHER_SERVER", ""),
                        os.environ.get("FEDGATHER_TLS_DIR", ""),
                        os.environ.get("FEDGATHER_GROUP", ""), world_size,
                        rank, timeout, *_peer_from_env())
    if session.rank != rank or session.world_size != world_size:
        raise RuntimeError(
            f"fedgather: the group {session.group!r} gave rank "
            f"{session.rank} of {session.world_size}, but the process group "
            f"asks for rank {rank} of {world_size} (dist.new_group is not "
            "supported with fedgather)")
    return _C.create_process_group(session, timeout)


def _register() -> None:
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_process_group)
    handlers = _rendezvous._rendezvous_handlers
    if "fedgather" not in handlers:
        _rendezvous.register_rendezvous_handler(
            "fedgather", _fedgather_rendezvous_handler)
    # env:// takes the fedgather rendezvous when FEDGATHER_SERVER is set and
    # MASTER_ADDR is not (where torch's env:// would fail anyway).
    env_handler = handlers.get("env")
    if env_handler is not None and not getattr(env_handler, "_fedgather", False):
        def env_or_fedgather(url, **kwargs):
            if os.environ.get("FEDGATHER_SERVER") and not os.environ.get(
                    "MASTER_ADDR"):
                return _fedgather_rendezvous_handler(url, **kwargs)
            return env_handler(url, **kwargs)
        env_or_fedgather._fedgather = True
        handlers["env"] = env_or_fedgather


_register()

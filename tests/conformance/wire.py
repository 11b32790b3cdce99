"""A minimal fedgather wire client, written from docs/protocol.md and
proto/fedgather/v1/fedgather.proto alone (not from client/), so that the
conformance tests are a second, independent reading of the contract.

Messages come from `protoc --python_out` (the build puts them on
PYTHONPATH); RPCs are called through gRPC's generic multi-callables, so no
gRPC code generator is needed. Every call carries a deadline and every wait
here is bounded: a test that goes wrong fails, it never hangs.

Threads: each stream has a reader thread that queues what the server sends;
the request side is fed from a queue that gRPC's own thread drains.
"""

import hashlib
import queue
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import grpc

from fedgather.v1 import fedgather_pb2 as pb

SESSION_METHOD = "/fedgather.v1.Rendezvous/Session"
COLLECTIVE_METHOD = "/fedgather.v1.Rendezvous/Collective"
ABORT_ROUND_METHOD = "/fedgather.v1.Admin/AbortRound"

# The deadline of every call: long enough for a loaded 2-core machine, short
# enough that a test which waits for something that never comes fails
# within its ctest TIMEOUT.
CALL_TIMEOUT_S = 45.0
# How long a test waits for one event it expects (a Joined, a heartbeat).
EVENT_TIMEOUT_S = 30.0

_END_OF_REQUESTS = object()


# The digest algorithm of the policy's groups unless a group says otherwise
# (docs/protocol.md, "Digests"): a header declares it, and every digest of
# the round is 32 bytes of it.
DEFAULT_DIGEST = pb.DIGEST_BLAKE3


def digest(data: bytes, algorithm: int = DEFAULT_DIGEST) -> bytes:
    """Digest hashes `data` with `algorithm`: SHA-256 with Python's
    hashlib, BLAKE3 with Debian's b3sum (the Rust implementation, not the C
    one the server and client are built with)."""
    if algorithm == pb.DIGEST_SHA256:
        return hashlib.sha256(data).digest()
    if algorithm == pb.DIGEST_BLAKE3:
        out = subprocess.run(["b3sum", "--raw"], input=data,
                             capture_output=True, check=True,
                             timeout=CALL_TIMEOUT_S).stdout
        assert len(out) == 32, f"b3sum wrote {len(out)} bytes"
        return out
    raise ValueError(f"no digest algorithm {algorithm}")


def open_channel(address: str, root_pem: bytes, key_pem: Optional[bytes],
                 cert_pem: Optional[bytes]) -> grpc.Channel:
    """Open_channel dials `address` over TLS with this client certificate
    (none when key_pem is None). Each channel gets its own subchannel pool,
    so two identities never share a connection."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=root_pem, private_key=key_pem,
        certificate_chain=cert_pem)
    return grpc.secure_channel(address, credentials,
                               options=[("grpc.use_local_subchannel_pool", 1)])


@dataclass
class Ending:
    """How a stream ended: its status code, message and trailing metadata."""
    code: grpc.StatusCode
    details: str
    trailing: Tuple[Tuple[str, str], ...] = ()

    @property
    def final(self) -> Optional[str]:
        """The value of `fedgather-final`, or None when the server did not
        finish the stream on purpose."""
        for key, value in self.trailing:
            if key == "fedgather-final":
                return value
        return None


class _Stream:
    """One bidirectional stream: frames the test sends go through an outbox;
    frames the server sends, as raw bytes, and then the Ending, go into an
    inbox."""

    def __init__(self, channel: grpc.Channel, method: str,
                 serialize: Callable, timeout_s: float):
        self._outbox: "queue.Queue" = queue.Queue()
        self._inbox: "queue.Queue" = queue.Queue()
        self._finished = threading.Event()
        callable_ = channel.stream_stream(
            method, request_serializer=serialize,
            response_deserializer=lambda raw: raw)
        self._call = callable_(self._requests(), timeout=timeout_s)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.ending: Optional[Ending] = None

    def _requests(self):
        while not self._finished.is_set():
            try:
                item = self._outbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if item is _END_OF_REQUESTS:
                return
            yield item

    def _read(self):
        try:
            for raw in self._call:
                self._inbox.put(raw)
            ending = Ending(self._call.code(), self._call.details() or "",
                            tuple(self._call.trailing_metadata() or ()))
        except grpc.RpcError as error:
            ending = Ending(error.code(), error.details() or "",
                            tuple(error.trailing_metadata() or ()))
        self._finished.set()
        self._inbox.put(ending)

    def send(self, message) -> None:
        """Send queues one message (gRPC serializes and sends it)."""
        self._outbox.put(message)

    def half_close(self) -> None:
        self._outbox.put(_END_OF_REQUESTS)

    def cancel(self) -> None:
        """Cancel breaks the stream the way a lost connection does: the
        server sees no half-close and no `fedgather-final` goes out."""
        self._call.cancel()
        self._reader.join(timeout=EVENT_TIMEOUT_S)

    def next_raw(self, timeout_s: float = EVENT_TIMEOUT_S):
        """Next_raw returns the next frame's bytes, or the Ending once the
        stream is over. Raises queue.Empty after timeout_s."""
        if self.ending is not None:
            return self.ending
        item = self._inbox.get(timeout=timeout_s)
        if isinstance(item, Ending):
            self.ending = item
        return item

    def drain(self, timeout_s: float = CALL_TIMEOUT_S) -> List[bytes]:
        """Drain reads every remaining frame until the stream ends (bounded
        by the call's deadline) and returns them; self.ending is then set."""
        frames = []
        while True:
            item = self.next_raw(timeout_s)
            if isinstance(item, Ending):
                return frames
            frames.append(item)


class Session(_Stream):
    """A member's Session stream; it sends `join` first (unless None).
    Heartbeats are sent every
    heartbeat_interval_ms from a thread once Joined arrives, unless
    `heartbeats` is False (then the test sends them)."""

    def __init__(self, channel: grpc.Channel, join: Optional[pb.JoinRequest],
                 heartbeats: bool = True, timeout_s: float = CALL_TIMEOUT_S):
        super().__init__(channel, SESSION_METHOD,
                         pb.SessionRequest.SerializeToString, timeout_s)
        self._heartbeats = heartbeats
        self._stop_heartbeats = threading.Event()
        if join is not None:
            self.send(pb.SessionRequest(join=join))

    def next_event(self, timeout_s: float = EVENT_TIMEOUT_S):
        """Next_event returns the next SessionEvent, or the Ending."""
        item = self.next_raw(timeout_s)
        if isinstance(item, Ending):
            return item
        return pb.SessionEvent.FromString(item)

    def wait_joined(self, timeout_s: float = EVENT_TIMEOUT_S) -> pb.Joined:
        """Wait_joined skips heartbeat answers until Joined; fails with the
        session's Ending (as an AssertionError) if the session ends first."""
        while True:
            event = self.next_event(timeout_s)
            if isinstance(event, Ending):
                raise AssertionError(f"the session ended before Joined: "
                                     f"{event.code} {event.details}")
            if event.HasField("joined"):
                if self._heartbeats:
                    interval = event.joined.heartbeat_interval_ms / 1000.0
                    threading.Thread(target=self._beat, args=(interval,),
                                     daemon=True).start()
                return event.joined

    def _beat(self, interval_s: float) -> None:
        while not self._stop_heartbeats.wait(interval_s):
            if self._finished.is_set():
                return
            self.send(pb.SessionRequest(heartbeat=pb.Heartbeat()))

    def heartbeat(self) -> None:
        self.send(pb.SessionRequest(heartbeat=pb.Heartbeat()))

    def leave(self) -> None:
        self._stop_heartbeats.set()
        self.send(pb.SessionRequest(leave=pb.Leave()))

    def close(self) -> None:
        self._stop_heartbeats.set()
        self.cancel()


class Collective(_Stream):
    """One Collective stream: the test sends CollectiveFrames; what the
    server sends is kept as raw bytes (so forwarded frames can be compared
    byte for byte with what their uploader serialized)."""

    def __init__(self, channel: grpc.Channel,
                 timeout_s: float = CALL_TIMEOUT_S):
        super().__init__(channel, COLLECTIVE_METHOD, lambda raw: raw,
                         timeout_s)

    def send_frame(self, frame: pb.CollectiveFrame) -> bytes:
        """Send_frame serializes and sends one frame; returns its bytes."""
        raw = frame.SerializeToString()
        self.send(raw)
        return raw

    def next_frame(self, timeout_s: float = EVENT_TIMEOUT_S):
        """Next_frame returns the next CollectiveFrame, or the Ending."""
        item = self.next_raw(timeout_s)
        if isinstance(item, Ending):
            return item
        return pb.CollectiveFrame.FromString(item)


def abort_round(channel: grpc.Channel, group: str,
                reason: str) -> pb.AbortRoundReply:
    """Abort_round calls Admin.AbortRound (raises grpc.RpcError)."""
    call = channel.unary_unary(
        ABORT_ROUND_METHOD,
        request_serializer=pb.AbortRoundRequest.SerializeToString,
        response_deserializer=pb.AbortRoundReply.FromString)
    return call(pb.AbortRoundRequest(group=group, reason=reason),
                timeout=CALL_TIMEOUT_S)


def header_frame(**fields) -> pb.CollectiveFrame:
    """Header_frame: a header with `fields`; it declares DEFAULT_DIGEST
    unless `fields` names a digest_algorithm."""
    fields.setdefault("digest_algorithm", DEFAULT_DIGEST)
    return pb.CollectiveFrame(header=pb.CollectiveHeader(**fields))


def chunk_frame(rank: int, tensor_index: int, offset: int,
                data: bytes) -> pb.CollectiveFrame:
    return pb.CollectiveFrame(chunk=pb.Chunk(
        rank=rank, tensor_index=tensor_index, offset=offset, data=data))


def end_frame(rank: int, digest: bytes) -> pb.CollectiveFrame:
    return pb.CollectiveFrame(end=pb.ContributionEnd(rank=rank, digest=digest))


@dataclass
class Received:
    """What one rank's Collective stream brought back, parsed."""
    raw: List[bytes] = field(default_factory=list)
    frames: List[pb.CollectiveFrame] = field(default_factory=list)
    ending: Optional[Ending] = None

    @property
    def commit(self) -> Optional[pb.Commit]:
        if self.frames and self.frames[-1].HasField("commit"):
            return self.frames[-1].commit
        return None


def receive_all(stream: Collective) -> Received:
    raw = stream.drain()
    return Received(raw=raw, frames=[pb.CollectiveFrame.FromString(r)
                                     for r in raw], ending=stream.ending)


def cut(size: int, chunk_bytes: int) -> List[Tuple[int, int]]:
    """Cut returns the (offset, length) pieces of a tensor of `size` bytes
    cut at most chunk_bytes each; none for an empty tensor."""
    return [(offset, min(chunk_bytes, size - offset))
            for offset in range(0, size, chunk_bytes)]


def chunk_frames(rank: int, tensors: Sequence[bytes],
                 chunk_bytes: int) -> List[pb.CollectiveFrame]:
    """Chunk_frames: every tensor's bytes, in order, cut chunk_bytes."""
    return [chunk_frame(rank, index, offset, data[offset:offset + length])
            for index, data in enumerate(tensors)
            for offset, length in cut(len(data), chunk_bytes)]

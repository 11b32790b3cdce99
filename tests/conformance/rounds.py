"""Running one round of a collective over the wire, every rank at once, and
the checks every test shares: what each rank received, byte for byte, and
the commit's digests. Also the base class of the conformance tests: one
server per test class, a fresh group per test."""

import unittest
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import cluster
import wire
from contribution import Tensor, element_size, reduce
from fedgather.v1 import fedgather_pb2 as pb


@dataclass
class Plan:
    """What one rank sends: its header's fields and tensors, the size it
    cuts its chunks at, and its end's digest (default: the right one)."""
    tensors: List[Tensor]
    chunk_bytes: int
    header: Dict = field(default_factory=dict)
    end_digest: Optional[bytes] = None
    sends_chunks: bool = True

    @property
    def payload(self) -> bytes:
        return b"".join(t.data for t in self.tensors) if self.sends_chunks \
            else b""


@dataclass
class Sent:
    """The raw frames one rank sent, for comparing with what others got."""
    header: bytes
    chunks: List[bytes]


def start_rank(members: "cluster.Members", rank: int, seq: int, op: int,
               plan: Plan):
    """Start_rank opens rank's Collective stream and sends its header,
    chunks, end and half-close. Returns (stream, Sent)."""
    stream = wire.Collective(members.channels[rank])
    header = stream.send_frame(wire.header_frame(
        group=members.group, epoch=members.epoch, seq=seq, op=op, rank=rank,
        tensors=[t.spec for t in plan.tensors],
        **{"digest_algorithm": members.digest_algorithm, **plan.header}))
    chunks = []
    if plan.sends_chunks:
        for frame in wire.chunk_frames(rank, [t.data for t in plan.tensors],
                                       plan.chunk_bytes):
            chunks.append(stream.send_frame(frame))
    digest = plan.end_digest if plan.end_digest is not None else \
        wire.digest(plan.payload, members.digest_algorithm)
    stream.send_frame(wire.end_frame(rank, digest))
    stream.half_close()
    return stream, Sent(header, chunks)


def run_round(members: "cluster.Members", seq: int, op: int,
              plans: Sequence[Plan]):
    """Run_round runs one round with every rank at once; returns each
    rank's Received and Sent, in rank order."""
    started = [start_rank(members, rank, seq, op, plan)
               for rank, plan in enumerate(plans)]
    received = [wire.receive_all(stream) for stream, _ in started]
    return received, [sent for _, sent in started]


class ConformanceTest(unittest.TestCase):
    """One fedgather-server for the whole test class (set up once); each
    test takes a fresh group with `join(world_size)`."""

    server_flags: Dict[str, str] = {}

    @classmethod
    def setUpClass(cls):
        cls.server = cluster.Server(cls.server_flags)
        try:
            cls.prepare(cls.server)
            cls.server.start()
        except Exception:  # tearDownClass does not run: clean up here
            cls.server.stop()
            cls.server.remove()
            raise

    @classmethod
    def prepare(cls, server: "cluster.Server") -> None:
        """Prepare runs before the server starts (certificates, flags)."""

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        log = cls.server.log()
        cls.server.remove()
        if code != 0:
            raise AssertionError(f"fedgather-server exited {code}: {log}")

    def join(self, world_size: int, family: str = "") -> "cluster.Members":
        """Join forms a fresh group of `family` (default: w<world_size>)
        with site-1.. as ranks 0..; it is left at the test's end."""
        members = cluster.Members(
            self.server, self.server.new_group(family or f"w{world_size}"),
            world_size)
        self.addCleanup(members.close)
        return members

    # ---- checks ----

    def assertOk(self, received: wire.Received, what: str = ""):
        self.assertIsNotNone(received.ending, what)
        self.assertEqual(received.ending.code, wire.grpc.StatusCode.OK,
                         f"{what}: {received.ending.details}")
        self.assertIsNotNone(received.commit, f"{what}: no commit last")

    def assertRefused(self, ending, code, *named):
        """The server ended a stream on purpose (`fedgather-final`) with
        `code`, and its message names each of `named`."""
        self.assertEqual(ending.code, code, ending.details)
        self.assertIsNotNone(ending.final, ending.details)
        for what in named:
            self.assertIn(what, ending.details)

    def assertCommit(self, members, seq: int, commit: pb.Commit,
                     payloads: Dict[int, bytes]):
        """The commit names the round and lists each contributor's rank,
        identity, digest (in the epoch's algorithm) and byte count, in rank
        order."""
        self.assertEqual((commit.group, commit.epoch, commit.seq),
                         (members.group, members.epoch, seq))
        self.assertEqual(commit.digest_algorithm, members.digest_algorithm)
        self.assertEqual([c.rank for c in commit.contributions],
                         sorted(payloads))
        for entry in commit.contributions:
            payload = payloads[entry.rank]
            self.assertEqual(entry.identity, members.identities[entry.rank])
            self.assertEqual(entry.digest,
                             wire.digest(payload, members.digest_algorithm),
                             f"rank {entry.rank}'s digest")
            self.assertEqual(entry.bytes, len(payload))

    def assertForwarded(self, received: wire.Received, receiver: int,
                        senders: Dict[int, Sent]):
        """The receiver got exactly each sender's header, then its chunks
        in order, as the sender's own frame bytes, and then the commit;
        frames of different ranks may interleave."""
        got: Dict[int, List[bytes]] = {rank: [] for rank in senders}
        for raw, frame in zip(received.raw[:-1], received.frames[:-1]):
            kind = frame.WhichOneof("kind")
            self.assertIn(kind, ("header", "chunk"),
                          f"rank {receiver} got a {kind} frame")
            sender = frame.header.rank if kind == "header" else \
                frame.chunk.rank
            self.assertIn(sender, got, f"rank {receiver} got rank "
                          f"{sender}'s {kind}")
            got[sender].append(raw)
        for sender, sent in senders.items():
            self.assertEqual(got[sender], [sent.header] + sent.chunks,
                             f"rank {receiver}: frames of rank {sender}")

    def assertFailedAlike(self, received: Sequence[wire.Received],
                          code, *names: str):
        """Every rank's stream ended with the same status `code`, marked
        fedgather-final, whose message names each of `names`."""
        details = {r.ending.details for r in received}
        for rank, r in enumerate(received):
            self.assertEqual(r.ending.code, code,
                             f"rank {rank}: {r.ending.details}")
            self.assertIsNone(r.commit, f"rank {rank} got a commit")
            self.assertIsNotNone(r.ending.final, f"rank {rank}")
        self.assertEqual(len(details), 1, f"ranks got different errors: "
                         f"{details}")
        for name in names:
            self.assertIn(name, received[0].ending.details)

    def assertReduced(self, received: wire.Received, plans: Sequence[Plan],
                      reduce_op: int, max_chunk: int,
                      algorithm: int = wire.DEFAULT_DIGEST):
        """The result chunks carry rank = world size, run per tensor in
        order from offset 0, end on element boundaries, hold at most
        max_chunk bytes, and equal the reference; the commit's
        result_digest covers them."""
        world = len(plans)
        tensors = plans[0].tensors
        weights = [p.header.get("weight", 0.0) for p in plans]
        chunks = [f.chunk for f in received.frames[:-1]]
        self.assertEqual(len(chunks), len(received.frames) - 1,
                         "only result chunks before the commit")
        results = [bytearray() for _ in tensors]
        previous_index = 0
        for chunk in chunks:
            self.assertEqual(chunk.rank, world)
            self.assertGreaterEqual(chunk.tensor_index, previous_index)
            previous_index = chunk.tensor_index
            result = results[chunk.tensor_index]
            self.assertEqual(chunk.offset, len(result))
            size = element_size(tensors[chunk.tensor_index].dtype)
            self.assertTrue(0 < len(chunk.data) <= max_chunk)
            self.assertEqual(len(chunk.data) % size, 0,
                             "a result chunk ends on an element boundary")
            result += chunk.data
        for index, t in enumerate(tensors):
            expected = reduce(reduce_op, t.dtype,
                              [p.tensors[index].data for p in plans],
                              weights)
            self.assertEqual(bytes(results[index]), expected,
                             f"tensor {t.name}")
        self.assertEqual(received.commit.result_digest,
                         wire.digest(b"".join(results), algorithm))

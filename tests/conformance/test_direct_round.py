"""The direct data plane's control frames (docs/protocol.md, "Data planes"):
members that offer peer endpoints form a direct epoch once each reports its
peer links, and a direct round carries headers, claims, deliveries and the
commit, never a tensor byte. The server cannot see the peer links, so this
client reports links it never made and checks only what the server does
with the frames: who gets which header, when the claims and the commit
come, and every refusal the contract lists."""

import queue
import unittest

import grpc

import cluster
import wire
from contribution import mixed, reducible, tensor
from fedgather.v1 import fedgather_pb2 as pb
from rounds import ConformanceTest


def wait_event(session: wire.Session, field_name: str):
    """Wait_event skips heartbeat answers until an event with `field_name`;
    fails with the session's Ending if the session ends first."""
    while True:
        event = session.next_event()
        if isinstance(event, wire.Ending):
            raise AssertionError(f"the session ended: {event.code} "
                                 f"{event.details}")
        if event.HasField(field_name):
            return getattr(event, field_name)


class DirectRank:
    """One rank's stream of a direct round: its header (declaring the
    direct plane) and its end (the claim) go at once; the rest step by
    step."""

    def __init__(self, members, rank: int, seq: int, op: int, tensors,
                 payload: bytes, header=None, claim=None):
        self.rank = rank
        self.stream = wire.Collective(members.channels[rank])
        fields = {"digest_algorithm": members.digest_algorithm,
                  "data_plane": pb.DATA_PLANE_DIRECT, **(header or {})}
        self.header = self.stream.send_frame(wire.header_frame(
            group=members.group, epoch=members.epoch, seq=seq, op=op,
            rank=rank, tensors=[t.spec for t in tensors], **fields))
        self.claim = claim if claim is not None else \
            wire.digest(payload, members.digest_algorithm)
        self.stream.send_frame(wire.end_frame(rank, self.claim))

    def until_claims(self):
        """Until_claims returns the raw frames before the claims and the
        claims (a Commit); fails if the stream ends first."""
        before = []
        while True:
            item = self.stream.next_raw()
            if isinstance(item, wire.Ending):
                raise AssertionError(f"rank {self.rank}'s stream ended before "
                                     f"the claims: {item.code} {item.details}")
            frame = pb.CollectiveFrame.FromString(item)
            if frame.HasField("claims"):
                return before, frame.claims
            before.append(item)

    def send_delivery(self, code: int = 0, message: str = "",
                      result_digest: bytes = b"") -> None:
        """Send_delivery sends the Delivery and the half-close."""
        self.stream.send_frame(pb.CollectiveFrame(delivery=pb.Delivery(
            rank=self.rank, code=code, message=message,
            result_digest=result_digest)))
        self.stream.half_close()




def deliver_all(ranks, delivery=lambda rank: {}):
    """Deliver_all sends every rank's Delivery (`delivery(rank)` gives its
    fields) and half-close, then returns what each stream brought after
    the claims, in rank order."""
    for rank in ranks:
        rank.send_delivery(**delivery(rank.rank))
    return [wire.receive_all(rank.stream) for rank in ranks]


class DirectRoundTest(ConformanceTest):

    def form(self, world_size: int = 3) -> "cluster.Members":
        """Form: a direct epoch of the `direct` family, every member having
        reported its peer links OK."""
        members = cluster.Members(self.server, self.server.new_group("direct"),
                                  world_size, peer_endpoints=True)
        self.addCleanup(members.close)
        for joined in members.joined:
            self.assertEqual(joined.data_plane, pb.DATA_PLANE_DIRECT)
            self.assertEqual([m.peer_endpoint for m in joined.members],
                             [f"127.0.0.1:{7001 + r}"
                              for r in range(world_size)])
        for session in members.sessions:
            session.send(pb.SessionRequest(peer_links=pb.PeerLinks(code=0)))
        for session in members.sessions:
            chosen = wait_event(session, "data_plane_chosen")
            self.assertEqual(chosen.data_plane, pb.DATA_PLANE_DIRECT,
                             chosen.reason)
        return members

    def assertHeadersFromEveryOtherRank(self, ranks, before):
        """Each rank got every other rank's header bytes, and nothing
        else, before the claims."""
        for rank, frames in zip(ranks, before):
            self.assertEqual(sorted(frames), sorted(
                r.header for r in ranks if r.rank != rank.rank),
                f"rank {rank.rank}'s frames before the claims")

    def assertClaims(self, members, seq, claims, ranks, sizes):
        self.assertEqual((claims.group, claims.epoch, claims.seq),
                         (members.group, members.epoch, seq))
        self.assertEqual([(c.rank, c.identity, c.digest, c.bytes)
                          for c in claims.contributions],
                         [(r.rank, members.identities[r.rank], r.claim,
                           sizes[r.rank]) for r in ranks])

    def test_an_all_gather_commits_the_claims_once_every_rank_delivered(self):
        members = self.form()
        parts = [mixed(rank) for rank in range(3)]
        payloads = [b"".join(t.data for t in p) for p in parts]
        ranks = [DirectRank(members, r, 0, pb.ALL_GATHER, parts[r],
                            payloads[r]) for r in range(3)]
        got = [rank.until_claims() for rank in ranks]
        self.assertHeadersFromEveryOtherRank(ranks, [g[0] for g in got])
        for _, claims in got:
            self.assertClaims(members, 0, claims, ranks,
                              [len(p) for p in payloads])
        # No commit while a rank has not delivered.
        ranks[0].send_delivery()
        ranks[1].send_delivery()
        with self.assertRaises(queue.Empty):
            ranks[0].stream.next_raw(timeout_s=1.0)
        ranks[2].send_delivery()
        received = [wire.receive_all(rank.stream) for rank in ranks]
        for rank, r in enumerate(received):
            self.assertOk(r, f"rank {rank}")
            self.assertEqual(len(r.frames), 1, "only the commit follows")
            self.assertEqual(list(r.commit.contributions),
                             list(got[rank][1].contributions))

    def test_a_broadcast_sends_every_header_and_a_non_root_claims_no_bytes(
            self):
        members = self.form()
        root = 2
        data = [tensor("w", pb.F32, [64, 3], 9)]
        payload = b"".join(t.data for t in data)
        ranks = [DirectRank(members, r, 0, pb.BROADCAST, data,
                            payload if r == root else b"",
                            header={"root": root}) for r in range(3)]
        got = [rank.until_claims() for rank in ranks]
        self.assertHeadersFromEveryOtherRank(ranks, [g[0] for g in got])
        for _, claims in got:
            self.assertClaims(members, 0, claims, ranks,
                              [0, 0, len(payload)])
        for rank, r in enumerate(deliver_all(ranks)):
            self.assertOk(r, f"rank {rank}")

    def test_a_non_root_claiming_bytes_fails_every_rank(self):
        members = self.form()
        data = [tensor("w", pb.F32, [8], 9)]
        payload = b"".join(t.data for t in data)
        claim = wire.digest(b"not nothing", members.digest_algorithm)
        ranks = [DirectRank(members, r, 0, pb.BROADCAST, data,
                            payload if r == 0 else b"",
                            header={"root": 0},
                            claim=claim if r == 1 else None)
                 for r in range(3)]
        received = [wire.receive_all(rank.stream) for rank in ranks]
        self.assertFailedAlike(received, grpc.StatusCode.DATA_LOSS,
                               "holds no bytes", claim.hex())

    def reduce_round(self, members, seq=0):
        parts = [reducible(rank, pb.SUM) for rank in range(3)]
        return [DirectRank(members, r, seq, pb.ALL_REDUCE, parts[r],
                           b"".join(t.data for t in parts[r]),
                           header={"reduce": pb.SUM}) for r in range(3)]

    def test_an_all_reduce_commits_the_result_every_rank_holds(self):
        members = self.form()
        ranks = self.reduce_round(members)
        got = [rank.until_claims() for rank in ranks]
        # Every header goes to every rank (weights, and that all are in).
        self.assertHeadersFromEveryOtherRank(ranks, [g[0] for g in got])
        result = wire.digest(b"the result", members.digest_algorithm)
        for rank, r in enumerate(deliver_all(
                ranks, lambda rank: {"result_digest": result})):
            self.assertOk(r, f"rank {rank}")
            self.assertEqual(r.commit.result_digest, result)

    def test_all_reduce_results_that_differ_fail_every_rank(self):
        members = self.form()
        ranks = self.reduce_round(members)
        for rank in ranks:
            rank.until_claims()
        one = wire.digest(b"one", members.digest_algorithm)
        other = wire.digest(b"other", members.digest_algorithm)
        received = deliver_all(ranks, lambda rank: {
            "result_digest": other if rank == 2 else one})
        self.assertFailedAlike(received, grpc.StatusCode.DATA_LOSS,
                               "the ranks' results differ", one.hex(),
                               other.hex())

    def test_an_all_reduce_delivery_without_its_result_is_refused(self):
        members = self.form()
        ranks = self.reduce_round(members)
        for rank in ranks:
            rank.until_claims()
        received = deliver_all(ranks)
        self.assertFailedAlike(received, grpc.StatusCode.INVALID_ARGUMENT,
                               "result_digest")

    def test_a_failed_delivery_fails_every_rank_and_the_epoch_relays(self):
        members = self.form()
        parts = [mixed(rank) for rank in range(3)]
        ranks = [DirectRank(members, r, 0, pb.ALL_GATHER, parts[r],
                            b"".join(t.data for t in parts[r]))
                 for r in range(3)]
        for rank in ranks:
            rank.until_claims()
        received = deliver_all(ranks, lambda rank: {
            "code": grpc.StatusCode.DEADLINE_EXCEEDED.value[0] if rank == 1
            else 0, "message": "the link from rank 0 stalled"})
        self.assertFailedAlike(
            received, grpc.StatusCode.DEADLINE_EXCEEDED,
            f"rank 1 ({members.identities[1]}) reports: "
            "the link from rank 0 stalled")
        # The epoch is on the relay now: a header declaring direct is
        # refused, naming the plane.
        refused = [DirectRank(members, r, 1, pb.ALL_GATHER, parts[r],
                              b"".join(t.data for t in parts[r]))
                   for r in range(3)]
        self.assertFailedAlike([wire.receive_all(r.stream) for r in refused],
                               grpc.StatusCode.INVALID_ARGUMENT,
                               "declares data_plane direct",
                               "runs on the relay plane")

    def test_a_chunk_in_a_direct_round_fails_every_rank(self):
        members = self.form()
        data = [tensor("w", pb.U8, [16], 1)]
        stream = wire.Collective(members.channels[0])
        stream.send_frame(wire.header_frame(
            group=members.group, epoch=members.epoch, seq=0,
            op=pb.ALL_GATHER, rank=0, tensors=[t.spec for t in data],
            digest_algorithm=members.digest_algorithm,
            data_plane=pb.DATA_PLANE_DIRECT))
        stream.send_frame(wire.chunk_frame(0, 0, 0, data[0].data))
        others = [DirectRank(members, r, 0, pb.ALL_GATHER, data,
                             data[0].data) for r in (1, 2)]
        received = [wire.receive_all(stream)] + \
            [wire.receive_all(r.stream) for r in others]
        self.assertFailedAlike(received, grpc.StatusCode.INVALID_ARGUMENT,
                               "direct plane")

    def test_a_header_declaring_the_relay_in_a_direct_epoch_is_refused(self):
        members = self.form()
        data = [tensor("w", pb.U8, [16], 1)]
        ranks = [DirectRank(members, r, 0, pb.ALL_GATHER, data, data[0].data,
                            header={"data_plane": pb.DATA_PLANE_RELAY}
                            if r == 0 else None) for r in range(3)]
        self.assertFailedAlike([wire.receive_all(r.stream) for r in ranks],
                               grpc.StatusCode.INVALID_ARGUMENT,
                               "rank 0", "declares data_plane relay",
                               "runs on the direct plane")


if __name__ == "__main__":
    unittest.main()

"""Every row of protocol.md's error tables for a round ("a round fails
with", the op rules, the limits) and for a join: the status code, that the
message names what and where, and, where the round fails, that every rank
gets the same status."""

import unittest

import grpc

import cluster
import wire
from contribution import mixed, reducible, tensor
from fedgather.v1 import fedgather_pb2 as pb
from rounds import ConformanceTest, Plan, run_round, start_rank

INVALID = grpc.StatusCode.INVALID_ARGUMENT


class RoundErrorsTest(ConformanceTest):

    def names(self, details, members=None, seq=None, rank=None):
        """The message names the group, the seq and the rank."""
        if members is not None:
            self.assertIn(members.group, details)
        if seq is not None:
            self.assertRegex(details, rf"seq\D{{0,3}}{seq}\b")
        if rank is not None:
            self.assertRegex(details, rf"rank\D{{0,3}}{rank}\b")

    def fail_round(self, world_size, bad_rank, bad_frames, op=pb.ALL_GATHER,
                   seq=0, members=None, tensors_of_rank=mixed):
        """Rank bad_rank sends bad_frames (frames or raw bytes; a header
        first) and leaves its stream open for the server to end (a
        half-close before the end would detach it); the others contribute
        properly. Returns every rank's Received."""
        members = members or self.join(world_size)
        plans = [Plan(tensors_of_rank(rank), 1000)
                 for rank in range(world_size)]
        streams = []
        for rank in range(world_size):
            if rank == bad_rank:
                stream = wire.Collective(members.channels[rank])
                for frame in bad_frames(members, plans[rank]):
                    stream.send(frame if isinstance(frame, bytes)
                                else frame.SerializeToString())
            else:
                stream, _ = start_rank(members, rank, seq, op, plans[rank])
            streams.append(stream)
        return members, [wire.receive_all(s) for s in streams]

    def header(self, members, rank, seq=0, op=pb.ALL_GATHER, tensors=None,
               **fields):
        return wire.header_frame(
            group=members.group, epoch=members.epoch, seq=seq, op=op,
            rank=rank, tensors=[t.spec for t in (tensors or mixed(rank))],
            **fields)

    def assertRoundFails(self, received, members, code, rank, seq=0):
        """Every rank got the same `code`, naming the group, seq and `rank`
        (an int, or a tuple of ranks that must all be named)."""
        self.assertFailedAlike(received, code)
        for named in (rank if isinstance(rank, tuple) else (rank,)):
            self.names(received[0].ending.details, members, seq, named)

    # ---- "a round fails with" INVALID_ARGUMENT ----

    def test_a_header_declares_another_digest_algorithm(self):
        # The group names contributions by BLAKE3 (the policy's default).
        def frames(members, plan):
            return [self.header(members, 1, digest_algorithm=pb.DIGEST_SHA256)]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)
        self.assertIn("declares digest_algorithm sha256",
                      received[0].ending.details)
        self.assertIn("by blake3", received[0].ending.details)

    def test_a_header_without_a_digest_algorithm_declares_sha256(self):
        def frames(members, plan):
            return [self.header(
                members, 1,
                digest_algorithm=pb.DIGEST_ALGORITHM_UNSPECIFIED)]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)
        self.assertIn("unset, which means sha256", received[0].ending.details)

    def test_a_header_names_an_unknown_digest_algorithm(self):
        def frames(members, plan):
            return [self.header(members, 1, digest_algorithm=7)]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)
        self.assertIn("names digest algorithm 7", received[0].ending.details)

    def test_fingerprints_disagree(self):
        def frames(members, plan):
            other = mixed(1)
            other[1] = tensor("half", pb.BF16, [777], 1)
            return [self.header(members, 1, tensors=other)]
        members, received = self.fail_round(2, 1, frames)
        # Whichever header came second, the message names both ranks.
        self.assertRoundFails(received, members, INVALID, rank=(0, 1))
        self.assertIn("half", received[0].ending.details)

    def test_malformed_frame(self):
        def frames(members, plan):
            return [self.header(members, 1), b"\x12\xff\xff\xff"]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_chunk_out_of_order(self):
        def frames(members, plan):
            data = plan.tensors[0].data
            return [self.header(members, 1),
                    wire.chunk_frame(1, 0, 0, data[:100]),
                    wire.chunk_frame(1, 0, 200, data[200:300])]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_chunk_for_a_later_tensor_first(self):
        def frames(members, plan):
            return [self.header(members, 1),
                    wire.chunk_frame(1, 1, 0, plan.tensors[1].data[:10])]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_chunk_for_a_tensor_index_past_the_fingerprint(self):
        def frames(members, plan):
            return [self.header(members, 1),
                    wire.chunk_frame(1, 99, 0, b"x")]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_empty_chunk(self):
        def frames(members, plan):
            return [self.header(members, 1), wire.chunk_frame(1, 0, 0, b"")]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_chunk_over_the_limit(self):
        def frames(members, plan):
            big = [tensor("big", pb.F32, [300_000], 1)]
            return [self.header(members, 1, tensors=big),
                    wire.chunk_frame(1, 0, 0,
                                     big[0].data[:members.max_chunk + 1])]
        members = self.join(2)
        plan0 = Plan([tensor("big", pb.F32, [300_000], 0)], 1 << 20)
        stream0, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plan0)
        bad = wire.Collective(members.channels[1])
        for frame in frames(members, None):
            bad.send_frame(frame)
        received = [wire.receive_all(stream0), wire.receive_all(bad)]
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_chunk_past_the_declared_size(self):
        def frames(members, plan):
            data = plan.tensors[2].data  # "brain": 128 bytes
            return [self.header(members, 1),
                    *wire.chunk_frames(1, [t.data for t in plan.tensors[:2]],
                                       4096),
                    wire.chunk_frame(1, 2, 0, data + b"\0\0")]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_end_before_all_bytes(self):
        def frames(members, plan):
            return [self.header(members, 1),
                    wire.chunk_frame(1, 0, 0, plan.tensors[0].data[:8]),
                    wire.end_frame(1, wire.digest(plan.payload))]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_frame_after_the_end(self):
        # Rank 0 holds back its end, so the round cannot commit before the
        # server reads rank 1's frame after its end.
        members = self.join(2)
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        held = wire.Collective(members.channels[0])
        for frame in [self.header(members, 0), *wire.chunk_frames(
                0, [t.data for t in plans[0].tensors], 4096)]:
            held.send_frame(frame)
        late = wire.Collective(members.channels[1])
        for frame in [self.header(members, 1),
                      *wire.chunk_frames(1, [t.data for t in plans[1].tensors],
                                         4096),
                      wire.end_frame(1, wire.digest(plans[1].payload)),
                      wire.chunk_frame(1, 0, 0, b"late")]:
            late.send_frame(frame)
        late.half_close()
        received = [wire.receive_all(held), wire.receive_all(late)]
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_end_naming_another_rank(self):
        def frames(members, plan):
            return [self.header(members, 1),
                    *wire.chunk_frames(1, [t.data for t in plan.tensors],
                                       4096),
                    wire.end_frame(0, wire.digest(plan.payload))]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_chunk_naming_another_rank(self):
        def frames(members, plan):
            return [self.header(members, 1),
                    wire.chunk_frame(0, 0, 0, plan.tensors[0].data[:8])]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_duplicate_header_on_a_stream(self):
        def frames(members, plan):
            return [self.header(members, 1), self.header(members, 1)]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_chunk_before_the_header_is_refused_naming_the_stream(self):
        members = self.join(2)
        stream = wire.Collective(members.channels[0])
        stream.send_frame(wire.chunk_frame(0, 0, 0, b"early"))
        stream.half_close()
        received = wire.receive_all(stream)
        self.assertEqual(received.ending.code, INVALID,
                         received.ending.details)
        self.assertIsNotNone(received.ending.final)
        self.assertIn("header", received.ending.details)
        # No round was touched: the group runs seq 0 normally.
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        for r in run_round(members, 0, pb.ALL_GATHER, plans)[0]:
            self.assertOk(r)

    # ---- the op rules: INVALID_ARGUMENT (UNIMPLEMENTED) on every rank ----

    def test_header_whose_op_cannot_take_its_fingerprint(self):
        def frames(members, plan):  # ALL_GATHER_BYTES takes one U8 tensor
            return [self.header(members, 1, op=pb.ALL_GATHER_BYTES)]
        members, received = self.fail_round(
            2, 1, frames, op=pb.ALL_GATHER_BYTES,
            tensors_of_rank=lambda rank: [tensor("blob", pb.U8, [10], rank)])
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_header_with_an_unspecified_dtype(self):
        def frames(members, plan):
            bad = mixed(1)
            bad[0].dtype = pb.DTYPE_UNSPECIFIED
            return [self.header(members, 1, tensors=bad)]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_header_with_duplicate_tensor_names(self):
        def frames(members, plan):
            bad = mixed(1)
            bad[1].name = bad[0].name
            return [self.header(members, 1, tensors=bad)]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_header_with_a_tensor_of_rank_33(self):
        def frames(members, plan):
            bad = mixed(1)
            bad[-1].shape = [1] * 33
            return [self.header(members, 1, tensors=bad)]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_header_with_a_negative_dimension(self):
        def frames(members, plan):
            bad = mixed(1)
            bad[-1].shape = [-4]
            return [self.header(members, 1, tensors=bad)]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members, INVALID, rank=1)

    def test_header_with_an_unknown_op(self):
        def frames(members, plan):
            return [self.header(members, 1, op=77)]
        members, received = self.fail_round(2, 1, frames)
        self.assertFailedAlike(received, grpc.StatusCode.UNIMPLEMENTED)
        self.names(received[0].ending.details, members, 0, 1)

    def test_ranks_send_different_ops(self):
        def frames(members, plan):
            return [self.header(members, 1, op=pb.ALL_GATHER_V)]
        members, received = self.fail_round(2, 1, frames)
        self.assertRoundFails(received, members,
                              grpc.StatusCode.FAILED_PRECONDITION,
                              rank=(0, 1))

    def op_rule(self, op, headers, tensors_of_rank, named_rank=1):
        """Each rank sends a header with its fields from headers[rank] and
        its contribution; the round must fail with INVALID_ARGUMENT naming
        named_rank (an int or a tuple, as assertRoundFails takes)."""
        members = self.join(len(headers))
        plans = [Plan(tensors_of_rank(rank), 4096, header=fields)
                 for rank, fields in enumerate(headers)]
        received, _ = run_round(members, 0, op, plans)
        self.assertRoundFails(received, members, INVALID, rank=named_rank)

    def test_broadcast_roots_differ(self):
        self.op_rule(pb.BROADCAST, [{"root": 0}, {"root": 1}], mixed,
                     named_rank=(0, 1))

    def test_broadcast_root_out_of_range(self):
        self.op_rule(pb.BROADCAST, [{"root": 0}, {"root": 7}], mixed)

    def test_reduce_ops_differ(self):
        self.op_rule(pb.ALL_REDUCE, [{"reduce": pb.SUM}, {"reduce": pb.MAX}],
                     lambda rank: reducible(rank, pb.SUM), named_rank=(0, 1))

    def test_weighted_mean_weight_not_positive(self):
        self.op_rule(pb.ALL_REDUCE,
                     [{"reduce": pb.WEIGHTED_MEAN, "weight": 1.0},
                      {"reduce": pb.WEIGHTED_MEAN, "weight": 0.0}],
                     lambda rank: reducible(rank, pb.WEIGHTED_MEAN))

    def test_mean_of_integers(self):
        self.op_rule(pb.ALL_REDUCE, [{"reduce": pb.MEAN}] * 2,
                     lambda rank: [tensor("n", [pb.F32, pb.I32][rank], [9],
                                          rank)])

    def test_reduce_of_bool(self):
        self.op_rule(pb.ALL_REDUCE, [{"reduce": pb.MAX}] * 2,
                     lambda rank: [tensor("b", [pb.U8, pb.BOOL][rank], [9],
                                          rank)])

    def test_all_gather_v_of_a_scalar(self):
        self.op_rule(pb.ALL_GATHER_V, [{}, {}],
                     lambda rank: [tensor("s", pb.F32, [[2], []][rank],
                                          rank)])

    def test_all_gather_bytes_names_differ(self):
        self.op_rule(pb.ALL_GATHER_BYTES, [{}, {}], lambda rank: [
            tensor(f"blob{rank}", pb.U8, [10], rank)], named_rank=(0, 1))

    def test_broadcast_chunk_from_a_rank_that_is_not_the_root(self):
        def frames(members, plan):
            return [self.header(members, 1, op=pb.BROADCAST, root=0),
                    wire.chunk_frame(1, 0, 0, plan.tensors[0].data[:8])]
        members = self.join(2)
        root, _ = start_rank(members, 0, 0, pb.BROADCAST,
                             Plan(mixed(1), 4096, header={"root": 0}))
        bad = wire.Collective(members.channels[1])
        for frame in frames(members, Plan(mixed(1), 4096)):
            bad.send_frame(frame)
        received = [wire.receive_all(root), wire.receive_all(bad)]
        self.assertRoundFails(received, members, INVALID, rank=1)

    # ---- limits: RESOURCE_EXHAUSTED on every rank ----

    def over_limit(self, tensors_of_rank, limit):
        """Rank 1's header is over a limit: its round fails; rank 0, which
        attaches after the failure, gets the same status."""
        members = self.join(2)
        plans = [Plan(tensors_of_rank(rank), 4096, sends_chunks=False)
                 for rank in range(2)]
        first, _ = start_rank(members, 1, 0, pb.ALL_GATHER, plans[1])
        first = wire.receive_all(first)
        later, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plans[0])
        received = [wire.receive_all(later), first]
        self.assertRoundFails(received, members,
                              grpc.StatusCode.RESOURCE_EXHAUSTED, rank=1)
        self.assertIn(str(limit), received[0].ending.details)

    def test_more_tensors_than_the_limit(self):
        self.over_limit(lambda rank: [
            tensor(f"t{i}", pb.U8, [1], rank)
            for i in range(cluster.MAX_TENSORS + 1)], cluster.MAX_TENSORS)

    def test_more_bytes_than_the_limit(self):
        def huge(rank):
            declared = tensor("huge", pb.U8, [0], rank)
            declared.shape = [cluster.MAX_CONTRIBUTION_BYTES + 1]
            return [declared]
        self.over_limit(huge, cluster.MAX_CONTRIBUTION_BYTES)

    # ---- DATA_LOSS ----

    def test_end_with_a_wrong_digest(self):
        members = self.join(3)
        plans = [Plan(mixed(rank), 1001) for rank in range(3)]
        plans[2].end_digest = wire.digest(b"something else")
        received, _ = run_round(members, 0, pb.ALL_GATHER, plans)
        self.assertRoundFails(received, members, grpc.StatusCode.DATA_LOSS,
                              rank=2)

    # ---- FAILED_PRECONDITION ----

    def test_epoch_not_current(self):
        members = self.join(2)
        stream = wire.Collective(members.channels[0])
        stream.send_frame(wire.header_frame(
            group=members.group, epoch=members.epoch + 1, seq=0,
            op=pb.ALL_GATHER, rank=0, tensors=[t.spec for t in mixed(0)]))
        stream.half_close()
        ending = wire.receive_all(stream).ending
        self.assertIsNotNone(ending.final, ending.details)
        self.assertEqual(ending.code, grpc.StatusCode.FAILED_PRECONDITION,
                         ending.details)
        self.names(ending.details, members, rank=0)
        self.assertIn(str(members.epoch + 1), ending.details)

    def test_seq_out_of_order_fails_and_ends_the_epoch(self):
        members = self.join(2)
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        stream0, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plans[0])
        stream1, _ = start_rank(members, 1, 1, pb.ALL_GATHER, plans[1])
        received = [wire.receive_all(stream0), wire.receive_all(stream1)]
        for r in received:
            self.assertEqual(r.ending.code,
                             grpc.StatusCode.FAILED_PRECONDITION,
                             r.ending.details)
        self.names(received[1].ending.details, members, rank=1)
        for session in members.sessions:  # the epoch ends
            events = session.drain(timeout_s=wire.EVENT_TIMEOUT_S)
            self.assertTrue(all(pb.SessionEvent.FromString(e).HasField(
                "heartbeat") for e in events))
            self.assertEqual(session.ending.code,
                             grpc.StatusCode.FAILED_PRECONDITION,
                             session.ending.details)

    def test_seq_reused_after_its_commit(self):
        members = self.join(2)
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        for r in run_round(members, 0, pb.ALL_GATHER, plans)[0]:
            self.assertOk(r)
        stream, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plans[0])
        ending = wire.receive_all(stream).ending
        self.assertIsNotNone(ending.final, ending.details)
        self.assertEqual(ending.code, grpc.StatusCode.FAILED_PRECONDITION,
                         ending.details)
        self.names(ending.details, members, seq=0, rank=0)

    def test_a_second_header_for_the_same_seq_on_another_stream(self):
        # Without `resume`, it spends seq 0 again: seq disorder, which
        # fails the round on every rank and ends the epoch.
        members = self.join(2)
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        first = wire.Collective(members.channels[0])
        first.send_frame(self.header(members, 0))
        second, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plans[0])
        second = wire.receive_all(second)
        other, _ = start_rank(members, 1, 0, pb.ALL_GATHER, plans[1])
        received = [wire.receive_all(first), second, wire.receive_all(other)]
        self.assertFailedAlike(received, grpc.StatusCode.FAILED_PRECONDITION)
        self.names(received[0].ending.details, members, seq=0, rank=0)

    # ---- PERMISSION_DENIED: only that stream ----

    def test_rank_held_by_another_identity(self):
        members = self.join(2)
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        impostor = wire.Collective(members.channels[1])
        impostor.send_frame(self.header(members, 0))
        impostor.half_close()
        ending = wire.receive_all(impostor).ending
        self.assertIsNotNone(ending.final, ending.details)
        self.assertEqual(ending.code, grpc.StatusCode.PERMISSION_DENIED,
                         ending.details)
        self.names(ending.details, members, rank=0)
        self.assertIn(members.identities[1], ending.details)
        # The round is not failed: it runs on normally.
        for r in run_round(members, 0, pb.ALL_GATHER, plans)[0]:
            self.assertOk(r)

    def test_unknown_group(self):
        members = self.join(2)
        stream = wire.Collective(members.channels[0])
        stream.send_frame(wire.header_frame(
            group="no-such-group", epoch=1, seq=0, op=pb.ALL_GATHER, rank=0,
            tensors=[t.spec for t in mixed(0)]))
        stream.half_close()
        ending = wire.receive_all(stream).ending
        self.assertIsNotNone(ending.final, ending.details)
        self.assertEqual(ending.code, grpc.StatusCode.PERMISSION_DENIED,
                         ending.details)
        self.assertIn("no-such-group", ending.details)

    # ---- ABORTED ----

    def test_an_admin_aborts_the_rounds_in_flight(self):
        members = self.join(2)
        plan0 = Plan(mixed(0), 4096)
        stream0, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plan0)
        stream1 = wire.Collective(members.channels[1])
        stream1.send_frame(self.header(members, 1))
        self.assertTrue(stream0.next_frame().HasField("header"))
        admin = self.server.channel(cluster.ADMIN)
        self.addCleanup(admin.close)
        reply = wire.abort_round(admin, members.group, "bad data")
        self.assertEqual(list(reply.aborted_seqs), [0])
        received = [wire.receive_all(stream0), wire.receive_all(stream1)]
        self.assertFailedAlike(received, grpc.StatusCode.ABORTED,
                               members.group, "bad data",
                               cluster.identity(cluster.ADMIN))
        # The epoch carries on: the next seq runs normally.
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        for r in run_round(members, 1, pb.ALL_GATHER, plans)[0]:
            self.assertOk(r)

    # ---- UNAVAILABLE and DEADLINE_EXCEEDED ----

    def test_stream_that_breaks_and_is_not_resumed(self):
        members = self.join(2)
        plans = [Plan(mixed(rank), 1000) for rank in range(2)]
        stream0, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plans[0])
        broken = wire.Collective(members.channels[1])
        broken.send_frame(self.header(members, 1))
        self.assertTrue(broken.next_frame().HasField("header"))
        broken.cancel()
        received = wire.receive_all(stream0)
        self.assertEqual(received.ending.code, grpc.StatusCode.UNAVAILABLE,
                         received.ending.details)
        self.names(received.ending.details, members, seq=0, rank=1)
        self.assertIn(members.identities[1], received.ending.details)
        self.assertIn("did not resume", received.ending.details)
        # A resume after the failure gets the round's status.
        late = wire.Collective(members.channels[1])
        late.send_frame(self.header(
            members, 1, resume=True, frames_received=1,
            contribution_digest=wire.digest(plans[1].payload)))
        late.drain()
        self.assertEqual((late.ending.code, late.ending.details),
                         (received.ending.code, received.ending.details))

    def test_round_deadline_lists_the_missing_ranks(self):
        members = self.join(2, family="late")
        plan = Plan(mixed(0), 1000)
        stream0, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plan)
        ending = wire.receive_all(stream0).ending
        self.assertEqual(ending.code, grpc.StatusCode.DEADLINE_EXCEEDED,
                         ending.details)
        self.names(ending.details, members, rank=1)
        self.assertIn("not started", ending.details)


class JoinErrorsTest(ConformanceTest):
    """protocol.md's "join refused with" table, and session resumes."""

    def refused(self, name, join, code, first=None):
        """Name's session sends `first` (default: the join) and is refused
        with `code` by the server; returns the message."""
        channel = self.server.channel(name)
        self.addCleanup(channel.close)
        session = wire.Session(channel, join)
        if first is not None:
            session.send(first)
        session.drain()
        self.assertRefused(session.ending, code)
        return session.ending.details

    def test_stranger_and_unknown_group_get_one_answer(self):
        group = self.server.new_group("w2")
        stranger = self.refused(cluster.STRANGER, pb.JoinRequest(
            group=group, world_size=2), grpc.StatusCode.PERMISSION_DENIED)
        unknown = self.refused(cluster.STRANGER, pb.JoinRequest(
            group="no-such-group", world_size=2),
            grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(stranger.replace(group, "G"),
                         unknown.replace("no-such-group", "G"))

    def test_first_message_not_a_join(self):
        self.refused("site-1", None, INVALID, first=pb.SessionRequest(
            heartbeat=pb.Heartbeat()))

    def test_world_size_differs(self):
        details = self.refused("site-1", pb.JoinRequest(
            group=self.server.new_group("w2"), world_size=3), INVALID)
        self.assertIn("3", details)

    def test_requested_rank_out_of_range(self):
        self.refused("site-1", pb.JoinRequest(
            group=self.server.new_group("w2"), world_size=2,
            requested_rank=2), INVALID)

    def waiting(self, name, join):
        """A session of `name` that waits in its group: the server has
        answered a heartbeat on it, so it holds the join."""
        channel = self.server.channel(name)
        self.addCleanup(channel.close)
        session = wire.Session(channel, join, heartbeats=False)
        self.addCleanup(session.close)
        session.heartbeat()
        self.assertTrue(session.next_event().HasField("heartbeat"))
        return session

    def test_requested_rank_taken_by_a_waiting_member(self):
        group = self.server.new_group("w3")
        self.waiting("site-1", pb.JoinRequest(group=group, world_size=3,
                                              requested_rank=0))
        details = self.refused("site-2", pb.JoinRequest(
            group=group, world_size=3, requested_rank=0),
            grpc.StatusCode.ALREADY_EXISTS)
        self.assertIn(cluster.identity("site-1"), details)

    def test_identity_already_waiting(self):
        group = self.server.new_group("w3")
        self.waiting("site-1", pb.JoinRequest(group=group, world_size=3))
        self.refused("site-1", pb.JoinRequest(group=group, world_size=3),
                     grpc.StatusCode.ALREADY_EXISTS)

    def test_group_formed_and_full(self):
        members = self.join(2, family="spare")
        self.refused("site-3", pb.JoinRequest(group=members.group,
                                              world_size=2),
                     grpc.StatusCode.FAILED_PRECONDITION)

    def test_resume_of_an_epoch_that_is_not_current(self):
        members = self.join(2)
        self.refused("site-1", pb.JoinRequest(
            group=members.group, world_size=2, requested_rank=0,
            resume_epoch=members.epoch + 5),
            grpc.StatusCode.FAILED_PRECONDITION)


class ReloadTest(ConformanceTest):
    """A policy reload that changes a formed group's world size closes its
    epoch: every member's session ends with ABORTED."""

    def test_a_reload_that_resizes_the_group_ends_its_epoch(self):
        members = self.join(2)
        self.server.reload_resized({members.group: 3})
        for session in members.sessions:
            session.drain()
            self.assertEqual(session.ending.code, grpc.StatusCode.ABORTED,
                             session.ending.details)
            self.assertIn(members.group, session.ending.details)
            self.assertIn("policy reload", session.ending.details)
            self.assertIsNotNone(session.ending.final)


class TimeoutsTest(ConformanceTest):
    """The deadlines on a silent stream and on a group that does not form,
    with a server whose first-frame and join timeouts are short."""

    server_flags = {"--first-frame-timeout": "2", "--join-timeout": "2"}

    def silent(self, stream_class, *args):
        channel = self.server.channel("site-1")
        self.addCleanup(channel.close)
        stream = stream_class(channel, *args)
        stream.drain()
        self.assertEqual(stream.ending.code,
                         grpc.StatusCode.DEADLINE_EXCEEDED,
                         stream.ending.details)
        return stream.ending.details

    def test_a_collective_stream_that_sends_no_header(self):
        self.assertIn("the collective stream sent no header within 2s",
                      self.silent(wire.Collective))

    def test_a_session_that_sends_no_join(self):
        self.assertIn("the session sent no join within 2s",
                      self.silent(wire.Session, None))

    def test_a_group_that_does_not_form(self):
        group = self.server.new_group("w2")
        details = self.silent(wire.Session, pb.JoinRequest(group=group,
                                                           world_size=2))
        self.assertIn(group, details)
        self.assertIn(cluster.identity("site-1"), details)


if __name__ == "__main__":
    unittest.main()

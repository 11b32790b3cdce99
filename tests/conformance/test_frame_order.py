"""Frame orders of docs/protocol.md: half-close, resuming a broken
Collective stream (at a byte that is no multiple of the max chunk, and after
another member left once it had its commit), and the
Session stream: heartbeats, leave and resume."""

import time
import unittest

import grpc

import cluster
import wire
from contribution import mixed
from fedgather.v1 import fedgather_pb2 as pb
from rounds import ConformanceTest, Plan, Sent, run_round, start_rank

RESUME_RETRY_S = 10.0
GRACE_S = float(cluster.DEFAULT_FLAGS["--resume-grace"])


class CollectiveOrderTest(ConformanceTest):

    def header(self, members, rank, plan, **fields):
        return wire.header_frame(
            group=members.group, epoch=members.epoch, seq=0,
            op=pb.ALL_GATHER, rank=rank,
            tensors=[t.spec for t in plan.tensors], **fields)

    def test_half_close_ends_only_the_upload(self):
        # Rank 0 sends everything and half-closes before rank 1 has sent a
        # chunk; it still receives rank 1's frames and the commit.
        members = self.join(2)
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        done, sent0 = start_rank(members, 0, 0, pb.ALL_GATHER, plans[0])
        later = wire.Collective(members.channels[1])
        header1 = later.send_frame(self.header(members, 1, plans[1]))
        first = done.next_frame()
        self.assertTrue(first.HasField("header"))
        self.assertEqual(first.header.rank, 1)
        chunks1 = [later.send_frame(f) for f in wire.chunk_frames(
            1, [t.data for t in plans[1].tensors], 4096)]
        later.send_frame(wire.end_frame(1, wire.digest(plans[1].payload)))
        later.half_close()
        rest = wire.receive_all(done)
        rest.raw.insert(0, first.SerializeToString())
        rest.frames.insert(0, first)
        self.assertOk(rest)
        self.assertForwarded(rest, 0, {1: Sent(header1, chunks1)})
        self.assertOk(wire.receive_all(later))

    def test_half_close_before_the_end_fails_the_round(self):
        # The server cannot tell this half-close from a broken stream: the
        # rank is detached, its own stream ends CANCELLED, and the round
        # fails with UNAVAILABLE on the others when the grace has passed.
        members = self.join(2)
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        stream0, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plans[0])
        stream1 = wire.Collective(members.channels[1])
        stream1.send_frame(self.header(members, 1, plans[1]))
        for frame in wire.chunk_frames(1, [t.data for t in plans[1].tensors],
                                       4096):
            stream1.send_frame(frame)
        stream1.half_close()
        received = [wire.receive_all(stream0), wire.receive_all(stream1)]
        self.assertEqual(received[1].ending.code, grpc.StatusCode.CANCELLED,
                         received[1].ending.details)
        self.assertIsNone(received[1].commit)
        self.assertEqual(received[0].ending.code, grpc.StatusCode.UNAVAILABLE,
                         received[0].ending.details)
        for r in received:
            self.assertIn(members.group, r.ending.details)
            self.assertRegex(r.ending.details, r"seq\D{0,3}0\b")
            self.assertRegex(r.ending.details, r"rank\D{0,3}1\b")
            self.assertIn(members.identities[1], r.ending.details)

    def resume(self, channel, header):
        """Resume opens streams with the resume header until the server
        answers something other than UNAVAILABLE + fedgather-final: retry
        (bounded). Returns the stream and its first frame (or Ending)."""
        deadline = time.monotonic() + RESUME_RETRY_S
        backoff = 0.02
        while True:
            stream = wire.Collective(channel)
            stream.send_frame(header)
            first = stream.next_frame()
            if not (isinstance(first, wire.Ending) and
                    first.code == grpc.StatusCode.UNAVAILABLE and
                    first.final == "retry" and time.monotonic() < deadline):
                return stream, first
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def test_resume_at_a_byte_that_is_no_multiple_of_the_max_chunk(self):
        members = self.join(2)
        plans = [Plan(mixed(rank), 1001) for rank in range(2)]
        # Rank 0 sends only its header for now.
        stream0 = wire.Collective(members.channels[0])
        header0 = stream0.send_frame(self.header(members, 0, plans[0]))
        # Rank 1 sends its header and 5 chunks of 1001 bytes, reads rank
        # 0's header, and its stream breaks once rank 0 has all 5 chunks.
        chunks1 = wire.chunk_frames(1, [t.data for t in plans[1].tensors],
                                    1001)
        broken = wire.Collective(members.channels[1])
        header1 = broken.send_frame(self.header(members, 1, plans[1]))
        raw1 = [broken.send_frame(frame) for frame in chunks1[:5]]
        self.assertEqual(broken.next_raw(), header0)
        received0 = [stream0.next_raw() for _ in range(6)]
        self.assertEqual(received0, [header1] + raw1)
        broken.cancel()
        resumed, first = self.resume(members.channels[1], self.header(
            members, 1, plans[1], resume=True, frames_received=1,
            contribution_digest=wire.digest(plans[1].payload)))
        self.assertFalse(isinstance(first, wire.Ending), first)
        self.assertEqual(first.WhichOneof("kind"), "resumed")
        self.assertEqual(first.resumed.upload_bytes, 5 * 1001)
        self.assertFalse(first.resumed.upload_ended)
        for frame in chunks1[5:]:
            raw1.append(resumed.send_frame(frame))
        resumed.send_frame(wire.end_frame(1, wire.digest(plans[1].payload)))
        resumed.half_close()
        raw0 = [stream0.send_frame(frame) for frame in wire.chunk_frames(
            0, [t.data for t in plans[0].tensors], 1001)]
        stream0.send_frame(wire.end_frame(0, wire.digest(plans[0].payload)))
        stream0.half_close()
        rest0 = wire.receive_all(stream0)
        rest1 = wire.receive_all(resumed)
        self.assertOk(rest0)
        self.assertOk(rest1)
        # Nothing reaches either rank twice: rank 0 gets rank 1's remaining
        # chunks; rank 1 gets rank 0's chunks, not its header again.
        self.assertEqual(rest0.raw[:-1], raw1[5:])
        self.assertEqual(rest1.raw[:-1], raw0)
        payloads = {rank: plan.payload for rank, plan in enumerate(plans)}
        self.assertCommit(members, 0, rest0.commit, payloads)
        self.assertCommit(members, 0, rest1.commit, payloads)

    def test_resume_with_other_bytes_is_equivocation(self):
        # The resume declares one digest and the end carries another.
        members = self.join(2)
        plans = [Plan(mixed(rank), 1001) for rank in range(2)]
        stream0, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plans[0])
        chunks1 = wire.chunk_frames(1, [t.data for t in plans[1].tensors],
                                    1001)
        broken = wire.Collective(members.channels[1])
        broken.send_frame(self.header(members, 1, plans[1]))
        broken.send_frame(chunks1[0])
        self.assertTrue(stream0.next_frame().HasField("header"))
        self.assertTrue(stream0.next_frame().HasField("chunk"))
        broken.cancel()
        resumed, first = self.resume(members.channels[1], self.header(
            members, 1, plans[1], resume=True, frames_received=0,
            contribution_digest=wire.digest(b"other bytes")))
        self.assertFalse(isinstance(first, wire.Ending), first)
        self.assertEqual(first.resumed.upload_bytes, 1001)
        for frame in chunks1[1:]:
            resumed.send_frame(frame)
        resumed.send_frame(wire.end_frame(1, wire.digest(plans[1].payload)))
        resumed.half_close()
        received = [wire.receive_all(stream0), wire.receive_all(resumed)]
        self.assertFailedAlike(received, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("equivocat", received[0].ending.details.lower())
        self.assertRegex(received[0].ending.details, r"rank\D{0,3}1\b")

    def test_a_member_that_leaves_after_the_commit_takes_no_result_away(self):
        # Rank 1 gets its commit and leaves, which ends the epoch, while
        # rank 0's download is broken: rank 0 resumes it in the ended epoch
        # and gets the rest of the result. Once the resume grace has passed
        # with every commit handed over, the round is gone.
        members = self.join(2)
        plans = [Plan(mixed(rank), 1001) for rank in range(2)]
        broken, _ = start_rank(members, 0, 0, pb.ALL_GATHER, plans[0])
        stream1, sent1 = start_rank(members, 1, 0, pb.ALL_GATHER, plans[1])
        self.assertOk(wire.receive_all(stream1))
        got = [broken.next_raw() for _ in range(3)]
        self.assertEqual(got, [sent1.header] + sent1.chunks[:2])
        broken.cancel()
        members.sessions[1].leave()
        members.sessions[0].drain()
        self.assertRefused(members.sessions[0].ending,
                           grpc.StatusCode.UNAVAILABLE, members.identities[1])
        resume_header = self.header(
            members, 0, plans[0], resume=True, frames_received=3,
            contribution_digest=wire.digest(plans[0].payload))
        resumed, first = self.resume(members.channels[0], resume_header)
        self.assertFalse(isinstance(first, wire.Ending), first)
        self.assertEqual(first.WhichOneof("kind"), "resumed")
        self.assertTrue(first.resumed.upload_ended)
        rest = wire.receive_all(resumed)
        self.assertOk(rest)
        self.assertEqual(rest.raw[:-1], sent1.chunks[2:])
        self.assertCommit(members, 0, rest.commit, {
            rank: plan.payload for rank, plan in enumerate(plans)})
        time.sleep(GRACE_S + 2)
        late, ending = self.resume(members.channels[0], resume_header)
        self.assertRefused(ending, grpc.StatusCode.UNAVAILABLE,
                           members.identities[1], "left the group")


class SessionOrderTest(ConformanceTest):

    def test_the_server_answers_each_heartbeat(self):
        group = self.server.new_group("w2")
        channels = [self.server.channel(site) for site in ("site-1",
                                                           "site-2")]
        for channel in channels:
            self.addCleanup(channel.close)
        first = wire.Session(channels[0], pb.JoinRequest(
            group=group, world_size=2), heartbeats=False)
        self.addCleanup(first.close)
        # While the group forms, too.
        first.heartbeat()
        self.assertTrue(first.next_event().HasField("heartbeat"))
        second = wire.Session(channels[1], pb.JoinRequest(
            group=group, world_size=2), heartbeats=False)
        self.addCleanup(second.close)
        joined = first.wait_joined()
        second.wait_joined()
        for _ in range(3):
            first.heartbeat()
            second.heartbeat()
            self.assertTrue(first.next_event().HasField("heartbeat"))
            self.assertTrue(second.next_event().HasField("heartbeat"))
        self.assertGreater(joined.heartbeat_interval_ms, 0)
        self.assertGreater(joined.heartbeat_timeout_ms,
                           joined.heartbeat_interval_ms)
        self.assertEqual(joined.max_chunk_bytes, 1 << 20)

    def test_joined_tells_each_member_its_rank_and_the_members(self):
        members = self.join(3)
        for rank, joined in enumerate(members.joined):
            self.assertEqual((joined.group, joined.rank, joined.world_size,
                              joined.epoch),
                             (members.group, rank, 3, members.epoch))
            self.assertEqual([(m.rank, m.identity) for m in joined.members],
                             list(enumerate(members.identities)))

    def test_a_member_that_leaves(self):
        members = self.join(3)
        members.sessions[1].leave()
        endings = []
        for session in members.sessions:
            session.drain()
            endings.append(session.ending)
        self.assertEqual(endings[1].code, grpc.StatusCode.CANCELLED,
                         endings[1].details)
        self.assertIn("this member left", endings[1].details)
        self.assertIsNotNone(endings[1].final)
        for rank in (0, 2):
            self.assertEqual(endings[rank].code, grpc.StatusCode.UNAVAILABLE,
                             endings[rank].details)
            self.assertRegex(endings[rank].details, r"rank\D{0,3}1\b")
            self.assertIn(members.identities[1], endings[rank].details)
            self.assertIsNotNone(endings[rank].final)

    def test_a_broken_session_resumes_its_rank(self):
        members = self.join(2)
        members.sessions[1].close()
        channel = members.channels[1]
        deadline = time.monotonic() + RESUME_RETRY_S
        while True:
            session = wire.Session(channel, pb.JoinRequest(
                group=members.group, world_size=2, requested_rank=1,
                resume_epoch=members.epoch))
            event = session.next_event()
            if not isinstance(event, wire.Ending) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.05)
        members.sessions[1] = session
        self.assertFalse(isinstance(event, wire.Ending), event)
        self.assertEqual((event.joined.epoch, event.joined.rank),
                         (members.epoch, 1))
        plans = [Plan(mixed(rank), 4096) for rank in range(2)]
        for r in run_round(members, 0, pb.ALL_GATHER, plans)[0]:
            self.assertOk(r)

    def resume_refused(self, name, rank, epoch_offset, code):
        members = self.join(2)
        channel = self.server.channel(name)
        self.addCleanup(channel.close)
        session = wire.Session(channel, pb.JoinRequest(
            group=members.group, world_size=2, requested_rank=rank,
            resume_epoch=members.epoch + epoch_offset))
        session.drain()
        self.assertRefused(session.ending, code)
        return members, session.ending.details

    def test_resume_of_an_epoch_that_is_not_current(self):
        self.resume_refused("site-1", 0, 5,
                            grpc.StatusCode.FAILED_PRECONDITION)

    def test_resume_of_a_rank_bound_to_another_identity(self):
        members, details = self.resume_refused(
            "site-2", 0, 0, grpc.StatusCode.PERMISSION_DENIED)
        self.assertRegex(details, r"rank\D{0,3}0\b")


if __name__ == "__main__":
    unittest.main()

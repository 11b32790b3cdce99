"""Admission (docs/protocol.md, "Identity and admission"): the TLS
handshake requires a client certificate that chains to --client-ca, so a
client without one, or with one from another CA, reaches no call; a valid
certificate of an identity with no role gets the per-call refusal."""

import shutil
import tempfile
import unittest

import grpc

import cluster
import wire
from contribution import mixed
from fedgather.v1 import fedgather_pb2 as pb
from rounds import ConformanceTest


class AccessTest(ConformanceTest):

    def assertRefusedAtTheHandshake(self, channel):
        """A call on `channel` never reaches the server: it ends UNAVAILABLE
        with no `fedgather-final` (nothing was decided by the server)."""
        self.addCleanup(channel.close)
        session = wire.Session(channel, pb.JoinRequest(
            group=self.server.new_group("w2"), world_size=2),
            timeout_s=20)
        session.drain()
        self.assertEqual(session.ending.code, grpc.StatusCode.UNAVAILABLE,
                         session.ending.details)
        self.assertIsNone(session.ending.final)

    def test_a_client_without_a_certificate(self):
        self.assertRefusedAtTheHandshake(
            self.server.channel("site-1", with_certificate=False))

    def test_a_certificate_from_another_ca(self):
        other = tempfile.mkdtemp(prefix="fedgather-conformance-other-ca-")
        self.addCleanup(shutil.rmtree, other, True)
        cluster.provision(other, ["site-1"])
        self.assertRefusedAtTheHandshake(
            self.server.channel("site-1", pki_dir=other))

    def test_a_stranger_cannot_join(self):
        channel = self.server.channel(cluster.STRANGER)
        self.addCleanup(channel.close)
        group = self.server.new_group("w2")
        session = wire.Session(channel, pb.JoinRequest(group=group,
                                                       world_size=2))
        session.drain()
        self.assertRefused(session.ending, grpc.StatusCode.PERMISSION_DENIED,
                           cluster.identity(cluster.STRANGER))

    def test_a_stranger_cannot_contribute(self):
        members = self.join(2)
        channel = self.server.channel(cluster.STRANGER)
        self.addCleanup(channel.close)
        stream = wire.Collective(channel)
        stream.send_frame(wire.header_frame(
            group=members.group, epoch=members.epoch, seq=0,
            op=pb.ALL_GATHER, rank=0, tensors=[t.spec for t in mixed(0)]))
        stream.half_close()
        stream.drain()
        self.assertRefused(stream.ending, grpc.StatusCode.PERMISSION_DENIED,
                           cluster.identity(cluster.STRANGER), members.group)


    def held_join(self, who, group_prefix):
        """A channel of `who` and a join of a new group of 2 that waits for
        its second member: a heartbeat is answered, so the server holds the
        stream (and the group)."""
        channel = self.server.channel(who)
        self.addCleanup(channel.close)
        waiting = wire.Session(channel, pb.JoinRequest(
            group=self.server.new_group(group_prefix), world_size=2),
            heartbeats=False)
        self.addCleanup(waiting.close)
        waiting.heartbeat()
        self.assertTrue(waiting.next_event().HasField("heartbeat"))
        return channel

    def test_more_streams_than_the_limit(self):
        channel = self.held_join(cluster.LIMITED, "limited")
        second = wire.Collective(channel)
        second.half_close()
        second.drain()
        self.assertRefused(second.ending, grpc.StatusCode.RESOURCE_EXHAUSTED,
                           cluster.identity(cluster.LIMITED),
                           "max_concurrent_streams", "1")

    def test_more_groups_than_the_limit(self):
        channel = self.held_join(cluster.SOLO, "solo")
        second = wire.Session(channel, pb.JoinRequest(
            group=self.server.new_group("solo"), world_size=2))
        self.addCleanup(second.close)
        second.drain()
        self.assertRefused(second.ending, grpc.StatusCode.RESOURCE_EXHAUSTED,
                           cluster.identity(cluster.SOLO), "max_groups")


class RevokedTest(ConformanceTest):
    """A certificate on the server's CRL passes the handshake (the CRL is
    checked per call) and every call is refused UNAUTHENTICATED."""

    @classmethod
    def prepare(cls, server):
        server.flags["--crl"] = server.revoke(cluster.STRANGER)

    def test_a_revoked_certificate_is_refused_per_call(self):
        channel = self.server.channel(cluster.STRANGER)
        self.addCleanup(channel.close)
        session = wire.Session(channel, pb.JoinRequest(
            group=self.server.new_group("w2"), world_size=2))
        session.drain()
        self.assertRefused(session.ending, grpc.StatusCode.UNAUTHENTICATED,
                           "revoked", cluster.identity(cluster.STRANGER),
                           "serial")

if __name__ == "__main__":
    unittest.main()

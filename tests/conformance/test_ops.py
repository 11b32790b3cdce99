"""Every op, 2 to 4 ranks, each rank cutting its chunks its own way (the
server's max chunk, 4096, 1000, 1001 and 24 bytes: chunks may end inside an
element), checked byte for byte against the Python reference and the
commit's digests (docs/protocol.md, "Collective" and "Ops")."""

import unittest

import grpc

import wire
from contribution import mixed, reducible, tensor
from fedgather.v1 import fedgather_pb2 as pb
from rounds import ConformanceTest, Plan, run_round, start_rank

# Chunk sizes by rank; None is the server's max_chunk_bytes. TINY_CUTS are
# for small contributions only (each chunk is a frame).
CUTS = [None, 4096, 1001, 1000]
TINY_CUTS = [24, 7]


def cuts(members, sizes=CUTS):
    return [members.max_chunk if c is None else c
            for c in sizes[:members.world_size]]


class OpsTest(ConformanceTest):

    def gather(self, op, world_size, tensors_of_rank, sizes=CUTS,
               family=""):
        members = self.join(world_size, family)
        plans = [Plan(tensors_of_rank(rank), cut)
                 for rank, cut in enumerate(cuts(members, sizes))]
        received, sent = run_round(members, 0, op, plans)
        for rank, r in enumerate(received):
            self.assertOk(r, f"rank {rank}")
            self.assertForwarded(r, rank, {q: s for q, s in enumerate(sent)
                                           if q != rank})
            self.assertCommit(members, 0, r.commit,
                              {q: p.payload for q, p in enumerate(plans)})

    def test_all_gather_four_ranks(self):
        self.gather(pb.ALL_GATHER, 4, lambda rank: mixed(rank, big=True))

    def test_all_gather_two_ranks(self):
        self.gather(pb.ALL_GATHER, 2, mixed)

    def test_all_gather_tiny_chunks(self):
        self.gather(pb.ALL_GATHER, 2, mixed, sizes=TINY_CUTS)

    def test_all_gather_v_parts_differ_in_first_dimension(self):
        self.gather(pb.ALL_GATHER_V, 3,
                    lambda rank: mixed(rank, first_dim=rank * 2))

    def test_all_gather_bytes_any_length_each(self):
        self.gather(pb.ALL_GATHER_BYTES, 4, lambda rank: [
            tensor("blob", pb.U8, [[5000, 0, 1, 123_457][rank]], rank)])

    def test_broadcast_only_the_root_uploads(self):
        members = self.join(3)
        root = 1
        plans = [Plan(mixed(root), cut, header={"root": root},
                      sends_chunks=(rank == root))
                 for rank, cut in enumerate(cuts(members))]
        received, sent = run_round(members, 0, pb.BROADCAST, plans)
        for rank, r in enumerate(received):
            self.assertOk(r, f"rank {rank}")
            if rank == root:
                self.assertEqual(len(r.frames), 1,
                                 "the root receives only the commit")
            else:
                self.assertForwarded(r, rank, {root: sent[root]})
            self.assertCommit(members, 0, r.commit,
                              {q: p.payload for q, p in enumerate(plans)})
        self.assertEqual(received[0].commit.contributions[0].digest,
                         wire.digest(b""))

    def all_reduce(self, reduce_op, world_size, weights=None, big=False,
                   sizes=CUTS, family=""):
        members = self.join(world_size, family)
        plans = []
        for rank, cut in enumerate(cuts(members, sizes)):
            header = {"reduce": reduce_op}
            if weights:
                header["weight"] = weights[rank]
            plans.append(Plan(reducible(rank, reduce_op, big), cut, header))
        received, _ = run_round(members, 0, pb.ALL_REDUCE, plans)
        for rank, r in enumerate(received):
            self.assertOk(r, f"rank {rank}")
            self.assertReduced(r, plans, reduce_op, members.max_chunk,
                               members.digest_algorithm)
            self.assertCommit(members, 0, r.commit,
                              {q: p.payload for q, p in enumerate(plans)})

    # ---- digests: BLAKE3 by default, SHA-256 where the policy says ----

    def test_a_default_group_names_contributions_by_blake3(self):
        members = self.join(2)
        self.assertEqual(members.digest_algorithm, pb.DIGEST_BLAKE3)
        for joined in members.joined:
            self.assertEqual(joined.digest_algorithm, pb.DIGEST_BLAKE3)

    def test_all_gather_in_a_sha256_group(self):
        self.gather(pb.ALL_GATHER, 2, mixed, family="sha256")

    def test_a_client_from_before_the_field_works_in_a_sha256_group(self):
        # Its headers carry no digest_algorithm, which reads as SHA-256, and
        # its ends and checks are SHA-256.
        members = self.join(2, "sha256")
        unset = {"digest_algorithm": pb.DIGEST_ALGORITHM_UNSPECIFIED}
        plans = [Plan(mixed(rank), cut, header=dict(unset))
                 for rank, cut in enumerate(cuts(members))]
        received, sent = run_round(members, 0, pb.ALL_GATHER, plans)
        for s in sent:
            header = pb.CollectiveFrame.FromString(s.header).header
            self.assertEqual(header.digest_algorithm,
                             pb.DIGEST_ALGORITHM_UNSPECIFIED)
        for rank, r in enumerate(received):
            self.assertOk(r, f"rank {rank}")
            self.assertForwarded(r, rank, {q: s for q, s in enumerate(sent)
                                           if q != rank})
            self.assertCommit(members, 0, r.commit,
                              {q: p.payload for q, p in enumerate(plans)})

    def test_all_reduce_in_a_sha256_group(self):
        self.all_reduce(pb.SUM, 2, family="sha256")

    def test_all_reduce_sum(self):
        self.all_reduce(pb.SUM, 4, big=True)

    def test_all_reduce_tiny_chunks(self):
        self.all_reduce(pb.SUM, 2, sizes=TINY_CUTS)

    def test_all_reduce_mean(self):
        self.all_reduce(pb.MEAN, 2)

    def test_all_reduce_min(self):
        self.all_reduce(pb.MIN, 3)

    def test_all_reduce_max(self):
        self.all_reduce(pb.MAX, 4)

    def test_all_reduce_weighted_mean(self):
        self.all_reduce(pb.WEIGHTED_MEAN, 4, weights=[1.0, 2.0, 2.0, 3.0])

    def test_seqs_count_on_within_an_epoch(self):
        members = self.join(2)
        for seq in range(3):
            plans = [Plan(mixed(rank + seq), cut)
                     for rank, cut in enumerate(cuts(members))]
            received, _ = run_round(members, seq, pb.ALL_GATHER, plans)
            for rank, r in enumerate(received):
                self.assertOk(r, f"seq {seq} rank {rank}")
                self.assertEqual(r.commit.seq, seq)


    def test_quorum_round_commits_its_contributors(self):
        members = self.join(3, family="quorum")
        plans = [Plan(mixed(rank), cut)
                 for rank, cut in enumerate(cuts(members))]
        started = [start_rank(members, rank, 0, pb.ALL_GATHER, plans[rank])
                   for rank in (0, 1)]
        received = [wire.receive_all(stream) for stream, _ in started]
        for rank, r in enumerate(received):
            self.assertOk(r, f"rank {rank}")
            self.assertForwarded(r, rank, {1 - rank: started[1 - rank][1]})
            self.assertCommit(members, 0, r.commit,
                              {q: plans[q].payload for q in (0, 1)})
        # Rank 2 comes too late for seq 0, spends it, and goes on at seq 1.
        late, _ = start_rank(members, 2, 0, pb.ALL_GATHER, plans[2])
        ending = wire.receive_all(late).ending
        self.assertIsNotNone(ending.final, ending.details)
        self.assertEqual(ending.code, grpc.StatusCode.FAILED_PRECONDITION,
                         ending.details)
        self.assertIn(members.identities[2], ending.details)
        self.assertIn("its next collective is seq 1", ending.details)
        for rank, r in enumerate(run_round(members, 1, pb.ALL_GATHER,
                                           plans)[0]):
            self.assertOk(r, f"seq 1 rank {rank}")

if __name__ == "__main__":
    unittest.main()

"""The Pythonic API: fedgather.Client(...).join(...) and its collectives,
three ranks in three processes over mutual TLS; every rank's results are
checked against the inputs."""

import os
import tempfile
import unittest

import torch

import fgtest
from module_worker import dict_input, tensor_input

WORKER = os.path.join(fgtest.HERE, "module_worker.py")
WORLD = 3


class ModuleTest(unittest.TestCase):

    def test_collectives(self):
        sites = [f"site-{i + 1}" for i in range(WORLD)]
        work = tempfile.mkdtemp(prefix="fedgather-module.")
        out = os.path.join(work, "rank-{rank}.pt")
        with fgtest.Cluster({"fl": sites}) as cluster:
            results = fgtest.run_ranks(
                lambda r: [WORKER, cluster.address, cluster.tls_dir(sites[r]),
                           "fl", str(WORLD), str(r), out.format(rank=r)],
                WORLD)
            for r in results:
                self.assertEqual(r.returncode, 0,
                                 f"rank {r.rank}:\n{r.output}\n"
                                 f"{cluster.server_log()}")
        expected_gather = torch.stack([tensor_input(r) for r in range(WORLD)])
        endpoints = torch.load(out.format(rank=0))["peer_endpoints"]
        self.assertEqual(len(set(endpoints)), WORLD, endpoints)
        for endpoint in endpoints:
            host, port = endpoint.rsplit(":", 1)
            self.assertEqual(host, "127.0.0.1")
            self.assertGreater(int(port), 0)
        for rank in range(WORLD):
            res = torch.load(out.format(rank=rank))
            self.assertEqual(res["peer_endpoints"], endpoints)
            # Every rank offered an endpoint: the gathers went peer to peer.
            self.assertEqual(res["data_plane"], "direct",
                             res["data_plane_reason"])
            self.assertEqual(res["rank"], rank)
            self.assertEqual(res["world_size"], WORLD)
            self.assertEqual(res["name"], "fl")
            self.assertEqual(res["identities"],
                             [fgtest.identity(s) for s in sites])
            self.assertTrue(torch.equal(res["all_gather"], expected_gather))
            self.assertEqual(res["contributors"], list(range(WORLD)))
            for name in ("w", "b"):
                stacked = torch.stack([dict_input(r)[name] for r in range(WORLD)])
                self.assertTrue(torch.equal(res["all_gather_dict"][name], stacked))
                self.assertTrue(torch.equal(res["all_reduce_sum"][name],
                                            stacked.sum(0)))
            # sum((r+1) * (r+1)) / sum(r+1): exact integers, one division.
            num = sum((r + 1) * (r + 1) for r in range(WORLD))
            den = sum(r + 1 for r in range(WORLD))
            self.assertTrue(torch.equal(
                res["weighted_mean"],
                torch.full((3,), num / den, dtype=torch.float64)))
            self.assertEqual([p.shape[0] for p in res["all_gather_v"]],
                             [r + 1 for r in range(WORLD)])
            self.assertEqual(res["all_gather_object"],
                             [{"rank": r, "msg": "hi"} for r in range(WORLD)])
            self.assertTrue(torch.equal(res["broadcast"],
                                        torch.full((3,), float(WORLD - 1))))
            self.assertTrue(res["broadcast_same_tensor"])
            kind, is_runtime_error, message = res["mean_of_ints"]
            self.assertTrue(is_runtime_error)
            self.assertIn("INVALID_ARGUMENT", message)

    def test_join_errors(self):
        import fedgather
        with fgtest.Cluster({"fl2": ["site-1", "site-2"]},
                            others=["outsider"]) as cluster:
            client = fedgather.Client(cluster.address, cluster.tls_dir("outsider"))
            with self.assertRaises(RuntimeError) as ctx:
                client.join("fl2", 2, timeout=30)
            self.assertIn("PERMISSION_DENIED", str(ctx.exception))
            self.assertIsInstance(ctx.exception, fedgather.Error)
            missing = fedgather.Client(cluster.address,
                                       os.path.join(cluster.dir, "nope"))
            with self.assertRaises(fedgather.Error) as ctx:
                missing.join("fl2", 2, timeout=30)
            self.assertIn("cert.pem", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()

"""torch.distributed over the "fedgather" backend, against gloo.

Each test starts a fedgather-server with a fresh federation
(fgtest.Cluster) and one process per rank (collectives_worker.py). The same
collectives run with backend gloo over a FileStore on the same inputs, and
every result must be byte-identical; the gathered values are also checked
against the inputs themselves.
"""

import os
import tempfile
import unittest

import torch

import fgtest
from collectives_worker import DTYPES, gather_input, object_input, reduce_input

WORKER = os.path.join(fgtest.HERE, "collectives_worker.py")


def worker_args(scenario, backend, init_method, out=None, world_size=-1,
                extra=(), pass_rank=True):
    def args(rank):
        argv = [WORKER, scenario, "--backend", backend,
                "--rank", str(rank if pass_rank else -1),
                "--world-size", str(world_size)]
        if init_method:
            argv += ["--init-method", init_method]
        if out:
            argv += ["--out", out.format(rank=rank)]
        return argv + list(extra)
    return args


class TorchBackendTest(unittest.TestCase):

    def check_ranks(self, results, cluster=None):
        for r in results:
            self.assertEqual(
                r.returncode, 0,
                f"rank {r.rank} failed:\n{r.output}" +
                (f"\nserver log:\n{cluster.server_log()}" if cluster else ""))

    def run_ops(self, world_size, peer_listen=False):
        """peer_listen: every rank offers a peer endpoint on 127.0.0.1, so
        every op runs on the direct plane."""
        group = f"ops{world_size}"
        sites = [f"site-{i + 1}" for i in range(world_size)]
        work = tempfile.mkdtemp(prefix="fedgather-ops.")
        with fgtest.Cluster({group: sites}) as cluster:
            # rank r is site-(r+1): each process gets its own TLS directory.
            outs = {}
            for backend in ("fedgather", "gloo"):
                out = os.path.join(work, backend + "-{rank}.pt")
                procs = []
                if backend == "fedgather":
                    def args(rank, out=out):
                        url = (f"fedgather://{cluster.address}?group={group}"
                               f"&tls_dir={cluster.tls_dir(sites[rank])}")
                        if peer_listen:
                            url += "&peer_listen=127.0.0.1:0"
                        return worker_args("ops", backend, url, out,
                                           world_size)(rank)
                else:
                    args = worker_args(
                        "ops", backend,
                        fgtest.free_file_url(work, "gloo-store"), out,
                        world_size)
                results = fgtest.run_ranks(args, world_size)
                self.check_ranks(results, cluster)
                outs[backend] = [torch.load(out.format(rank=r))
                                 for r in range(world_size)]
        return outs

    def check_against_inputs(self, results, world_size):
        """The results are what the inputs say, independently of gloo."""
        for rank, res in enumerate(results):
            for dtype in DTYPES:
                name = str(dtype).replace("torch.", "")
                inputs = [gather_input(r, dtype) for r in range(world_size)]
                self.assertEqual(fgtest.raw_bytes(res[f"all_gather/{name}"]),
                                 fgtest.raw_bytes(torch.stack(inputs)))
                self.assertEqual(
                    fgtest.raw_bytes(res[f"all_gather_into_tensor/{name}"]),
                    fgtest.raw_bytes(torch.cat(inputs)))
                self.assertEqual(fgtest.raw_bytes(res[f"broadcast/{name}"]),
                                 fgtest.raw_bytes(inputs[world_size - 1]))
                red = torch.stack([reduce_input(r, dtype).double()
                                   for r in range(world_size)])
                self.assertTrue(torch.equal(
                    res[f"all_reduce_SUM/{name}"].double(), red.sum(0)))
                self.assertTrue(torch.equal(
                    res[f"all_reduce_MIN/{name}"].double(), red.min(0).values))
                self.assertTrue(torch.equal(
                    res[f"all_reduce_MAX/{name}"].double(), red.max(0).values))
            self.assertEqual(res["all_gather_object"],
                             [object_input(r) for r in range(world_size)])
            self.assertEqual(res["async/completed"], [True, True, True])

    def check_identical(self, outs, world_size):
        fed, gloo = outs["fedgather"], outs["gloo"]
        for rank in range(world_size):
            self.assertEqual(fed[rank]["rank"], rank)
            self.assertEqual(set(fed[rank]), set(gloo[rank]))
            for key, expected in gloo[rank].items():
                got = fed[rank][key]
                with self.subTest(rank=rank, key=key):
                    if isinstance(expected, torch.Tensor):
                        self.assertEqual(got.dtype, expected.dtype)
                        self.assertEqual(got.shape, expected.shape)
                        self.assertEqual(fgtest.raw_bytes(got),
                                         fgtest.raw_bytes(expected))
                    else:
                        self.assertEqual(got, expected)

    def test_ops_identical_to_gloo_world_2(self):
        outs = self.run_ops(2)
        self.check_identical(outs, 2)
        self.check_against_inputs(outs["fedgather"], 2)

    def test_ops_identical_to_gloo_world_3(self):
        outs = self.run_ops(3)
        self.check_identical(outs, 3)
        self.check_against_inputs(outs["fedgather"], 3)

    def test_ops_identical_to_gloo_on_the_direct_plane(self):
        outs = self.run_ops(3, peer_listen=True)
        self.check_identical(outs, 3)
        self.check_against_inputs(outs["fedgather"], 3)

    def test_async_op_with_env_init(self):
        """env:// with FEDGATHER_* (no MASTER_ADDR): rank 0's all_gather is
        not completed while rank 1 has not started it, then completes."""
        work = tempfile.mkdtemp(prefix="fedgather-async.")
        fifo = os.path.join(work, "go")
        os.mkfifo(fifo)
        sites = ["site-1", "site-2"]
        with fgtest.Cluster({"async": sites}) as cluster:
            procs_env = {"FEDGATHER_SERVER": cluster.address,
                         "FEDGATHER_GROUP": "async", "WORLD_SIZE": "2"}
            procs_env.pop("MASTER_ADDR", None)
            out = os.path.join(work, "async-{rank}.pt")

            def args(rank):
                return worker_args("async", "fedgather", "env://", out,
                                   extra=["--fifo", fifo],
                                   pass_rank=False)(rank)
            # Each rank needs its own TLS directory and RANK: run them
            # through a tiny shell of env per rank.
            results = fgtest.run_ranks(
                lambda rank: ["-c", _ENV_SHIM, cluster.tls_dir(sites[rank]),
                              str(rank)] + args(rank),
                2, env=procs_env)
            self.check_ranks(results, cluster)
        res = [torch.load(out.format(rank=r)) for r in range(2)]
        self.assertFalse(res[0]["completed_before_peer"])
        self.assertTrue(res[0]["completed_after_wait"])
        expected = torch.stack([torch.arange(4, dtype=torch.float32) + 10 * r
                                for r in range(2)])
        for r in range(2):
            self.assertTrue(torch.equal(res[r]["all_gather"], expected))
        self.assertTrue(torch.equal(res[0]["future_value"], expected.sum(0)))

    def test_shape_mismatch_raises_on_every_rank(self):
        sites = ["site-1", "site-2"]
        with fgtest.Cluster({"mismatch": sites}) as cluster:
            def args(rank):
                url = (f"fedgather://{cluster.address}?group=mismatch"
                       f"&tls_dir={cluster.tls_dir(sites[rank])}")
                return worker_args("mismatch", "fedgather", url,
                                   world_size=2)(rank)
            results = fgtest.run_ranks(args, 2)
            self.check_ranks(results, cluster)
        for r in results:
            errors = [l for l in r.output.splitlines() if l.startswith("ERROR: ")]
            self.assertEqual(len(errors), 1, r.output)
            self.assertIn("INVALID_ARGUMENT", errors[0])
            self.assertIn("shape", errors[0].lower())
            self.assertIn("fedgather all_gather (group mismatch", errors[0])
        # The same status on every rank.
        messages = {l.split(", rank ")[1].split(")", 1)[1]
                    for r in results for l in r.output.splitlines()
                    if l.startswith("ERROR: ")}
        self.assertEqual(len(messages), 1, messages)

    def test_identity_not_in_policy_is_refused(self):
        with fgtest.Cluster({"closed": ["site-1", "site-2"]},
                            others=["outsider"]) as cluster:
            url = (f"fedgather://{cluster.address}?group=closed"
                   f"&tls_dir={cluster.tls_dir('outsider')}")
            results = fgtest.run_ranks(
                worker_args("join", "fedgather", url, world_size=2), 1)
            self.check_ranks(results, cluster)
        errors = [l for l in results[0].output.splitlines()
                  if l.startswith("ERROR: ")]
        self.assertEqual(len(errors), 1, results[0].output)
        self.assertIn("PERMISSION_DENIED", errors[0])
        self.assertIn("spiffe://fedgather/outsider", errors[0])

    def test_peer_listen_comes_from_the_url_and_the_environment(self):
        """peer_listen= in the URL and FEDGATHER_PEER_LISTEN both reach the
        join: a wildcard listen address without an advertised one is refused
        there, naming the setting to give."""
        with fgtest.Cluster({"peer": ["site-1"]}) as cluster:
            tls_dir = cluster.tls_dir("site-1")
            url = (f"fedgather://{cluster.address}?group=peer"
                   f"&tls_dir={tls_dir}&peer_listen=0.0.0.0:0")
            from_url = fgtest.run_ranks(
                worker_args("join", "fedgather", url, world_size=1), 1)
            from_env = fgtest.run_ranks(
                lambda rank: ["-c", _ENV_SHIM, tls_dir, str(rank)] +
                worker_args("join", "fedgather", "env://", "",
                            pass_rank=False)(rank),
                1, env={"FEDGATHER_SERVER": cluster.address,
                        "FEDGATHER_GROUP": "peer", "WORLD_SIZE": "1",
                        "FEDGATHER_PEER_LISTEN": "0.0.0.0:0"})
        for results in (from_url, from_env):
            errors = [l for l in results[0].output.splitlines()
                      if l.startswith("ERROR: ")]
            self.assertEqual(len(errors), 1, results[0].output)
            self.assertIn("INVALID_ARGUMENT", errors[0])
            self.assertIn("FEDGATHER_PEER_ADVERTISE", errors[0])


# Runs the worker with FEDGATHER_TLS_DIR and RANK set for one rank:
# python3 -c SHIM TLS_DIR RANK WORKER ARGS...
_ENV_SHIM = """
import os, runpy, sys
os.environ["FEDGATHER_TLS_DIR"], os.environ["RANK"] = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

if __name__ == "__main__":
    unittest.main()

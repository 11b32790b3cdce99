"""examples/ddp_all_gather.py with a short step count: two processes over
fedgather with mutual TLS, then the same with gloo; both must end with the
same parameters on every rank, and the same with either backend."""

import os
import re
import tempfile
import unittest

import fgtest

EXAMPLE = os.path.join(fgtest.ROOT, "examples", "ddp_all_gather.py")
STEPS = 3


def final_digests(results):
    digests = []
    for r in results:
        m = re.search(r"final parameters sha256 ([0-9a-f]{64}); identical on "
                      r"every rank: True", r.output)
        digests.append(m.group(1) if m else None)
    return digests


class DdpExampleTest(unittest.TestCase):

    def test_fedgather_then_gloo(self):
        sites = ["site-1", "site-2"]
        with fgtest.Cluster({"ddp": sites}) as cluster:
            fed = fgtest.run_ranks(
                lambda r: [EXAMPLE, "--steps", str(STEPS), "--rank", str(r),
                           "--world-size", "2", "--init-method",
                           f"fedgather://{cluster.address}?group=ddp&tls_dir="
                           f"{cluster.tls_dir(sites[r])}"
                           # The gradients go peer to peer (the direct plane).
                           "&peer_listen=127.0.0.1:0"], 2)
            for r in fed:
                self.assertEqual(r.returncode, 0,
                                 f"rank {r.rank}:\n{r.output}\n{cluster.server_log()}")
        store = fgtest.free_file_url(tempfile.mkdtemp(prefix="fedgather-ddp."),
                                     "store")
        gloo = fgtest.run_ranks(
            lambda r: [EXAMPLE, "--backend", "gloo", "--steps", str(STEPS),
                       "--rank", str(r), "--world-size", "2",
                       "--init-method", store], 2)
        for r in gloo:
            self.assertEqual(r.returncode, 0, f"gloo rank {r.rank}:\n{r.output}")
        for r in fed:
            # Every step printed both ranks' gradients.
            self.assertEqual(
                len(re.findall(rf"rank {r.rank} step \d+ weight\.grad from every "
                               r"rank: \[\[", r.output)), STEPS, r.output)
        fed_digests, gloo_digests = final_digests(fed), final_digests(gloo)
        self.assertIsNotNone(fed_digests[0], fed[0].output)
        self.assertEqual(fed_digests, [fed_digests[0]] * 2)
        self.assertEqual(fed_digests, gloo_digests)


if __name__ == "__main__":
    unittest.main()

"""A real fedgather-server process for the conformance tests, with
certificates made by the project's own `fedgather provision` and a policy of
many small groups, so that every test runs in a group of its own.

The binaries come from the environment that ctest sets:
FEDGATHER_SERVER (fedgather-server) and FEDGATHER_CLI (fedgather).
"""

import itertools
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import grpc

import wire
from fedgather.v1 import fedgather_pb2 as pb

SITES = ["site-1", "site-2", "site-3", "site-4"]
# Certified by the federation's CA, but in no group.
STRANGER = "stranger"
# Every group's admin (Admin.AbortRound).
ADMIN = "ops"
# Groups of each family in the policy; every test takes fresh ones.
GROUPS_PER_FAMILY = 48
# Per-identity limits the policy sets (RESOURCE_EXHAUSTED tests).
MAX_TENSORS = 16
MAX_CONTRIBUTION_BYTES = 64 << 20
# Holds at most one stream at a time, and SOLO one group at a time
# (RESOURCE_EXHAUSTED tests).
LIMITED = "limited"
SOLO = "solo"
# A group family: world size, its participants, and extra policy lines.
# "spare" groups have a participant the epoch lacks; "late" ones a round
# deadline short enough to wait for; "quorum" ones run quorum rounds.
FAMILIES = {"w2": (2, SITES[:2], []), "w3": (3, SITES[:3], []),
            "w4": (4, SITES, []), "spare": (2, SITES[:3], []),
            "late": (2, SITES[:2], ["    round_deadline: 2s"]),
            "quorum": (3, SITES[:3],
                       ["    min_quorum: 2", "    round_deadline: 2s"]),
            "limited": (2, [SITES[0], LIMITED], []),
            "solo": (2, [SITES[0], SOLO], []),
            "sha256": (2, SITES[:2], ["    digest: sha256"]),
            "direct": (3, SITES[:3], ["    data_plane: direct"])}
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
# The server's flags besides its address, certificates and policy. The
# resume grace is short, so that a test of a stream that is never resumed
# waits little, and long enough for a resume on a loaded machine; the
# heartbeat timeout is long, so that load never loses a member.
DEFAULT_FLAGS = {"--round-timeout": "30", "--join-timeout": "30",
                 "--heartbeat-interval": "1", "--heartbeat-timeout": "30",
                 "--resume-grace": "3", "--log-level": "warning"}


def identity(name: str) -> str:
    return "spiffe://fedgather/" + name


def _binary(variable: str) -> str:
    path = os.environ.get(variable, "")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"${variable} ({path!r}) is not an executable: "
                           "run the suite through ctest, or set it")
    return path


def _policy(resized: Optional[Dict[str, int]] = None) -> str:
    """_policy: every family's groups; `resized` gives some groups another
    world size (with that many of SITES as participants)."""
    resized = resized or {}
    lines = ["version: 1",
             "limits:",
             "  max_groups: 64",
             "  max_concurrent_streams: 64",
             f"  max_contribution_bytes: {MAX_CONTRIBUTION_BYTES}",
             f"  max_tensors_per_contribution: {MAX_TENSORS}",
             "identity_limits:",
             f"  {identity(LIMITED)}:",
             "    max_concurrent_streams: 1",
             f"  {identity(SOLO)}:",
             "    max_groups: 1",
             "groups:"]
    for family, (world_size, participants, extra) in FAMILIES.items():
        for index in range(GROUPS_PER_FAMILY):
            name = f"{family}-{index:02d}"
            size = resized.get(name, world_size)
            lines += [f"  - name: {name}", f"    world_size: {size}"] + \
                extra + ["    members:"]
            lines += [f"      {identity(site)}: participant"
                      for site in (SITES[:size] if name in resized
                                   else participants)]
            lines.append(f"      {identity(ADMIN)}: admin")
    return "\n".join(lines) + "\n"


def provision(directory: str, names: List[str],
              admins: Sequence[str] = ()) -> None:
    """Provision makes a CA and certificates for the server, `names` and
    `admins` with `fedgather provision` (a CA of its own per directory)."""
    subprocess.run(
        [_binary("FEDGATHER_CLI"), "provision", "--out", directory,
         "--server-names", "localhost,127.0.0.1",
         "--participants", ",".join(names)] +
        (["--admins", ",".join(admins)] if admins else []),
        check=True, capture_output=True, timeout=60)


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


class Server:
    """A provisioned federation and its running server (a context manager).

    `flags` override DEFAULT_FLAGS (and may be changed before start()).
    Start it with start(); stop() sends SIGTERM and returns the exit
    code.
    """

    def __init__(self, flags: Optional[Dict[str, str]] = None):
        self.dir = tempfile.mkdtemp(prefix="fedgather-conformance-")
        self.flags = dict(DEFAULT_FLAGS, **(flags or {}))
        self._process: Optional[subprocess.Popen] = None
        self.port = 0
        self._next_group: Dict[str, itertools.count] = {
            family: itertools.count() for family in FAMILIES}
        provision(self.dir, SITES + [STRANGER, LIMITED, SOLO],
                  admins=[ADMIN])
        self._write_policy(_policy())

    def start(self) -> None:
        port_file = os.path.join(self.dir, "port")
        log = open(os.path.join(self.dir, "server.log"), "ab")
        self._process = subprocess.Popen(
            [_binary("FEDGATHER_SERVER"),
             "--listen", "127.0.0.1:0", "--port-file", port_file,
             "--cert", os.path.join(self.dir, "server", "cert.pem"),
             "--key", os.path.join(self.dir, "server", "key.pem"),
             "--client-ca", os.path.join(self.dir, "ca.pem"),
             "--policy", os.path.join(self.dir, "conformance-policy.yaml")] +
            [part for flag in self.flags.items() for part in flag],
            stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"fedgather-server exited: {self.log()}")
            try:
                text = _read(port_file).strip()
                if text:
                    self.port = int(text)
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        raise RuntimeError(f"fedgather-server did not listen: {self.log()}")

    def stop(self) -> int:
        if self._process is None:
            return 0
        self._process.send_signal(signal.SIGTERM)
        try:
            code = self._process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            code = self._process.wait(timeout=STOP_TIMEOUT_S)
        self._process = None
        return code

    def _write_policy(self, text: str) -> None:
        path = os.path.join(self.dir, "conformance-policy.yaml")
        with open(path + ".new", "w") as file:
            file.write(text)
        os.replace(path + ".new", path)

    def reload_resized(self, resized: Dict[str, int]) -> None:
        """Reload_resized gives the groups in `resized` new world sizes and
        has the server reload its policy (SIGHUP)."""
        self._write_policy(_policy(resized))
        self._process.send_signal(signal.SIGHUP)

    def revoke(self, name: str) -> str:
        """Revoke puts name's certificate on a CRL with `fedgather revoke`
        and returns the CRL's path (for --crl)."""
        crl = os.path.join(self.dir, "crl.pem")
        subprocess.run(
            [_binary("FEDGATHER_CLI"), "revoke", "--ca-dir", self.dir,
             "--crl", crl, os.path.join(self.dir, name, "cert.pem")],
            check=True, capture_output=True, timeout=60)
        return crl

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        try:
            return _read(os.path.join(self.dir, "server.log")).decode(
                errors="replace")[-4000:]
        except OSError:
            return ""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def new_group(self, family: str) -> str:
        """New_group returns a group of `family` no test used yet."""
        index = next(self._next_group[family])
        assert index < GROUPS_PER_FAMILY, "the policy has too few groups"
        return f"{family}-{index:02d}"

    def channel(self, name: str, pki_dir: Optional[str] = None,
                with_certificate: bool = True) -> grpc.Channel:
        """Channel dials the server as `name`, with the certificate from
        pki_dir (default: this federation's), trusting this federation's
        CA for the server."""
        pki = pki_dir or self.dir
        key = cert = None
        if with_certificate:
            key = _read(os.path.join(pki, name, "key.pem"))
            cert = _read(os.path.join(pki, name, "cert.pem"))
        return wire.open_channel(self.address,
                                 _read(os.path.join(self.dir, "ca.pem")),
                                 key, cert)


class Members:
    """World_size members of `group` (site-1.. in order), each with its own
    channel and joined Session; ranks are requested so rank r is SITES[r].
    With peer_endpoints each offers 127.0.0.1:7001+r (docs/protocol.md,
    "Data planes"); nothing listens there.
    close() makes every member leave and closes everything."""

    def __init__(self, server: Server, group: str, world_size: int,
                 peer_endpoints: bool = False):
        self.group = group
        self.world_size = world_size
        self.channels = [server.channel(site) for site in SITES[:world_size]]
        self.sessions = [
            wire.Session(channel, pb.JoinRequest(
                group=group, world_size=world_size, requested_rank=rank,
                peer_endpoint=(f"127.0.0.1:{7001 + rank}" if peer_endpoints
                               else "")))
            for rank, channel in enumerate(self.channels)]
        self.joined = [session.wait_joined() for session in self.sessions]
        self.epoch = self.joined[0].epoch
        self.max_chunk = self.joined[0].max_chunk_bytes
        self.digest_algorithm = self.joined[0].digest_algorithm
        self.identities = [identity(site) for site in SITES[:world_size]]

    def close(self) -> None:
        for session in self.sessions:
            session.leave()
        for session in self.sessions:
            try:
                session.drain(timeout_s=5)
            except queue.Empty:
                pass
            session.close()
        for channel in self.channels:
            channel.close()

"""Test fixtures for fedgather's Python module: certificates from the
project's own `fedgather provision`, a policy with the groups a test needs,
fedgather-server on 127.0.0.1 (a free port, read from --port-file), and
worker processes, one per rank.

The build directory is FEDGATHER_BUILD_DIR (ctest sets it, and PYTHONPATH to
its python/ directory).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence

BUILD_DIR = os.environ.get("FEDGATHER_BUILD_DIR", "")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable

# Every worker and server must be gone by then; the server's round deadline
# fails a stuck collective well before.
PROCESS_TIMEOUT_S = 180


def identity(name: str) -> str:
    return "spiffe://fedgather/" + name


def binary(relative: str) -> str:
    path = os.path.join(BUILD_DIR, relative)
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is missing: build it first "
                           "(FEDGATHER_BUILD_DIR must point at the build)")
    return path


class Cluster:
    """A provisioned federation and a running fedgather-server.

    groups maps group name -> member names (participants, in rank order of
    their names); `others` get certificates but are in no group. Use as a
    context manager; the server is stopped with SIGTERM and must exit 0.
    """

    def __init__(self, groups: Dict[str, Sequence[str]],
                 others: Sequence[str] = (), round_timeout_s: int = 60):
        self.groups = {g: list(m) for g, m in groups.items()}
        names = sorted({n for m in self.groups.values() for n in m} | set(others))
        self.dir = tempfile.mkdtemp(prefix="fedgather-py.")
        self.pki = os.path.join(self.dir, "pki")
        subprocess.run(
            [binary("client/fedgather"), "provision", "--out", self.pki,
             "--server-names", "localhost,127.0.0.1", "--participants",
             ",".join(names), "--group", "unused"],
            check=True, stdout=subprocess.DEVNULL, timeout=120)
        with open(os.path.join(self.pki, "policy.yaml"), "w") as f:
            f.write(self._policy())
        port_file = os.path.join(self.dir, "port")
        self._listening = threading.Event()
        self._log_lines: List[str] = []
        self.server = subprocess.Popen(
            [binary("server/fedgather-server"), "--listen", "127.0.0.1:0",
             "--port-file", port_file,
             "--cert", os.path.join(self.pki, "server", "cert.pem"),
             "--key", os.path.join(self.pki, "server", "key.pem"),
             "--client-ca", os.path.join(self.pki, "ca.pem"),
             "--policy", os.path.join(self.pki, "policy.yaml"),
             "--audit-log", os.path.join(self.dir, "audit.jsonl"),
             "--audit-unsigned", "--round-timeout", str(round_timeout_s)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            errors="replace")
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        # The server logs "listening on port N" after it wrote the port file;
        # the reader sets _listening then, or when the server exits.
        if not self._listening.wait(timeout=30) or self.server.poll() is not None:
            self._stop_server()
            raise RuntimeError("fedgather-server did not start listening:\n" +
                               self.server_log())
        with open(port_file) as f:
            self.port = int(f.read().strip())
        self.address = f"127.0.0.1:{self.port}"

    def _read_log(self) -> None:
        for line in self.server.stderr:
            self._log_lines.append(line)
            if "listening on port" in line:
                self._listening.set()
        self._listening.set()  # exited: let the waiter see it

    def _policy(self) -> str:
        lines = ["version: 1", "groups:"]
        for group, members in self.groups.items():
            lines += [f'  - name: "{group}"', f"    world_size: {len(members)}",
                      "    members:"]
            lines += [f"      {identity(n)}: participant" for n in members]
        return "\n".join(lines) + "\n"

    def tls_dir(self, name: str) -> str:
        return os.path.join(self.pki, name)

    def server_log(self) -> str:
        return "".join(self._log_lines)[-4000:]

    def _stop_server(self) -> Optional[int]:
        if self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
                return None
        self._reader.join(timeout=30)
        self.server.stderr.close()
        return self.server.returncode

    def close(self) -> None:
        rc = self._stop_server()
        shutil.rmtree(self.dir, ignore_errors=True)
        if rc != 0:
            raise RuntimeError(f"fedgather-server exited {rc} on SIGTERM:\n" +
                               self.server_log())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Result:
    def __init__(self, rank: int, returncode: int, output: str):
        self.rank, self.returncode, self.output = rank, returncode, output


def run_ranks(args_for_rank, world_size: int,
              env: Optional[Dict[str, str]] = None,
              timeout: float = PROCESS_TIMEOUT_S) -> List[Result]:
    """Starts one process per rank (args_for_rank(rank) is its argv after
    the interpreter), concurrently, and waits for all of them."""
    base_env = dict(os.environ)
    base_env.setdefault("GRPC_VERBOSITY", "NONE")
    procs = []
    for rank in range(world_size):
        proc_env = dict(base_env)
        if env:
            proc_env.update(env)
        procs.append(subprocess.Popen(
            [PYTHON] + list(args_for_rank(rank)), env=proc_env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs: List[str] = [""] * world_size

    def drain(i):
        with procs[i].stdout:
            outputs[i] = procs[i].stdout.read()

    readers = [threading.Thread(target=drain, args=(i,)) for i in range(world_size)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout
    results = []
    for rank, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            proc.wait()
    for t in readers:
        t.join()
    for rank, proc in enumerate(procs):
        results.append(Result(rank, proc.wait(), outputs[rank]))
    return results


def free_file_url(directory: str, name: str) -> str:
    """A file:// init_method for gloo (its FileStore) in `directory`."""
    return "file://" + os.path.join(directory, name)


def raw_bytes(tensor) -> bytes:
    """The tensor's bytes, for byte-exact comparisons (any dtype)."""
    import torch
    t = tensor.detach().contiguous().flatten()
    if t.dtype == torch.bfloat16 or t.dtype == torch.float16:
        t = t.view(torch.int16)
    elif t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.numpy().tobytes()

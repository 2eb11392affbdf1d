"""Fixtures for replication: one real ZooKeeper per test session, a fresh root per test."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from weir.replication.zkserver import ZooKeeperServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper on an ephemeral loopback port, shared by the session's tests."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


_roots = itertools.count(1)


@pytest.fixture
def zk_root() -> str:
    """A ZooKeeper path of the test's own, so tests sharing the server never see each other."""
    return f"/test-{next(_roots)}"


@pytest.fixture
def kazoo(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zookeeper.hosts, timeout=10)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


_LISTEN = re.compile(r"bookie listening on (\S+):(\d+)")


class BookieProcess:
    """``python -m weir.replication.bookie`` as a child process; SIGTERM or SIGKILL by PID.

    A restart reuses the data directory and the port, so the bookie keeps its id
    (``host:port``) and the ensembles that name it stay valid.
    """

    def __init__(self, data_dir: Path, zk_hosts: str, zk_root: str) -> None:
        self.data_dir = data_dir
        self.zk_hosts = zk_hosts
        self.zk_root = zk_root
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> BookieProcess:
        cmd = [
            sys.executable,
            "-m",
            "weir.replication.bookie",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.port}",
            "--zk",
            self.zk_hosts,
            "--zk-root",
            self.zk_root,
        ]
        self.proc = subprocess.Popen(
            cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT
        )
        ready = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line)
                m = _LISTEN.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(2))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("bookie did not start:\n" + "".join(self.log[-30:]))
        return self

    def stop(self, timeout: float = 30) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)


@pytest.fixture
def bookie_count(request: pytest.FixtureRequest) -> int:
    """How many bookies `bookies` starts: 3, or a test's indirect parameter."""
    return int(getattr(request, "param", 3))


@pytest.fixture
def bookies(
    zookeeper: ZooKeeperServer, zk_root: str, tmp_path: Path, bookie_count: int
) -> Iterator[list[BookieProcess]]:
    """Bookie processes registered under the test's own ZooKeeper root (3 unless overridden)."""
    procs = [
        BookieProcess(tmp_path / f"bookie-{i}", zookeeper.hosts, zk_root)
        for i in range(bookie_count)
    ]
    try:
        for b in procs:
            b.start()
        yield procs
    finally:
        for b in procs:
            b.stop()

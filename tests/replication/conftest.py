"""Fixtures for replication: one real ZooKeeper per test session, a fresh root per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer


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


@pytest.fixture
def bookie_count(request: pytest.FixtureRequest) -> int:
    """How many bookies `bookies` starts: 3, or a test's indirect parameter."""
    return int(getattr(request, "param", 3))


@pytest.fixture
def bookie_args(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """More options for every bookie of `bookies`: none, or a test's indirect parameter."""
    return tuple(getattr(request, "param", ()))


@pytest.fixture
def bookies(
    zookeeper: ZooKeeperServer,
    zk_root: str,
    tmp_path: Path,
    bookie_count: int,
    bookie_args: tuple[str, ...],
) -> Iterator[list[BookieProcess]]:
    """Bookie processes registered under the test's own ZooKeeper root (3 unless overridden)."""
    procs = [
        BookieProcess(tmp_path / f"bookie-{i}", zookeeper.hosts, zk_root, *bookie_args)
        for i in range(bookie_count)
    ]
    try:
        for b in procs:
            b.start()
        yield procs
    finally:
        for b in procs:
            b.stop()

"""Fixtures for replication: a fresh ZooKeeper root per test (the session's ZooKeeper is
`zookeeper`, in tests/conftest.py), bookie processes, ledger clients."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from weir.replication.ledger import LedgerClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer

_roots = itertools.count(1)


@contextmanager
def running(procs: list[BookieProcess]) -> Iterator[list[BookieProcess]]:
    """Start every bookie of ``procs``; stop them all on the way out (a failed start too)."""
    try:
        for b in procs:
            b.start()
        yield procs
    finally:
        for b in procs:
            b.stop()


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
    with running(procs):
        yield procs


@pytest.fixture(scope="module")
def shared_root(request: pytest.FixtureRequest) -> str:
    """A ZooKeeper root for one test module's `shared_bookies`."""
    return f"/module-{request.module.__name__.rsplit('.', 1)[-1]}"


@pytest.fixture(scope="module")
def shared_bookie_args() -> tuple[str, ...]:
    """More options for every bookie of `shared_bookies`: none, or a module's override
    (TLS, in test_bookie_tls.py)."""
    return ()


@pytest.fixture(scope="module")
def shared_bookies(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookie_args: tuple[str, ...],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[BookieProcess]]:
    """Three bookies serving a whole test module (its tests use ledgers and logs of their
    own); a test that stops one starts it again, or `client` does before the next test."""
    base = tmp_path_factory.mktemp("shared-bookies")
    procs = [
        BookieProcess(base / f"b{i}", zookeeper.hosts, shared_root, *shared_bookie_args)
        for i in range(3)
    ]
    with running(procs):
        yield procs


@pytest.fixture
async def shared_client(
    zookeeper: ZooKeeperServer, shared_root: str, shared_bookies: list[BookieProcess]
) -> AsyncIterator[LedgerClient]:
    """A ledger client of the module's `shared_bookies` (restarting any a test left stopped)."""
    for b in shared_bookies:
        if b.proc is None:
            b.start()
    async with LedgerClient(zookeeper.hosts, root=shared_root, request_timeout=5.0) as c:
        yield c

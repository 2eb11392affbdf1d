"""The cluster's claims as a test reads them: through a ZooKeeper client of the test's
own, as an operator's tool would (not through a broker)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from kazoo.client import KazooClient

from weir.broker.cluster import Assignment, ClusterRecords
from weir.replication.zkserver import ZooKeeperServer


@asynccontextmanager
async def cluster_records(zookeeper: ZooKeeperServer, root: str) -> AsyncIterator[ClusterRecords]:
    """The cluster's claims, read with a ZooKeeper client of the test's own."""
    zk = KazooClient(hosts=zookeeper.hosts, timeout=10)
    await asyncio.to_thread(zk.start, 30)
    try:
        yield ClusterRecords(zk, root)
    finally:
        await asyncio.to_thread(zk.stop)
        await asyncio.to_thread(zk.close)


def in_zk(
    zookeeper: ZooKeeperServer, root: str, fn: Callable[[ClusterRecords], Awaitable[str]]
) -> str:
    """``fn`` over the cluster's claims, from a sync test (its own event loop)."""

    async def run() -> str:
        async with cluster_records(zookeeper, root) as found:
            return await fn(found)

    return asyncio.run(run())


async def owner_of(
    records: ClusterRecords, key: str, other_than: str = "", timeout: float = 60
) -> str:
    """The broker holding the claim on ``key`` (not ``other_than``), polled to a deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await records.owner(key)
        if got is not None and got[0].broker != other_than:
            return got[0].broker
        await asyncio.sleep(0.1)
    raise AssertionError(f"nobody (else) claimed {key} in {timeout} s")


class Claims:
    """Who owns a partition, and an unload (a pinned assignment) written as
    `Ownership.unload` writes it."""

    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.records = ClusterRecords(zk, root)

    async def owner(self, key: str, other_than: str = "", timeout: float = 60) -> str:
        """The broker holding the claim on ``key`` (not ``other_than``), polled to a deadline."""
        return await owner_of(self.records, key, other_than, timeout)

    async def unload(self, key: str, to: str) -> None:
        """Assign ``key`` to broker ``to`` (pinned)."""
        while True:
            got = await self.records.assignment(key)
            assert got is not None
            a, version = got
            new = Assignment(to, None, a.generation, pinned=True)
            if await self.records.set_assignment(key, new, version):
                await self.records.bump_epoch()
                return

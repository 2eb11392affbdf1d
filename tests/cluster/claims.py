"""The cluster's claims as a test reads them: through a ZooKeeper client of the test's
own, as an operator's tool would (not through a broker)."""

from __future__ import annotations

from kazoo.client import KazooClient

from tests.cluster.test_clients_follow import owner_of
from weir.broker.cluster import Assignment, ClusterRecords


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

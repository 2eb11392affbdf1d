"""`ReplicatedLogHost`: a broker's partitions as replicated logs, opened under their claims.

The `PartitionHost` that `Ownership` drives when a broker serves partitions from
ledgers: acquiring a partition opens its `ReplicatedPartitionLog` with the claim's
generation (so an opener whose claim was superseded is refused before it fences
anyone); a graceful release snapshots and closes it (the next owner replays
nothing), a lost session abandons it (the next owner recovers and fences).
"""

from __future__ import annotations

from collections.abc import Callable

from weir.errors import UnavailableError
from weir.replication.ledger import LedgerClient
from weir.replication.partition_log import ReplicatedPartitionLog, ReplicationConfig
from weir.storage.partition import PartitionConfig


class ReplicatedLogHost:
    def __init__(
        self,
        client: LedgerClient,
        broker_id: str,
        replication: ReplicationConfig | None = None,
        config: PartitionConfig | None = None,
        config_of: Callable[[str], PartitionConfig | None] | None = None,
    ) -> None:
        """``config``: the partitions' config; ``config_of(key)``: a partition's own (its
        topic's retention, limits, dedup), ``config`` when it answers None."""
        self.client = client
        self.config_of = config_of
        self.broker_id = broker_id
        self.replication = replication or ReplicationConfig()
        self.config = config
        self.logs: dict[str, ReplicatedPartitionLog] = {}
        self.generations: dict[str, int] = {}

    async def acquire(self, key: str, generation: int) -> None:
        own = self.config_of(key) if self.config_of is not None else None
        plog = await ReplicatedPartitionLog.open(
            self.client,
            key,
            own or self.config,
            self.replication,
            owner=f"{self.broker_id}@{generation}",
            claim=generation,
            label=key,
        )
        self.logs[key] = plog
        self.generations[key] = generation

    async def release(self, key: str, *, graceful: bool) -> None:
        plog = self.logs.pop(key, None)
        self.generations.pop(key, None)
        if plog is not None:
            await (plog.close() if graceful else plog.abandon())

    def log(self, key: str) -> ReplicatedPartitionLog:
        """The open log of ``key`` (UnavailableError if this broker does not hold it)."""
        plog = self.logs.get(key)
        if plog is None:
            raise UnavailableError(f"partition {key} is not open on broker {self.broker_id}")
        return plog

    async def close(self) -> None:
        """Close every log (a broker stopping without its Ownership: tests, tools)."""
        for key in list(self.logs):
            await self.release(key, graceful=True)

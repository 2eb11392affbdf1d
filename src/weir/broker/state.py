"""The state every part of the broker shares, and the lookups they all use.

`Broker` (broker.py) is assembled from one mixin per concept (topic admin,
producer admission, writes, consumer offsets, subscriptions, retention, tenancy);
each reads and changes the live objects declared here: the topics, one
`PartitionActor` per partition, committed offsets, pins, access modes, groups.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from weir.broker.access import ProducerAccess
from weir.broker.cluster.broker_mode import PartitionOwner
from weir.broker.compaction.job import CompactionJob
from weir.broker.config import BrokerConfig
from weir.broker.consumer_readers import ConsumerReaders
from weir.broker.consumers import ConsumerGroup, OffsetStore
from weir.broker.loop_commits import LoopCommits
from weir.broker.non_persistent import LivePartition, LiveSubscriptions
from weir.broker.observer import BrokerObserver
from weir.broker.partition_actor import PartitionActor
from weir.broker.producer_ids import IdAllocator
from weir.broker.producers import ProducerPins, ProducerTables
from weir.broker.schemas import SchemaRegistry
from weir.broker.subscriptions import Subscriptions
from weir.broker.tenancy.limits import SessionCounter
from weir.broker.tenancy.registry import Tenancy
from weir.broker.topics import PERSISTENT, TopicConfig, canonical_topic, short_topic
from weir.errors import (
    BadRequestError,
    NotOwnerError,
    UnavailableError,
    UnknownPartitionError,
    UnknownTopicError,
)
from weir.storage.compaction import CompactedView
from weir.storage.kv import Op
from weir.storage.store import Store

if TYPE_CHECKING:
    from weir.broker.backlog_quota import BacklogQuota
    from weir.broker.cluster.broker_mode import ClusterMode


def now_ms() -> int:
    return int(time.time() * 1000)


class BrokerState:
    """The live objects of one broker (set up by `Broker.__init__`) and their lookups."""

    config: BrokerConfig
    observer: BrokerObserver
    store: Store
    generation: int
    offsets: OffsetStore
    commits: LoopCommits  # how the partition actors' commits reach the disk
    pins: ProducerPins
    tenancy: Tenancy
    producer_sessions: SessionCounter
    consumer_sessions: SessionCounter
    access: ProducerAccess
    producer_ids: IdAllocator
    subscriptions: Subscriptions
    schemas: SchemaRegistry
    _topics: dict[str, TopicConfig]
    _backlog_quota: dict[str, BacklogQuota]  # topic -> its quota, when it has one
    _actors: dict[tuple[str, int], PartitionActor]
    _groups: dict[tuple[str, str], ConsumerGroup]
    consumer_readers: ConsumerReaders  # who else reads a consumer's committed offsets
    # compaction (`weir.broker.compaction`): the live view of each compacted partition, the
    # trim floors, the last or current run of each topic, hooks called at each step of a run
    _views: dict[tuple[str, int], CompactedView]
    _trim_floors: dict[tuple[str, int], int]  # partitions trimmed (DeleteRecords) -> the floor
    _compactions: dict[str, CompactionJob]
    compaction_hook: Callable[[str], None] | None
    _compaction_test_hook: Callable[[str], None] | None
    # non-persistent topics (`weir.broker.non_persistent`): their partitions, in memory
    _live: dict[tuple[str, int], LivePartition]
    live_subscriptions: LiveSubscriptions
    _closed: bool
    _lock: asyncio.Lock  # serializes registry changes
    # storage.mode = "replicated": the cluster side (topics from ZooKeeper, partitions
    # owned through it); None in embedded mode
    cluster: ClusterMode | None

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise UnavailableError("server is shutting down")

    async def _commit(self, ops: Sequence[Op]) -> None:
        await asyncio.wrap_future(self.store.committer.submit(ops))

    def topic(self, name: str, database: str = "") -> TopicConfig:
        cname = canonical_topic(name, database)
        cfg = self._topics.get(cname)
        if cfg is None:
            raise UnknownTopicError(f"topic {short_topic(cname)!r} does not exist")
        return cfg

    def _check_partition(self, cfg: TopicConfig, partition: int) -> None:
        if not isinstance(partition, int) or not 0 <= partition < cfg.partitions:
            raise UnknownPartitionError(
                f"topic {short_topic(cfg.name)!r} has partitions 0..{cfg.partitions - 1}, not {partition!r}"
            )

    def actor(self, topic: str, partition: int, database: str = "") -> PartitionActor:
        """The stored partition (a non-persistent topic has none: BadRequestError)."""
        cfg = self.topic(topic, database)
        self._check_partition(cfg, partition)
        if cfg.kind != PERSISTENT:
            raise BadRequestError(
                f"topic {short_topic(cfg.name)!r} is non-persistent: it keeps no messages to "
                "read by offset or consumer position; read it with a reader or a subscription "
                "connected while it is written"
            )
        actor = self._actors.get((cfg.name, partition))
        if actor is None:  # replicated mode: served by another broker, or moving
            return self._not_served(cfg.name, partition)
        return actor

    def _not_served(self, topic: str, partition: int) -> PartitionActor:
        if self.cluster is None:
            raise UnavailableError(f"partition {short_topic(topic)}/{partition} is not open")
        self.cluster.actor_now(topic, partition)  # raises, naming the owner
        raise NotOwnerError(
            f"partition {short_topic(topic)}/{partition} is moving",
            topic=topic,
            partition=partition,
        )

    async def owners(
        self, topic: str, partitions: Sequence[int] = (), database: str = ""
    ) -> list[PartitionOwner]:
        """Who serves each partition of ``topic`` (all when ``partitions`` is empty): this
        broker in embedded mode, the claim's owner in replicated mode (a client's Lookup)."""
        cfg = self.topic(topic, database)
        wanted = list(partitions) or list(range(cfg.partitions))
        for p in wanted:
            self._check_partition(cfg, p)
        if self.cluster is None or cfg.kind != PERSISTENT:
            return [PartitionOwner(p, local=True) for p in wanted]
        return await self.cluster.owners(cfg.name, wanted)

    def live_partition(self, topic: str, partition: int) -> LivePartition:
        """A partition of a non-persistent topic."""
        cfg = self.topic(topic)
        self._check_partition(cfg, partition)
        if cfg.kind == PERSISTENT:
            raise BadRequestError(f"topic {short_topic(cfg.name)!r} is persistent")
        return self._live[(cfg.name, partition)]

    def _producer_tables(self, cfg: TopicConfig) -> ProducerTables:
        if cfg.kind != PERSISTENT:
            return [{} for _ in range(cfg.partitions)]  # no producer state is kept
        # replicated mode: the partitions served here (the others' owners pin their producers)
        actors = (self._actors.get((cfg.name, p)) for p in range(cfg.partitions))
        return [{} if a is None else a.log.producers for a in actors]

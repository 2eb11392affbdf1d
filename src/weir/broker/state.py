"""The state every part of the broker shares, and the lookups they all use.

`Broker` (broker.py) is assembled from one mixin per concept (topic admin,
producer admission, writes, consumer offsets, subscriptions, retention, tenancy);
each reads and changes the live objects declared here: the topics, one
`PartitionActor` per partition, committed offsets, pins, access modes, groups.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from weir.broker.access import ProducerAccess
from weir.broker.config import BrokerConfig
from weir.broker.consumers import ConsumerGroup, OffsetStore
from weir.broker.observer import BrokerObserver
from weir.broker.partition_actor import PartitionActor
from weir.broker.producer_ids import ProducerIds
from weir.broker.producers import ProducerPins, ProducerTables
from weir.broker.schemas import SchemaRegistry
from weir.broker.subscriptions import Subscriptions
from weir.broker.tenancy.limits import SessionCounter
from weir.broker.tenancy.registry import Tenancy
from weir.broker.topics import TopicConfig, canonical_topic, short_topic
from weir.errors import UnavailableError, UnknownPartitionError, UnknownTopicError
from weir.storage.kv import Op
from weir.storage.store import Store


def now_ms() -> int:
    return int(time.time() * 1000)


class BrokerState:
    """The live objects of one broker (set up by `Broker.__init__`) and their lookups."""

    config: BrokerConfig
    observer: BrokerObserver
    store: Store
    generation: int
    offsets: OffsetStore
    pins: ProducerPins
    tenancy: Tenancy
    producer_sessions: SessionCounter
    consumer_sessions: SessionCounter
    access: ProducerAccess
    producer_ids: ProducerIds
    subscriptions: Subscriptions
    schemas: SchemaRegistry
    _topics: dict[str, TopicConfig]
    _backlog_quota: dict[str, int]  # topic -> backlog_quota_bytes, when set
    _actors: dict[tuple[str, int], PartitionActor]
    _groups: dict[tuple[str, str], ConsumerGroup]
    _closed: bool
    _lock: asyncio.Lock  # serializes registry changes

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

    def actor(self, topic: str, partition: int, database: str = "") -> PartitionActor:
        cfg = self.topic(topic, database)
        if not isinstance(partition, int) or not 0 <= partition < cfg.partitions:
            raise UnknownPartitionError(
                f"topic {short_topic(cfg.name)!r} has partitions 0..{cfg.partitions - 1}, not {partition!r}"
            )
        return self._actors[(cfg.name, partition)]

    def _producer_tables(self, cfg: TopicConfig) -> ProducerTables:
        return [self._actors[(cfg.name, p)].log.producers for p in range(cfg.partitions)]

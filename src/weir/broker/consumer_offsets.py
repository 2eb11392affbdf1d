"""The broker's consumer calls (a mixin of `Broker`): registered consumers, their
committed offsets (`weir.broker.consumers.OffsetStore`), where a read session
starts, consumer groups and read-session counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from weir.broker.consumer_readers import ReaderHold
from weir.broker.consumers import ConsumerGroup
from weir.broker.retention import Retention
from weir.broker.tenancy.limits import Lease
from weir.broker.topic_admin import TopicAdmin
from weir.broker.topics import ConsumerConfig, check_consumer_name, short_topic
from weir.errors import (
    ConsumerBusyError,
    OffsetOutOfRangeError,
    UnknownConsumerError,
)
from weir.storage.kv import Op


@dataclass(frozen=True, slots=True)
class ConsumerPartitionInfo:
    partition: int
    committed_offset: int  # next offset the consumer will read
    start_offset: int
    end_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.end_offset - max(self.committed_offset, self.start_offset))


class ConsumerOffsets(TopicAdmin, Retention):
    """Consumers of a topic and their positions."""

    async def ensure_consumer(
        self, topic: str, consumer: str, database: str = ""
    ) -> ConsumerConfig:
        """The consumer's config; registers it when auto_create_consumers is on."""
        cfg = self.topic(topic, database)
        check_consumer_name(consumer)
        existing = cfg.consumers.get(consumer)
        if existing is not None:
            return existing
        if not self.config.auto_create_consumers:
            raise UnknownConsumerError(
                f"consumer {consumer!r} is not registered on {short_topic(cfg.name)!r}; add it with alter"
            )
        new = await self.alter_topic(cfg.name, add_consumers=[ConsumerConfig(consumer)])
        return new.consumers[consumer]

    def consumer(self, topic: str, consumer: str, database: str = "") -> ConsumerConfig:
        cfg = self.topic(topic, database)
        c = cfg.consumers.get(consumer)
        if c is None:
            raise UnknownConsumerError(
                f"consumer {consumer!r} is not registered on {short_topic(cfg.name)!r}"
            )
        return c

    def committed_offset(self, topic: str, partition: int, consumer: str) -> int | None:
        cfg = self.topic(topic)
        return self.offsets.get(cfg.topic_id, partition, consumer)

    def read_start(self, topic: str, partition: int, consumer: str, read_from_ms: int = 0) -> int:
        """Where a consumer's read session starts: its committed offset, else the first
        offset written at/after ``read_from_ms``, else the partition start."""
        actor = self.actor(topic, partition)
        committed = self.committed_offset(topic, partition, consumer) if consumer else None
        start = actor.start_offset
        if committed is not None:
            pos = max(committed, start)
        elif read_from_ms > 0:
            pos = actor.log.offset_for_time(read_from_ms)
        else:
            pos = start
        if read_from_ms > 0 and committed is not None:
            pos = max(pos, actor.log.offset_for_time(read_from_ms))
        ttl = self.ttl_offset(topic, partition) if consumer else None
        if ttl is not None:
            pos = max(pos, ttl)
        return min(pos, actor.end_offset)

    async def commit_offset(
        self,
        topic: str,
        partition: int,
        consumer: str,
        offset: int,
        *,
        allow_backwards: bool = False,
    ) -> bool:
        """Store the consumer's next offset to read. Never past EndOffset; backwards only
        when asked (an operator's rewind), never from a read session. Refused
        (`ConsumerBusyError`) while subscription consumers hold the consumer's offsets."""
        cfg = self.topic(topic)
        actor = self.actor(topic, partition)
        if consumer not in cfg.consumers:
            await self.ensure_consumer(topic, consumer)
        self.check_not_subscribed(cfg.name, consumer)
        if offset > actor.end_offset:
            raise OffsetOutOfRangeError(
                f"cannot commit offset {offset} on {short_topic(cfg.name)}/{partition}: end offset is "
                f"{actor.end_offset}"
            )
        changed = await self.offsets.commit(
            cfg.topic_id, partition, consumer, offset, allow_backwards=allow_backwards
        )
        if changed:
            self.observer.on_consumer_commit(cfg.name, partition, consumer, offset)
        return changed

    def prepare_offset_commit(
        self, topic: str, partition: int, consumer: str, offset: int
    ) -> tuple[list[Op], Callable[[], None]]:
        """A commit of the consumer's next offset as KV ops to commit with others (a
        transaction's commit), and what to call once they are durable. Forward only; the
        caller checked the offset against the partition (see `commit_offset`)."""
        cfg = self.topic(topic)
        self.consumer(cfg.name, consumer)
        self.check_not_subscribed(cfg.name, consumer)
        ops, done = self.offsets.prepare(cfg.topic_id, partition, consumer, offset)

        def committed() -> None:
            done()
            if ops:
                self.observer.on_consumer_commit(cfg.name, partition, consumer, offset)

        return ops, committed

    async def delete_offset(self, topic: str, partition: int, consumer: str) -> bool:
        """Forget the consumer's committed offset of one partition (it reads from where a
        new consumer would). When it was the consumer's last offset on the topic, the
        consumer is dropped from the topic too, as Kafka forgets a group's interest in a
        topic with its offsets. False when there was no offset to delete; ConsumerBusyError
        while subscription consumers hold the consumer's offsets."""
        cfg = self.topic(topic)
        self.actor(topic, partition)
        if consumer not in cfg.consumers:
            return False
        self.check_not_subscribed(cfg.name, consumer)
        deleted = await self.offsets.delete(cfg.topic_id, partition, consumer)
        if deleted and not self.offsets.partitions_of(cfg.topic_id, consumer):
            cfg = self.topic(topic)
            if consumer in cfg.consumers:
                await self.alter_topic(cfg.name, drop_consumers=[consumer])
        return deleted

    def committed_partitions(self, topic: str, consumer: str) -> list[int]:
        """The partitions of ``topic`` the consumer has committed an offset on."""
        cfg = self.topic(topic)
        return self.offsets.partitions_of(cfg.topic_id, consumer)

    def describe_consumer(self, topic: str, consumer: str) -> list[ConsumerPartitionInfo]:
        cfg = self.topic(topic)
        self.consumer(topic, consumer)
        out = []
        for p in range(cfg.partitions):
            a = self._actors.get((cfg.name, p))
            if a is None:
                if self.cluster is not None:
                    continue  # served by another broker (described there)
                a = self.actor(cfg.name, p)
            committed = self.offsets.get(cfg.topic_id, p, consumer)
            out.append(
                ConsumerPartitionInfo(
                    p,
                    a.start_offset if committed is None else committed,
                    a.start_offset,
                    a.end_offset,
                )
            )
        return out

    def check_not_subscribed(self, topic: str, consumer: str) -> None:
        """ConsumerBusyError while subscription consumers hold the consumer's committed
        offsets: they serve one kind of reader at a time (`weir.broker.consumer_readers`)."""
        cfg = self.topic(topic)
        attached = self.subscriptions.consumer_subscribers(cfg, consumer)
        if attached:
            raise ConsumerBusyError(
                f"consumer {consumer!r} of {short_topic(cfg.name)!r} has {attached} subscription "
                "consumer(s) attached; its committed offsets serve one kind of reader at a time"
            )

    def hold_consumer(self, kind: str, topic: str, consumer: str) -> ReaderHold:
        """Count a reader of the consumer's committed offsets that is not in a group (a
        read session naming its partitions) until it releases the hold; refused while
        subscription consumers are attached."""
        cfg = self.topic(topic)
        self.check_not_subscribed(cfg.name, consumer)
        return self.consumer_readers.hold(kind, cfg.name, consumer)

    def _group_members(self, topic: str, consumer: str) -> int:
        g = self._groups.get((topic, consumer))
        return 0 if g is None else len(g.members)

    def group(self, topic: str, consumer: str) -> ConsumerGroup:
        """The consumer's group of read sessions; refused while subscription consumers
        hold its committed offsets (one kind of reader at a time, as `subscribe` checks)."""
        cfg = self.topic(topic)
        self.check_not_subscribed(cfg.name, consumer)
        key = (cfg.name, consumer)
        g = self._groups.get(key)
        if g is None:
            g = ConsumerGroup(cfg.name, consumer, cfg.partitions, self.config.rebalance_timeout_s)
            self._groups[key] = g
        return g

    def count_consumer(self, topic: str) -> Lease:
        """Count a live read session, within the topic's max_consumers_per_topic."""
        cfg = self.topic(topic)
        limit = self.topic_policies(cfg)["max_consumers_per_topic"]
        return self.consumer_sessions.acquire(cfg.name, limit, "", short_topic(cfg.name))

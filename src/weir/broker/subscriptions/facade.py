"""The broker's calls for durable subscriptions (a mixin of `Broker`): they meet
the topics here; dead letters are written back through the broker's write path."""

from __future__ import annotations

import contextlib

from weir.broker.subscriptions import (
    AttachedConsumer,
    ConsumerHandle,
    DeadLetterPolicy,
    InitialPosition,
    Subscription,
    SubscriptionInfo,
    SubscriptionType,
)
from weir.broker.topic_admin import TopicAdmin
from weir.broker.topics import canonical_topic, short_topic
from weir.broker.writes import Writes
from weir.errors import AlreadyExistsError, BadRequestError
from weir.storage.incoming import validate_incoming


class SubscriptionFacade(TopicAdmin, Writes):
    """Subscription admin, consumers attaching, dead letters."""

    async def create_subscription(
        self,
        topic: str,
        name: str,
        type: str | SubscriptionType = SubscriptionType.EXCLUSIVE,
        initial_position: str | InitialPosition = InitialPosition.LATEST,
        initial_time_ms: int | None = None,
    ) -> SubscriptionInfo:
        self._check_open()
        cfg = self.topic(topic)
        sub = await self.subscriptions.create(
            cfg,
            name,
            SubscriptionType.parse(type),
            InitialPosition.parse(initial_position),
            initial_time_ms=initial_time_ms,
        )
        return sub.describe(short_topic(cfg.name))

    def subscription(self, topic: str, name: str) -> Subscription:
        return self.subscriptions.get(self.topic(topic), name)

    def describe_subscription(self, topic: str, name: str) -> SubscriptionInfo:
        cfg = self.topic(topic)
        return self.subscriptions.get(cfg, name).describe(short_topic(cfg.name))

    def list_subscriptions(self, topic: str) -> list[SubscriptionInfo]:
        cfg = self.topic(topic)
        return [s.describe(short_topic(cfg.name)) for s in self.subscriptions.of_topic(cfg)]

    async def delete_subscription(self, topic: str, name: str, *, force: bool = False) -> None:
        self._check_open()
        await self.subscriptions.delete(self.topic(topic), name, force=force)

    async def seek_subscription(
        self,
        topic: str,
        name: str,
        offsets: dict[int, int] | None = None,
        timestamp_ms: int | None = None,
    ) -> SubscriptionInfo:
        """Move a subscription: partitions to offsets, or every partition to a time."""
        self._check_open()
        cfg = self.topic(topic)
        sub = self.subscriptions.get(cfg, name)
        if timestamp_ms is not None:
            if offsets:
                raise BadRequestError("seek to offsets or to a time, not both")
            offsets = {
                p: self._actors[(cfg.name, p)].log.offset_for_time(timestamp_ms)
                for p in range(cfg.partitions)
            }
        if not offsets:
            raise BadRequestError("a seek needs offsets or a time")
        for p, o in offsets.items():
            self.actor(cfg.name, p)  # range check
            if o < 0:
                raise BadRequestError(f"cannot seek partition {p} to offset {o}")
        await sub.seek(offsets)
        return sub.describe(short_topic(cfg.name))

    async def subscribe(
        self,
        topic: str,
        name: str,
        type: str | SubscriptionType,
        initial_position: str | InitialPosition,
        handle: ConsumerHandle,
        *,
        consumer_name: str = "",
        ack_timeout_ms: int = 0,
        create: bool = True,
        dead_letter: DeadLetterPolicy | None = None,
        initial_time_ms: int | None = None,
        partitions: frozenset[int] | None = None,
        whole_batches: bool = False,
    ) -> tuple[Subscription, AttachedConsumer]:
        """Attach a consumer to a durable subscription (see `weir.broker.subscriptions`)."""
        self._check_open()
        if ack_timeout_ms < 0:
            raise BadRequestError(f"ack timeout must be >= 0 ms, got {ack_timeout_ms}")
        return await self.subscriptions.subscribe(
            self.topic(topic),
            name,
            SubscriptionType.parse(type),
            InitialPosition.parse(initial_position),
            handle,
            consumer_name=consumer_name,
            ack_timeout_ms=ack_timeout_ms,
            create=create,
            dead_letter=dead_letter,
            initial_time_ms=initial_time_ms,
            partitions=partitions,
            whole_batches=whole_batches,
        )

    async def _write_dead_letters(self, topic: str, batches: list[bytes]) -> None:
        """Store dead letters in ``topic`` (created with one partition when missing)."""
        if canonical_topic(topic) not in self._topics:
            with contextlib.suppress(AlreadyExistsError):
                await self.create_topic(topic, partitions=1)
        cfg = self.topic(topic)
        await self.write(cfg.name, 0, validate_incoming(batches))

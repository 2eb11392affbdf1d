"""The broker's calls for durable subscriptions (a mixin of `Broker`): they meet
the topics here; dead letters are written back through the broker's write path."""

from __future__ import annotations

import contextlib

from weir.broker.non_persistent import LiveSubscription
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
from weir.broker.topics import PERSISTENT, TopicConfig, canonical_topic, short_topic
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
        self._durable_only(cfg)
        sub = await self.subscriptions.create(
            cfg,
            name,
            SubscriptionType.parse(type),
            InitialPosition.parse(initial_position),
            initial_time_ms=initial_time_ms,
        )
        return sub.describe(short_topic(cfg.name))

    def _durable_only(self, cfg: TopicConfig) -> None:
        if cfg.kind != PERSISTENT:
            raise BadRequestError(
                f"topic {short_topic(cfg.name)!r} is non-persistent: its subscriptions are made "
                "by subscribing and keep no position to create or move"
            )

    def subscription(self, topic: str, name: str) -> Subscription:
        return self.subscriptions.get(self.topic(topic), name)

    def describe_subscription(self, topic: str, name: str) -> SubscriptionInfo:
        cfg = self.topic(topic)
        if cfg.kind != PERSISTENT:
            return self.live_subscriptions.get(cfg.name, name).describe(short_topic(cfg.name))
        return self.subscriptions.get(cfg, name).describe(short_topic(cfg.name))

    def list_subscriptions(self, topic: str) -> list[SubscriptionInfo]:
        cfg = self.topic(topic)
        if cfg.kind != PERSISTENT:
            subs: list[Subscription | LiveSubscription] = list(
                self.live_subscriptions.of_topic(cfg.name)
            )
        else:
            subs = list(self.subscriptions.of_topic(cfg))
        return [s.describe(short_topic(cfg.name)) for s in subs]

    async def delete_subscription(self, topic: str, name: str, *, force: bool = False) -> None:
        self._check_open()
        cfg = self.topic(topic)
        if cfg.kind != PERSISTENT:
            sub = self.live_subscriptions.delete(cfg.name, name, force=force)
            for p in range(cfg.partitions):
                live = self._live.get((cfg.name, p))
                if live is not None and sub in live.sinks:
                    live.sinks.remove(sub)
            return
        await self.subscriptions.delete(cfg, name, force=force)

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
        self._durable_only(cfg)
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
    ) -> tuple[Subscription | LiveSubscription, AttachedConsumer]:
        """Attach a consumer to a durable subscription (see `weir.broker.subscriptions`), or
        on a non-persistent topic to a live one (`weir.broker.non_persistent`: it gets the
        messages written from now on, and keeps nothing)."""
        self._check_open()
        if ack_timeout_ms < 0:
            raise BadRequestError(f"ack timeout must be >= 0 ms, got {ack_timeout_ms}")
        cfg = self.topic(topic)
        if cfg.kind != PERSISTENT:
            if partitions is not None or whole_batches:
                # Per-partition, whole-batch consumers are the Pulsar front's; live
                # subscriptions deliver single messages of every partition.
                raise BadRequestError(
                    f"topic {short_topic(cfg.name)!r} is non-persistent: this front serves "
                    "persistent topics only"
                )
            sub, c, new = self.live_subscriptions.subscribe(
                cfg.name,
                cfg.partitions,
                name,
                SubscriptionType.parse(type),
                handle,
                consumer_name=consumer_name,
                create=create,
            )
            if new:
                for p in range(cfg.partitions):
                    self._live[(cfg.name, p)].sinks.append(sub)
            return sub, c
        return await self.subscriptions.subscribe(
            cfg,
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

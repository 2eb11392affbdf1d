"""The broker's calls for durable subscriptions (a mixin of `Broker`): they meet
the topics here; dead letters are written back through the broker's write path."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

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
from weir.broker.subscriptions.retry import RetryLetters, retry_topic_for
from weir.broker.topic_admin import TopicAdmin
from weir.broker.topics import PERSISTENT, TopicConfig, canonical_topic, short_topic
from weir.broker.writes import Writes
from weir.errors import AlreadyExistsError, BadRequestError, ConsumerBusyError, WeirError
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
        """Every subscription of the topic, its consumers' committed offsets included."""
        cfg = self.topic(topic)
        if cfg.kind != PERSISTENT:
            subs: list[Subscription | LiveSubscription] = list(
                self.live_subscriptions.of_topic(cfg.name)
            )
        else:
            subs = list(self.subscriptions.listed(cfg))
        return [s.describe(short_topic(cfg.name)) for s in subs]

    async def delete_subscription(self, topic: str, name: str, *, force: bool = False) -> None:
        """Delete a subscription; for a consumer's (committed offsets), remove the consumer."""
        self._check_open()
        cfg = self.topic(topic)
        if cfg.kind != PERSISTENT:
            self._delete_live_subscription(cfg, name, force)
            return
        if self.subscriptions.is_consumer(cfg, name):
            held = self.subscriptions.get(cfg, name)
            if held.consumers and not force:
                raise ConsumerBusyError(
                    f"subscription {name!r} has {len(held.consumers)} consumer(s) attached; "
                    "close them first, or delete with force"
                )
            await self.alter_topic(cfg.name, drop_consumers=[name])
            await self.subscriptions.forget_consumer(cfg, name)
            return
        await self.subscriptions.delete(cfg, name, force=force)

    def _delete_live_subscription(self, cfg: TopicConfig, name: str, force: bool) -> None:
        sub = self.live_subscriptions.delete(cfg.name, name, force=force)
        for p in range(cfg.partitions):
            live = self._live.get((cfg.name, p))
            if live is not None and sub in live.sinks:
                live.sinks.remove(sub)

    def drop_idle_live_subscription(self, topic: str, name: str) -> None:
        """Delete a non-persistent topic's subscription if no consumer is attached (a
        Pulsar reader's, when it closes); nothing happens otherwise."""
        with contextlib.suppress(WeirError):
            cfg = self.topic(topic)
            if cfg.kind != PERSISTENT and not self.live_subscriptions.get(cfg.name, name).consumers:
                self._delete_live_subscription(cfg, name, force=False)

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

    async def skip_subscription(
        self, topic: str, name: str, count: int | None = None, partition: int | None = None
    ) -> int:
        """Skip ``count`` messages (None: all, a clear-backlog) of every partition, or of
        ``partition`` only: they count as acknowledged. Returns how many were skipped."""
        self._check_open()
        cfg = self.topic(topic)
        self._durable_only(cfg)
        if partition is not None:
            self.actor(cfg.name, partition)  # range check
        sub = self.subscriptions.get(cfg, name)
        # every partition of the subscription (replicated mode: those served here)
        parts = sorted(sub.parts) if partition is None else [partition]
        return await sub.skip(count, parts)

    async def acknowledge_batch_indexes(
        self,
        topic: str,
        name: str,
        partition: int,
        batch_offset: int,
        indexes: Iterable[int],
    ) -> None:
        """Acknowledge messages of the stored batch at ``batch_offset`` by their index in
        it (what a Pulsar ack set says); durable on return, the rest is delivered again."""
        self._check_open()
        await self.subscription(topic, name).acknowledge_batch_indexes(
            partition, batch_offset, indexes
        )

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
        hash_ranges: Sequence[tuple[int, int]] | None = None,
        partitions: frozenset[int] | None = None,
        whole_batches: bool = False,
    ) -> tuple[Subscription | LiveSubscription, AttachedConsumer]:
        """Attach a consumer to a durable subscription (see `weir.broker.subscriptions`), or
        on a non-persistent topic to a live one (`weir.broker.non_persistent`: it gets the
        messages written from now on, and keeps nothing). ``hash_ranges`` makes it a sticky
        Key_Shared consumer of those key-hash slots (durable subscriptions only)."""
        self._check_open()
        if ack_timeout_ms < 0:
            raise BadRequestError(f"ack timeout must be >= 0 ms, got {ack_timeout_ms}")
        cfg = self.topic(topic)
        if cfg.kind == PERSISTENT:
            if self.cluster is not None and name in cfg.consumers:
                self._embedded_admin("subscribing to a consumer's committed offsets")
        else:
            if hash_ranges is not None:
                raise BadRequestError(
                    f"topic {short_topic(cfg.name)!r} is non-persistent: sticky hash ranges "
                    "are for durable Key_Shared subscriptions"
                )
            if whole_batches:
                # live subscriptions hand out single messages (a whole batch may be
                # split by key, or by the consumer's permits)
                raise BadRequestError(
                    f"topic {short_topic(cfg.name)!r} is non-persistent: its consumers take "
                    "single messages, not whole batches"
                )
            sub, c, new = self.live_subscriptions.subscribe(
                cfg.name,
                cfg.partitions,
                name,
                SubscriptionType.parse(type),
                handle,
                consumer_name=consumer_name,
                create=create,
                only=partitions,
            )
            if new:
                for p in range(cfg.partitions):
                    self._live[(cfg.name, p)].sinks.append(sub)
            return sub, c

        def check_readers() -> None:
            # a consumer's committed offsets serve one kind of reader at a time: checked
            # again just before attaching (`weir.broker.consumer_readers`)
            readers = self.consumer_readers.busy(cfg.name, name)
            if readers is not None and self.subscriptions.is_consumer(cfg, name):
                raise ConsumerBusyError(
                    f"consumer {name!r} of {short_topic(cfg.name)!r} is read by {readers}; "
                    "its committed offsets serve one kind of reader at a time"
                )

        check_readers()
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
            hash_ranges=hash_ranges,
            partitions=partitions,
            whole_batches=whole_batches,
            check_readers=check_readers,
        )

    async def side_topic(self, topic: str) -> TopicConfig:
        """A dead-letter or retry topic: created with one partition when missing."""
        if canonical_topic(topic) not in self._topics:
            with contextlib.suppress(AlreadyExistsError):
                await self.create_topic(topic, partitions=1)
        return self.topic(topic)

    def retry_letters(self, sub: Subscription, retry_topic: str = "") -> RetryLetters:
        """Where ``reconsume_later`` sends ``sub``'s messages: its retry topic (default
        ``<topic>-<subscription>-RETRY``) and, past its dead-letter policy's count, its
        dead-letter topic."""
        short = short_topic(sub.topic)
        meta = sub.meta
        return RetryLetters(
            retry_topic or retry_topic_for(short, sub.name),
            DeadLetterPolicy(meta.max_redeliver_count, meta.dead_letter_topic).topic_for(
                short, sub.name
            )
            if meta.max_redeliver_count
            else "",
            meta.max_redeliver_count,
        )

    async def _write_dead_letters(self, topic: str, batches: list[bytes]) -> None:
        """Store dead (or retry) letters in ``topic`` (created with one partition when missing)."""
        cfg = await self.side_topic(topic)
        await self.write(cfg.name, 0, validate_incoming(batches))

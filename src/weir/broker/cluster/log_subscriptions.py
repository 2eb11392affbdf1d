"""`LogSubscriptions`: the broker's durable subscriptions in replicated mode.

Each cursor lives in its partition's replicated log (`log_cursors`), metadata and all,
so a subscription is per partition: a broker knows the subscriptions of the partitions
it serves. When it claims a partition (`partition_opened`) it loads the cursors named
in the log's positions; when the partition leaves (`partition_closed`: unload,
rebalance, lost session) the subscriptions stop dispatching it and the consumers
attached to it alone are dropped with the retryable not-owner error, so that they look
it up and attach at the new owner, which serves them from the acknowledged position.

Creating a subscription (by admin, or by a first subscribe) writes a cursor on each
partition of the topic this broker serves; one already in a partition's log is
used as it is. Deleting it clears the cursors of the partitions served here (the
owners of the others clear theirs). A topic's consumers (committed offsets) are not
subscriptions here: their offsets have readers of their own (`LogOffsets`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from weir.broker.cluster.log_cursors import PREFIX, LogCursor, decode_sub_position
from weir.broker.partition_actor import PartitionActor
from weir.broker.subscriptions import Subscription, Subscriptions
from weir.broker.subscriptions.settings import (
    InitialPosition,
    SubscriptionMeta,
    SubscriptionType,
    check_subscription_name,
)
from weir.broker.subscriptions.state import DeadLetterSink, all_durable
from weir.broker.topics import TopicConfig, short_topic
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    CorruptDataError,
    NotOwnerError,
    UnknownSubscriptionError,
    WeirError,
)
from weir.replication.partition_log import ReplicatedPartitionLog
from weir.storage.committer import GroupCommitter
from weir.storage.kv import KV

log = logging.getLogger("weir.cluster")


class LogSubscriptions(Subscriptions):
    """`Subscriptions` whose cursors are positions of the replicated partitions served here."""

    def __init__(
        self,
        kv: KV,
        committer: GroupCommitter,
        actor_of: Callable[[str, int], PartitionActor[Any]],
        served: Callable[[str, int], PartitionActor[Any] | None],
        dead_letter_sink: DeadLetterSink | None = None,
    ) -> None:
        """``actor_of``: the partition's actor or the not-owner error; ``served``: the
        actor of a partition served here, None otherwise."""
        super().__init__(kv, committer, actor_of, dead_letter_sink, None, None)
        self._served = served

    # ------------------------------------------------------------------ cursors

    def _make(self, cfg: TopicConfig, meta: SubscriptionMeta) -> Subscription:
        name = cfg.name
        sub: Subscription

        def new_cursor(p: int, mark: int) -> LogCursor:
            return LogCursor(self._actor_of(name, p), meta.name, lambda: sub.meta, mark)

        sub = Subscription(
            name,
            cfg.topic_id,
            meta,
            lambda p: self._actor_of(name, p),
            new_cursor,
            self._dead_letter_sink,
        )
        return sub

    def _stored(self, actor: PartitionActor[Any], name: str, sub: Subscription) -> LogCursor | None:
        """The cursor of subscription ``name`` stored in the partition's log, if any."""
        plog: ReplicatedPartitionLog = actor.log
        raw = plog.positions.get(PREFIX + name)
        if raw is None:
            return None
        _, mark, acked, counts = decode_sub_position(raw)
        return LogCursor(actor, name, lambda: sub.meta, mark, acked, counts)

    def load(self, topics: Iterable[TopicConfig]) -> None:
        """Nothing in the broker's LMDB: the cursors come with the partitions claimed."""

    def partition_opened(self, cfg: TopicConfig, partition: int) -> None:
        """This broker claimed ``partition``: serve the subscriptions stored in its log."""
        actor = self._served(cfg.name, partition)
        if actor is None or not isinstance(actor.log, ReplicatedPartitionLog):
            return
        for key, raw in sorted(actor.log.positions.items()):
            if not key.startswith(PREFIX):
                continue
            try:
                meta, mark, acked, counts = decode_sub_position(raw)
            except CorruptDataError as exc:
                log.error(
                    "a stored subscription cursor does not decode",
                    extra={"topic": cfg.name, "partition": partition, "error": exc.message},
                )
                continue
            subs = self._subs.setdefault(cfg.name, {})
            sub = subs.get(meta.name)
            if sub is None:
                sub = subs[meta.name] = self._make(cfg, meta)
            held = sub
            sub.drop_partition(partition, _moving(cfg, partition))  # a stale one, if any
            cur = LogCursor(actor, meta.name, lambda s=held: s.meta, mark, acked, counts)
            sub.add_partition(partition, cur, fresh=False)

    def partition_closed(self, topic: str, partition: int) -> None:
        """``partition`` left this broker: its subscriptions stop serving it."""
        subs = self._subs.get(topic)
        if not subs:
            return
        err = NotOwnerError(
            f"partition {short_topic(topic)}/{partition} moved to another broker: look it up "
            "and subscribe there",
            topic=topic,
            partition=partition,
        )
        for name, sub in list(subs.items()):
            sub.drop_partition(partition, err)
            if not sub.parts and not sub.consumers:
                sub.close_soon(err)
                del subs[name]
        if not subs:
            self._subs.pop(topic, None)

    # ------------------------------------------------------------------ admin

    def _served_partitions(self, cfg: TopicConfig) -> list[int]:
        parts = [p for p in range(cfg.partitions) if self._served(cfg.name, p) is not None]
        if not parts:
            self._actor_of(cfg.name, 0)  # raises: not served here, naming the owner
        return parts

    async def create(
        self,
        cfg: TopicConfig,
        name: str,
        type: SubscriptionType,
        initial_position: InitialPosition,
        *,
        exist_ok: bool = False,
        initial_time_ms: int | None = None,
    ) -> Subscription:
        """Create the subscription on the partitions served here (a cursor already in a
        partition's log is kept as it is; the others start at ``initial_position``)."""
        check_subscription_name(name)
        if name in cfg.consumers:
            raise BadRequestError(
                f"{name!r} is a consumer of topic {short_topic(cfg.name)!r}: its committed "
                "offsets are not a subscription on a replicated partition (read them with a "
                "read session)"
            )
        if initial_time_ms is not None or initial_position is InitialPosition.TIMESTAMP:
            raise BadRequestError(
                "an initial position by time is not supported on a replicated partition "
                "(storage.mode = 'replicated') yet; see docs/cluster.md, 'Not done yet'"
            )
        async with self._lock:
            parts = self._served_partitions(cfg)
            subs = self._subs.get(cfg.name, {})
            sub = subs.get(name)
            if sub is not None and not exist_ok:
                raise AlreadyExistsError(
                    f"subscription {name!r} already exists on topic {short_topic(cfg.name)!r}"
                )
            if sub is None:
                meta = SubscriptionMeta(name, type, initial_position, int(time.time() * 1000))
                for p in parts:  # another owner's, stored before this broker claimed p
                    found = self._served(cfg.name, p)
                    raw = None if found is None else found.log.positions.get(PREFIX + name)
                    if raw is not None:
                        meta = decode_sub_position(raw)[0]
                        if not exist_ok:
                            raise AlreadyExistsError(
                                f"subscription {name!r} already exists on topic "
                                f"{short_topic(cfg.name)!r}"
                            )
                        break
                sub = self._make(cfg, meta)
            waits = []
            for p in parts:
                if p in sub.parts:
                    continue
                actor = self._actor_of(cfg.name, p)
                cur = self._stored(actor, name, sub)
                if cur is not None:
                    sub.add_partition(p, cur, fresh=False)
                    continue
                mark = (
                    actor.start_offset
                    if sub.meta.initial_position is InitialPosition.EARLIEST
                    else actor.end_offset
                )
                cur = LogCursor(actor, name, lambda s=sub: s.meta, mark)
                waits.append(cur.persist())
                sub.add_partition(p, cur, fresh=True)
            self._subs.setdefault(cfg.name, {})[name] = sub
            await all_durable(waits)
            return sub

    async def _store_meta(self, cfg: TopicConfig, sub: Subscription) -> None:
        """The metadata rides in every cursor: store each cursor again."""
        await all_durable([st.cursor.persist() for st in sub.parts.values()])

    async def _drop_stored(self, sub: Subscription) -> None:
        drops = [st.cursor.drop() for st in sub.parts.values() if isinstance(st.cursor, LogCursor)]
        await asyncio.gather(*drops)

    def get(self, cfg: TopicConfig, name: str) -> Subscription:
        """The subscription on the partitions served here; the not-owner error when this
        broker serves none of the topic's (its owner knows the subscription)."""
        sub = self._subs.get(cfg.name, {}).get(name)
        if sub is None:
            self._served_partitions(cfg)
            raise UnknownSubscriptionError(
                f"subscription {name!r} does not exist on topic {short_topic(cfg.name)!r}"
            )
        return sub

    def consumer_subscriptions(self, cfg: TopicConfig) -> dict[str, Subscription]:
        return {}  # a consumer's committed offsets are read by read sessions only here

    def on_partitions(self, cfg: TopicConfig) -> None:
        """The topic grew: a new partition gets its cursors when a consumer subscribes at
        its owner (nothing is stored before that)."""

    async def close(self) -> None:
        err: WeirError | None = None
        for _, _, sub in self._all():
            await sub.close(err)


def _moving(cfg: TopicConfig, partition: int) -> NotOwnerError:
    return NotOwnerError(
        f"partition {short_topic(cfg.name)}/{partition} was taken over again: subscribe again",
        topic=cfg.name,
        partition=partition,
    )

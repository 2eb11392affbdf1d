"""Every durable subscription of a broker: loaded at start, created on first subscribe or
by admin, deleted by admin or by their last consumer; retention and backlog quotas ask
it what to keep. The topics' consumers (committed offsets) are subscriptions here too:
Failover ones whose cursors are their committed offsets (`consumer_cursor`)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable, Sequence

from weir.broker.consumers import OffsetStore
from weir.broker.partition_actor import PartitionActor
from weir.broker.subscriptions.consumer import AttachedConsumer, ConsumerHandle
from weir.broker.subscriptions.consumer_cursor import ConsumerCursor
from weir.broker.subscriptions.cursor import (
    SUBSCRIPTIONS,
    StoredCursor,
    cursor_key,
    decode_counts,
    decode_cursor,
    parse_cursor_key,
)
from weir.broker.subscriptions.dead_letter import DeadLetterPolicy
from weir.broker.subscriptions.key_shared import check_hash_ranges
from weir.broker.subscriptions.settings import (
    InitialPosition,
    SubscriptionMeta,
    SubscriptionType,
    check_subscription_name,
    meta_key,
    parse_meta_key,
)
from weir.broker.subscriptions.state import DeadLetterSink
from weir.broker.subscriptions.subscription import Subscription
from weir.broker.topics import ConsumerConfig, TopicConfig, short_topic
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConsumerBusyError,
    UnknownSubscriptionError,
    WeirError,
)
from weir.storage.committer import GroupCommitter
from weir.storage.kv import KV, Op, delete, put

_consumer_ids = itertools.count(1)


class Subscriptions:
    def __init__(
        self,
        kv: KV,
        committer: GroupCommitter,
        actor_of: Callable[[str, int], PartitionActor],
        dead_letter_sink: DeadLetterSink | None = None,
        offsets: OffsetStore | None = None,
        on_consumer_commit: Callable[[str, int, str, int], None] | None = None,
    ) -> None:
        self._dead_letter_sink = dead_letter_sink
        self._on_consumer_commit = on_consumer_commit  # (topic, partition, consumer, offset)
        self._offsets = offsets
        self._kv = kv
        self._committer = committer
        self._actor_of = actor_of
        self._subs: dict[str, dict[str, Subscription]] = {}  # topic -> name -> subscription
        # topic -> consumer -> its committed offsets as a Failover subscription (made on use)
        self._consumer_subs: dict[str, dict[str, Subscription]] = {}
        self._lock = asyncio.Lock()

    def _make(self, cfg: TopicConfig, meta: SubscriptionMeta) -> Subscription:
        name = cfg.name
        return Subscription(
            name,
            cfg.topic_id,
            meta,
            lambda p: self._actor_of(name, p),
            lambda p, mark: StoredCursor(
                self._committer, cursor_key(cfg.topic_id, p, meta.name), mark
            ),
            self._dead_letter_sink,
        )

    def load(self, topics: Iterable[TopicConfig]) -> None:
        """Read every stored subscription (call once the topics' partitions are open)."""
        by_id = {cfg.topic_id: cfg for cfg in topics}
        cursors: dict[tuple[int, str], dict[int, StoredCursor]] = {}
        counts: dict[bytes, dict[int, int]] = {}  # cursor key -> redelivery counts
        for k, v in self._kv.scan(SUBSCRIPTIONS):
            key = bytes(k)
            if key[:1] == b"m":
                tid, _ = parse_meta_key(key)
                cfg = by_id.get(tid)
                if cfg is not None:
                    meta = SubscriptionMeta.from_json(v)
                    self._subs.setdefault(cfg.name, {})[meta.name] = self._make(cfg, meta)
            elif key[:1] == b"c":
                tid, part, name = parse_cursor_key(key)
                mark, acked = decode_cursor(v)
                cursors.setdefault((tid, name), {})[part] = StoredCursor(
                    self._committer, key, mark, acked
                )
            elif key[:1] == b"r":
                counts[b"c" + key[1:]] = decode_counts(v)
        for by_part in cursors.values():
            for stored_cur in by_part.values():
                found = counts.get(stored_cur.key)
                if found is not None:
                    stored_cur.load_counts(found)
        for tname, name, sub in self._all():
            stored = cursors.get((sub.topic_id, name), {})
            for p in range(by_id[sub.topic_id].partitions):
                cur = stored.get(p)
                if cur is None:
                    cur = StoredCursor(
                        self._committer,
                        cursor_key(sub.topic_id, p, name),
                        self._actor_of(tname, p).start_offset,
                    )
                sub.add_partition(p, cur, fresh=False)

    def _consumer_sub(self, cfg: TopicConfig, consumer: ConsumerConfig) -> Subscription:
        """Consumer ``consumer`` of the topic as a Failover subscription whose cursors are
        its committed offsets (see `consumer_cursor`)."""
        assert self._offsets is not None
        offsets = self._offsets
        tname, name = cfg.name, consumer.name
        meta = SubscriptionMeta(
            name, SubscriptionType.FAILOVER, InitialPosition.EARLIEST, consumer.created_at_ms
        )

        def cursor(p: int, _mark: int = 0) -> ConsumerCursor:
            told = self._on_consumer_commit
            return ConsumerCursor(
                offsets,
                cfg.topic_id,
                p,
                name,
                lambda: self._actor_of(tname, p).start_offset,
                None if told is None else lambda offset: told(tname, p, name, offset),
            )

        sub = Subscription(tname, cfg.topic_id, meta, lambda p: self._actor_of(tname, p), cursor)
        sub.consumer_backed = True
        for p in range(cfg.partitions):
            sub.add_partition(p, cursor(p), fresh=False)
        return sub

    def consumer_subscriptions(self, cfg: TopicConfig) -> dict[str, Subscription]:
        """The topic's consumers as subscriptions (made on first use; one whose consumer
        was removed is closed and forgotten)."""
        if self._offsets is None:
            return {}
        subs = self._consumer_subs.get(cfg.name)
        if subs is None:
            if not cfg.consumers:
                return {}
            subs = self._consumer_subs[cfg.name] = {}
        for name in [n for n in subs if n not in cfg.consumers]:
            gone = subs.pop(name)
            gone.close_soon(UnknownSubscriptionError(f"consumer {name!r} was removed"))
        for name, consumer in cfg.consumers.items():
            sub = subs.get(name)
            if sub is None:
                subs[name] = self._consumer_sub(cfg, consumer)
            elif len(sub.parts) != cfg.partitions:
                sub.ensure_partitions(cfg.partitions)
        return subs

    def consumer_subscribers(self, cfg: TopicConfig, name: str) -> int:
        """How many subscription consumers are attached to consumer ``name``'s committed
        offsets (0 when none, or when ``name`` has a subscription of its own)."""
        if not self.is_consumer(cfg, name):
            return 0
        sub = self._consumer_subs.get(cfg.name, {}).get(name)
        return 0 if sub is None else len(sub.consumers)

    def is_consumer(self, cfg: TopicConfig, name: str) -> bool:
        """Whether ``name`` is served by the consumer's committed offsets (no subscription
        of its own has that name)."""
        return name in cfg.consumers and name not in self._subs.get(cfg.name, {})

    def get(self, cfg: TopicConfig, name: str) -> Subscription:
        sub = self._subs.get(cfg.name, {}).get(name)
        if sub is None and name in cfg.consumers:
            sub = self.consumer_subscriptions(cfg).get(name)
        if sub is None:
            raise UnknownSubscriptionError(
                f"subscription {name!r} does not exist on topic {short_topic(cfg.name)!r}"
            )
        return sub

    def of_topic(self, cfg: TopicConfig) -> list[Subscription]:
        subs = self._subs.get(cfg.name)
        return [subs[n] for n in sorted(subs)] if subs else []

    def listed(self, cfg: TopicConfig) -> list[Subscription]:
        """Every subscription of the topic, its consumers' committed offsets included."""
        both = self.of_topic(cfg) + list(self.consumer_subscriptions(cfg).values())
        return sorted(both, key=lambda s: (s.name, s.consumer_backed))

    def _all(self) -> list[tuple[str, str, Subscription]]:
        return [(t, n, s) for t, subs in self._subs.items() for n, s in subs.items()]

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
        """Create a subscription; its cursors start at ``initial_position`` (with
        ``initial_time_ms``: at the first message written at or after that time)."""
        check_subscription_name(name)
        if initial_time_ms is not None:
            initial_position = InitialPosition.TIMESTAMP
        elif initial_position is InitialPosition.TIMESTAMP:
            raise BadRequestError("an initial position by timestamp needs the time")
        async with self._lock:
            existing = self._subs.get(cfg.name, {}).get(name)
            if existing is None and name in cfg.consumers:
                existing = self.consumer_subscriptions(cfg)[name]
                if not exist_ok:
                    raise AlreadyExistsError(
                        f"{name!r} is a consumer of topic {short_topic(cfg.name)!r}: its "
                        "committed offsets are already a subscription of that name"
                    )
            if existing is not None:
                if exist_ok:
                    return existing
                raise AlreadyExistsError(
                    f"subscription {name!r} already exists on topic {short_topic(cfg.name)!r}"
                )
            meta = SubscriptionMeta(name, type, initial_position, int(time.time() * 1000))
            sub = self._make(cfg, meta)
            ops: list[Op] = [put(SUBSCRIPTIONS, meta_key(cfg.topic_id, name), meta.to_json())]
            cursors = []
            for p in range(cfg.partitions):
                actor = self._actor_of(cfg.name, p)
                if initial_time_ms is not None:
                    mark = actor.log.offset_for_time(initial_time_ms)
                elif initial_position is InitialPosition.EARLIEST:
                    mark = actor.start_offset
                else:
                    mark = actor.end_offset
                cur = StoredCursor(self._committer, cursor_key(cfg.topic_id, p, name), mark)
                ops.append(cur.snapshot_op())
                cursors.append(cur)
            await asyncio.wrap_future(self._committer.submit(ops))
            for p, cur in enumerate(cursors):
                sub.add_partition(p, cur, fresh=True)
            self._subs.setdefault(cfg.name, {})[name] = sub
            return sub

    async def subscribe(
        self,
        cfg: TopicConfig,
        name: str,
        type: SubscriptionType,
        initial_position: InitialPosition,
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
        check_readers: Callable[[], None] | None = None,
    ) -> tuple[Subscription, AttachedConsumer]:
        """Attach a consumer (creating the subscription when missing and ``create``);
        ``hash_ranges``: the sticky Key_Shared slots it claims (see `key_shared`); with
        ``partitions``, of those partitions only. ``check_readers`` raises when other
        readers hold a consumer's committed offsets (called with no await before the
        attach)."""
        ranges = None
        if hash_ranges is not None:
            if type is not SubscriptionType.KEY_SHARED:
                raise BadRequestError(
                    f"sticky hash ranges are for key_shared subscriptions, not {type.value}"
                )
            ranges = check_hash_ranges(hash_ranges)
        if create:
            sub = await self.create(
                cfg, name, type, initial_position, exist_ok=True, initial_time_ms=initial_time_ms
            )
        else:
            sub = self.get(cfg, name)
        cid = next(_consumer_ids)
        c = AttachedConsumer(
            cid, consumer_name or f"consumer-{cid}", handle, ack_timeout_ms, 0, 0, ("", cid)
        )
        c.order = (c.name, cid)
        c.partitions = partitions
        c.whole_batches = whole_batches
        c.hash_ranges = ranges
        if sub.consumer_backed:
            if type not in (SubscriptionType.FAILOVER, SubscriptionType.EXCLUSIVE):
                raise BadRequestError(
                    f"subscription {name!r} is the committed offsets of consumer {name!r}: "
                    f"failover or exclusive only, not {type.value}"
                )
            if dead_letter is not None:
                raise BadRequestError(
                    f"subscription {name!r} is the committed offsets of consumer {name!r}: "
                    "it has no dead-letter policy"
                )
            if check_readers is not None:
                check_readers()
            sub.attach(c, type)
            return sub, c
        changed = sub.attach(c, type)  # True: it had no consumers, the type follows
        if dead_letter is not None and (
            dead_letter.max_redeliver_count,
            dead_letter.topic,
        ) != (sub.meta.max_redeliver_count, sub.meta.dead_letter_topic):
            sub.meta = dataclasses.replace(
                sub.meta,
                max_redeliver_count=dead_letter.max_redeliver_count,
                dead_letter_topic=dead_letter.topic,
            )
            changed = True
        if changed:
            await self._store_meta(cfg, sub)
        return sub, c

    async def _store_meta(self, cfg: TopicConfig, sub: Subscription) -> None:
        """Store a subscription's changed metadata (its type, its dead-letter policy)."""
        op = put(SUBSCRIPTIONS, meta_key(cfg.topic_id, sub.name), sub.meta.to_json())
        await asyncio.wrap_future(self._committer.submit([op]))

    async def _drop_stored(self, sub: Subscription) -> None:
        """Remove a deleted subscription's metadata and cursors from storage."""
        await asyncio.wrap_future(self._committer.submit(self._drop_ops(sub)))

    async def delete(self, cfg: TopicConfig, name: str, *, force: bool = False) -> None:
        """Delete a subscription; refused while consumers are attached unless ``force``."""
        async with self._lock:
            sub = self.get(cfg, name)
            if sub.consumers and not force:
                raise ConsumerBusyError(
                    f"subscription {name!r} has {len(sub.consumers)} consumer(s) attached; "
                    "close them first, or delete with force"
                )
            await self._drop_stored(sub)
            self._forget(cfg.name, name)
        await sub.close(UnknownSubscriptionError(f"subscription {name!r} was deleted"))

    def _drop_ops(self, sub: Subscription) -> list[Op]:
        ops = [delete(SUBSCRIPTIONS, meta_key(sub.topic_id, sub.name))]
        for st in sub.parts.values():
            ops.extend(st.cursor.drop_ops())
        return ops

    def drop_topic_ops(self, cfg: TopicConfig) -> list[Op]:
        return [op for s in self.of_topic(cfg) for op in self._drop_ops(s)]

    async def forget_topic(self, cfg: TopicConfig) -> None:
        for sub in self._consumer_subs.pop(cfg.name, {}).values():
            await sub.close(
                UnknownSubscriptionError(f"topic {short_topic(cfg.name)!r} was dropped")
            )
        for sub in self.of_topic(cfg):
            self._forget(cfg.name, sub.name)
            await sub.close(
                UnknownSubscriptionError(f"topic {short_topic(cfg.name)!r} was dropped")
            )

    def on_partitions(self, cfg: TopicConfig) -> None:
        """The topic grew: the new partitions' cursors start at their beginning."""
        for sub in self.of_topic(cfg):
            sub.ensure_partitions(cfg.partitions)
        self.consumer_subscriptions(cfg)

    def _forget(self, topic: str, name: str) -> None:
        subs = self._subs[topic]
        del subs[name]
        if not subs:
            del self._subs[topic]

    def _holding(self, cfg: TopicConfig) -> list[Subscription]:
        """The subscriptions that hold data back: every one of its own, and the consumers
        marked important (the PQ "important consumer")."""
        own = list(self._subs.get(cfg.name, {}).values())
        if any(c.important for c in cfg.consumers.values()):
            subs = self.consumer_subscriptions(cfg)
            own += [subs[c.name] for c in cfg.consumers.values() if c.important]
        return own

    def protect_from(self, cfg: TopicConfig, partition: int) -> int | None:
        """The lowest offset of ``partition`` that a subscription of the topic or an
        important consumer has not acknowledged (None: nobody holds anything back)."""
        marks = [m for s in self._holding(cfg) if (m := s.min_unacked(partition)) is not None]
        return min(marks) if marks else None

    def evict(self, cfg: TopicConfig, partition: int, offset: int) -> int:
        """Move every cursor of ``partition`` below ``offset`` up to it (the backlog quota's
        consumer_backlog_eviction: the oldest messages are dropped for the slowest
        subscriptions); returns how many cursors moved. Stored in the next group commit."""
        return sum(s.evict(partition, offset) for s in self._holding(cfg))

    async def forget_consumer(self, cfg: TopicConfig, name: str) -> None:
        """The consumer was removed: its subscription closes."""
        sub = self._consumer_subs.get(cfg.name, {}).pop(name, None)
        if sub is not None:
            await sub.close(UnknownSubscriptionError(f"consumer {name!r} was removed"))

    async def close(self) -> None:
        err: WeirError | None = None
        for _, _, sub in self._all():
            await sub.close(err)
        for subs in self._consumer_subs.values():
            for sub in subs.values():
                await sub.close(err)

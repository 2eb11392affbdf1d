"""Every durable subscription of a broker: loaded at start, created on first subscribe or
by admin, deleted by admin or by their last consumer; retention asks it what to keep."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable, Sequence

from weir.broker.partition_actor import PartitionActor
from weir.broker.subscriptions.consumer import AttachedConsumer, ConsumerHandle
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
from weir.broker.topics import TopicConfig, short_topic
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
    ) -> None:
        self._dead_letter_sink = dead_letter_sink
        self._kv = kv
        self._committer = committer
        self._actor_of = actor_of
        self._subs: dict[str, dict[str, Subscription]] = {}  # topic -> name -> subscription
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

    def get(self, cfg: TopicConfig, name: str) -> Subscription:
        sub = self._subs.get(cfg.name, {}).get(name)
        if sub is None:
            raise UnknownSubscriptionError(
                f"subscription {name!r} does not exist on topic {short_topic(cfg.name)!r}"
            )
        return sub

    def of_topic(self, cfg: TopicConfig) -> list[Subscription]:
        subs = self._subs.get(cfg.name)
        return [subs[n] for n in sorted(subs)] if subs else []

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
    ) -> tuple[Subscription, AttachedConsumer]:
        """Attach a consumer (creating the subscription when missing and ``create``);
        ``hash_ranges``: the sticky Key_Shared slots it claims (see `key_shared`)."""
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
        c.hash_ranges = ranges
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
            op = put(SUBSCRIPTIONS, meta_key(cfg.topic_id, name), sub.meta.to_json())
            await asyncio.wrap_future(self._committer.submit([op]))
        return sub, c

    async def delete(self, cfg: TopicConfig, name: str, *, force: bool = False) -> None:
        """Delete a subscription; refused while consumers are attached unless ``force``."""
        async with self._lock:
            sub = self.get(cfg, name)
            if sub.consumers and not force:
                raise ConsumerBusyError(
                    f"subscription {name!r} has {len(sub.consumers)} consumer(s) attached; "
                    "close them first, or delete with force"
                )
            await asyncio.wrap_future(self._committer.submit(self._drop_ops(sub)))
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
        for sub in self.of_topic(cfg):
            self._forget(cfg.name, sub.name)
            await sub.close(
                UnknownSubscriptionError(f"topic {short_topic(cfg.name)!r} was dropped")
            )

    def on_partitions(self, cfg: TopicConfig) -> None:
        """The topic grew: the new partitions' cursors start at their beginning."""
        for sub in self.of_topic(cfg):
            sub.ensure_partitions(cfg.partitions)

    def _forget(self, topic: str, name: str) -> None:
        subs = self._subs[topic]
        del subs[name]
        if not subs:
            del self._subs[topic]

    def protect_from(self, cfg: TopicConfig, partition: int) -> int | None:
        """The lowest offset a subscription of the topic has not acknowledged on ``partition``."""
        subs = self._subs.get(cfg.name)
        if not subs:
            return None
        marks = [m for s in subs.values() if (m := s.min_unacked(partition)) is not None]
        return min(marks) if marks else None

    def evict(self, cfg: TopicConfig, partition: int, offset: int) -> int:
        """Move every cursor of ``partition`` below ``offset`` up to it (the backlog quota's
        consumer_backlog_eviction: the oldest messages are dropped for the slowest
        subscriptions); returns how many cursors moved. Stored in the next group commit."""
        return sum(s.evict(partition, offset) for s in self._subs.get(cfg.name, {}).values())

    async def close(self) -> None:
        err: WeirError | None = None
        for _, _, sub in self._all():
            await sub.close(err)

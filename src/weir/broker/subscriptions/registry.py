"""Every durable subscription of a broker: loaded at start, created on first subscribe or
by admin, deleted by admin or by their last consumer; retention asks it what to keep."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable

from weir.broker.partition_actor import PartitionActor
from weir.broker.subscriptions.consumer import AttachedConsumer, ConsumerHandle
from weir.broker.subscriptions.cursor import (
    SUBSCRIPTIONS,
    StoredCursor,
    cursor_key,
    decode_cursor,
    parse_cursor_key,
)
from weir.broker.subscriptions.dead_letter import DeadLetterPolicy
from weir.broker.subscriptions.settings import (
    InitialPosition,
    SubscriptionMeta,
    SubscriptionType,
    check_subscription_name,
    meta_key,
    parse_meta_key,
)
from weir.broker.subscriptions.subscription import DeadLetterSink, Subscription
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
        self._subs: dict[tuple[str, str], Subscription] = {}
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
        for k, v in self._kv.scan(SUBSCRIPTIONS):
            key = bytes(k)
            if key[:1] == b"m":
                tid, _ = parse_meta_key(key)
                cfg = by_id.get(tid)
                if cfg is not None:
                    meta = SubscriptionMeta.from_json(v)
                    self._subs[(cfg.name, meta.name)] = self._make(cfg, meta)
            elif key[:1] == b"c":
                tid, part, name = parse_cursor_key(key)
                mark, acked = decode_cursor(v)
                cursors.setdefault((tid, name), {})[part] = StoredCursor(
                    self._committer, key, mark, acked
                )
        for (tname, name), sub in self._subs.items():
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
        sub = self._subs.get((cfg.name, name))
        if sub is None:
            raise UnknownSubscriptionError(
                f"subscription {name!r} does not exist on topic {short_topic(cfg.name)!r}"
            )
        return sub

    def of_topic(self, cfg: TopicConfig) -> list[Subscription]:
        return [s for (t, _), s in sorted(self._subs.items()) if t == cfg.name]

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
            existing = self._subs.get((cfg.name, name))
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
            self._subs[(cfg.name, name)] = sub
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
        partitions: frozenset[int] | None = None,
        whole_batches: bool = False,
    ) -> tuple[Subscription, AttachedConsumer]:
        """Attach a consumer (creating the subscription when missing and ``create``); with
        ``partitions``, of those partitions only."""
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
            del self._subs[(cfg.name, name)]
        await sub.close(UnknownSubscriptionError(f"subscription {name!r} was deleted"))

    def _drop_ops(self, sub: Subscription) -> list[Op]:
        ops = [delete(SUBSCRIPTIONS, meta_key(sub.topic_id, sub.name))]
        ops.extend(delete(SUBSCRIPTIONS, st.cursor.key) for st in sub.parts.values())
        return ops

    def drop_topic_ops(self, cfg: TopicConfig) -> list[Op]:
        return [op for s in self.of_topic(cfg) for op in self._drop_ops(s)]

    async def forget_topic(self, cfg: TopicConfig) -> None:
        for sub in self.of_topic(cfg):
            del self._subs[(cfg.name, sub.name)]
            await sub.close(
                UnknownSubscriptionError(f"topic {short_topic(cfg.name)!r} was dropped")
            )

    def on_partitions(self, cfg: TopicConfig) -> None:
        """The topic grew: the new partitions' cursors start at their beginning."""
        for sub in self.of_topic(cfg):
            sub.ensure_partitions(cfg.partitions)

    def protect_from(self, cfg: TopicConfig, partition: int) -> int | None:
        """The lowest offset a subscription of the topic has not acknowledged on ``partition``."""
        marks = [m for s in self.of_topic(cfg) if (m := s.min_unacked(partition)) is not None]
        return min(marks) if marks else None

    async def close(self) -> None:
        err: WeirError | None = None
        for sub in list(self._subs.values()):
            await sub.close(err)

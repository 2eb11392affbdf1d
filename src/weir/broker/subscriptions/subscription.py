"""One durable subscription of one topic: a cursor per partition, the consumers attached
to it, and what has been delivered to whom.

Per partition a pump task hands the next messages to the consumer the dispatcher
picks, within that consumer's permits. Messages delivered and not yet acknowledged
are *pending* (with the consumer that holds them); a negative ack, an ack timeout or
the consumer leaving moves them to *redeliver*, which the pump serves first, each
with its redelivery count raised. The cursor alone decides what is acknowledged;
pending and redelivery state live in memory (after a restart every unacknowledged
message is delivered again, as in Pulsar).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from weir.broker.partition_actor import PartitionActor
from weir.broker.subscriptions.consumer import AttachedConsumer, Delivery
from weir.broker.subscriptions.cursor import StoredCursor
from weir.broker.subscriptions.dead_letter import (
    ORIGIN_PARTITION,
    ORIGIN_SUBSCRIPTION,
    ORIGIN_TOPIC,
    DeadLetterPolicy,
    dead_letter_batches,
)
from weir.broker.subscriptions.delayed import deliver_times
from weir.broker.subscriptions.dispatcher import Dispatcher
from weir.broker.subscriptions.key_shared import (
    HASH_MASK,
    MAX_HELD,
    KeySharedDispatcher,
    batch_keys,
    message_keys,
)
from weir.broker.subscriptions.settings import SubscriptionMeta, SubscriptionType
from weir.broker.subscriptions.shared import SharedDispatcher
from weir.broker.subscriptions.single_active import SingleActiveDispatcher
from weir.errors import (
    BadRequestError,
    ConsumerBusyError,
    UnavailableError,
    UnknownPartitionError,
    WeirError,
)

log = logging.getLogger("weir.subscriptions")

MAX_READ_BYTES = 1 << 20
DeadLetterSink = Callable[[str, list[bytes]], Awaitable[None]]  # (topic, batches)
MAX_DELAY_MS = 7 * 24 * 3600 * 1000


def make_dispatcher(type: SubscriptionType, name: str) -> Dispatcher:
    if type is SubscriptionType.SHARED:
        return SharedDispatcher(name)
    if type is SubscriptionType.KEY_SHARED:
        return KeySharedDispatcher(name)
    return SingleActiveDispatcher(type, name)


@dataclass(eq=False, slots=True)
class PartitionState:
    cursor: StoredCursor
    read_pos: int  # next offset never dispatched since the subscription was loaded
    dispatched_high: int  # offsets below may have been delivered: they can be acked
    pending: dict[int, tuple[int, int]] = field(
        default_factory=dict
    )  # offset -> (consumer, delivery)
    redeliver: set[int] = field(default_factory=set)
    counts: dict[int, int] = field(default_factory=dict)  # redelivery counts
    # Key_Shared: key hashes of messages read and not acknowledged, and the ones read but
    # held back (their key waits for another consumer, or its consumer has no permits)
    keys: dict[int, int] = field(default_factory=dict)
    held: set[int] = field(default_factory=set)
    partition: int = -1
    dead: set[int] = field(default_factory=set)  # on their way to the dead-letter topic
    burying: asyncio.Task[None] | None = None
    delayed: list[tuple[int, int]] = field(default_factory=list)  # heap of (deliver-at, offset)
    delay_timer: asyncio.TimerHandle | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionPartitionInfo:
    partition: int
    mark_delete: int  # every offset below is acknowledged
    acked_ranges: int  # ranges acknowledged above mark_delete
    backlog: int  # messages not acknowledged
    unacked: int  # delivered and not acknowledged
    active_consumer: str  # Exclusive / Failover: who gets this partition now


@dataclass(frozen=True, slots=True)
class SubscriptionConsumerInfo:
    consumer_id: int
    name: str
    permits: int
    unacked: int


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    topic: str
    name: str
    type: SubscriptionType
    initial_position: str
    created_at_ms: int
    partitions: list[SubscriptionPartitionInfo]
    consumers: list[SubscriptionConsumerInfo]
    max_redeliver_count: int = 0
    dead_letter_topic: str = ""

    @property
    def backlog(self) -> int:
        return sum(p.backlog for p in self.partitions)

    @property
    def unacked(self) -> int:
        return sum(p.unacked for p in self.partitions)


class Subscription:
    def __init__(
        self,
        topic: str,
        topic_id: int,
        meta: SubscriptionMeta,
        actor_of: Callable[[int], PartitionActor],
        new_cursor: Callable[[int, int], StoredCursor],
        dead_letter_sink: DeadLetterSink | None = None,
    ) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.meta = meta
        self.dispatcher = make_dispatcher(meta.type, meta.name)
        self._actor_of = actor_of
        self._new_cursor = new_cursor
        self._dead_letter_sink = dead_letter_sink
        self.parts: dict[int, PartitionState] = {}
        self.consumers: dict[int, AttachedConsumer] = {}
        self._delivery_seq = 0
        self._closed = False

    @property
    def name(self) -> str:
        return self.meta.name

    # ----------------------------------------------------------------- partitions

    def add_partition(self, partition: int, cursor: StoredCursor, fresh: bool) -> None:
        """Track ``partition``. A fresh cursor has delivered nothing; a loaded one may have
        delivered anything written before the restart, so acks of those are accepted."""
        actor = self._actor_of(partition)
        high = cursor.mark_delete if fresh else max(cursor.mark_delete, actor.end_offset)
        st = PartitionState(cursor, cursor.mark_delete, high, partition=partition)
        self.parts[partition] = st
        if self.consumers:
            self._start_pump(partition, st)

    def ensure_partitions(self, count: int) -> None:
        for p in range(count):
            if p not in self.parts:
                self.add_partition(p, self._new_cursor(p, self._actor_of(p).start_offset), True)

    def min_unacked(self, partition: int) -> int | None:
        st = self.parts.get(partition)
        return None if st is None else st.cursor.mark_delete

    # ----------------------------------------------------------------- consumers

    def attach(self, c: AttachedConsumer, type: SubscriptionType) -> bool:
        """Attach ``c``; True when the subscription's type changed (it had no consumers)."""
        changed = type is not self.meta.type
        if changed:
            if self.consumers:
                raise ConsumerBusyError(
                    f"subscription {self.name!r} is {self.meta.type.value} with "
                    f"{len(self.consumers)} consumer(s); cannot attach a {type.value} consumer"
                )
            self.dispatcher = make_dispatcher(type, self.name)
            self.meta = dataclasses.replace(self.meta, type=type)
        self.dispatcher.check_join(list(self.consumers.values()), c)
        before = self._owners()
        self.consumers[c.consumer_id] = c
        self._handover(before)
        if self.meta.type in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
            for p, owner in self._owners().items():
                if c.takes(p) and owner is not c:
                    _tell(c, p, False)  # a standby hears so at once, as in Pulsar
        for p, st in self.parts.items():
            self._start_pump(p, st)
        self._wake_all()
        return changed

    def detach(self, consumer_id: int) -> None:
        """A consumer left: what it held goes to the others (redelivered)."""
        if consumer_id not in self.consumers:
            return
        before = self._owners()
        del self.consumers[consumer_id]
        for st in self.parts.values():
            self._take_back(st, lambda cid: cid == consumer_id)
        self._handover(before)
        self._wake_all()

    def flow(self, consumer_id: int, permits: int) -> None:
        if permits < 0:
            raise BadRequestError(f"permits must be >= 0, got {permits}")
        c = self.consumers.get(consumer_id)
        if c is not None and permits:
            c.permits += permits
            self._wake_all()

    def _consumers_of(self, partition: int) -> list[AttachedConsumer]:
        """The consumers that take ``partition`` (all of them, unless some take only some)."""
        return [c for c in self.consumers.values() if c.takes(partition)]

    def _owners(self) -> dict[int, AttachedConsumer | None]:
        return {p: self.dispatcher.owner(p, self._consumers_of(p)) for p in self.parts}

    def _handover(self, before: dict[int, AttachedConsumer | None]) -> None:
        """A partition that changed hands: its old owner's unacked messages go to the new one;
        both are told (a handle with ``active_changed``, see `ActivityHandle`)."""
        after = self._owners()
        for p, old in before.items():
            new = after.get(p)
            if new is old:
                continue
            if old is not None and old.consumer_id in self.consumers:
                self._take_back(self.parts[p], lambda cid, o=old.consumer_id: cid == o)  # type: ignore[misc]
                _tell(old, p, False)
            if new is not None:
                _tell(new, p, True)

    def _take_back(self, st: PartitionState, whose: Callable[[int], bool]) -> None:
        for o in [o for o, (cid, _) in st.pending.items() if whose(cid)]:
            cid, _ = st.pending.pop(o)
            holder = self.consumers.get(cid)
            if holder is not None:
                holder.unacked -= 1
            self._to_redeliver(st, o)

    def _to_redeliver(self, st: PartitionState, offset: int) -> None:
        n = st.counts[offset] = st.counts.get(offset, 0) + 1
        limit = self.meta.max_redeliver_count
        if limit and n > limit and self._dead_letter_sink is not None:
            st.dead.add(offset)
            if st.burying is None and not self._closed:
                st.burying = asyncio.get_running_loop().create_task(self._bury(st))
            return
        st.redeliver.add(offset)
        st.wake.set()

    async def _bury(self, st: PartitionState) -> None:
        """Copy dead letters to the dead-letter topic, then acknowledge them here."""
        assert self._dead_letter_sink is not None
        actor = self._actor_of(st.partition)
        short = self.topic.rsplit("/", 1)[-1]
        policy = DeadLetterPolicy(self.meta.max_redeliver_count, self.meta.dead_letter_topic)
        origin = {
            ORIGIN_TOPIC: short,
            ORIGIN_PARTITION: str(st.partition),
            ORIGIN_SUBSCRIPTION: self.name,
        }
        backoff = 0.05
        try:
            while st.dead and not self._closed:
                offsets = sorted(st.dead)[:500]
                res = await actor.read_async(offsets[0], 1 << 62, offsets[-1] + 1)
                batches = dead_letter_batches(res.chunks, set(offsets), origin)
                try:
                    if batches:
                        await self._dead_letter_sink(policy.topic_for(short, self.name), batches)
                except WeirError as err:
                    log.warning("dead-letter write failed, retrying: %s", err.message)
                    await asyncio.sleep(backoff)
                    backoff = min(5.0, backoff * 2)
                    continue
                st.dead.difference_update(offsets)
                for o in offsets:
                    st.cursor.ack_range(o, o + 1)
                    self._settle(st, o)
                await _all([st.cursor.persist()])
        finally:
            st.burying = None

    def _wake_all(self) -> None:
        for st in self.parts.values():
            st.wake.set()

    # ----------------------------------------------------------------- acks

    def _state(self, partition: int) -> PartitionState:
        st = self.parts.get(partition)
        if st is None:
            raise UnknownPartitionError(
                f"subscription {self.name!r} has partitions 0..{len(self.parts) - 1}, not {partition}"
            )
        return st

    def _check_delivered(self, ranges: Iterable[tuple[int, int, int]]) -> None:
        for p, start, end in ranges:
            st = self._state(p)
            if start < 0 or end <= start:
                raise BadRequestError(
                    f"offsets {start}..{end - 1} of partition {p} are not a range of messages"
                )
            last = end - 1
            if last >= st.dispatched_high and st.cursor.next_unacked(start) < end:
                raise BadRequestError(
                    f"offset {max(start, st.dispatched_high)} of partition {p} was never "
                    f"delivered on subscription {self.name!r}: nothing acknowledged"
                )

    def _settle(self, st: PartitionState, o: int) -> None:
        held = st.pending.pop(o, None)
        if held is not None:
            c = self.consumers.get(held[0])
            if c is not None:
                c.unacked -= 1
        st.redeliver.discard(o)
        st.counts.pop(o, None)
        if st.dead:
            st.dead.discard(o)
        if st.keys:
            st.keys.pop(o, None)
            if st.held:
                st.held.discard(o)
                st.wake.set()  # held keys may go now

    def _settle_range(self, st: PartitionState, start: int, end: int) -> None:
        """Forget what is pending or due again in ``[start, end)``: it is acknowledged."""
        offsets: Iterable[int]
        if end - start <= len(st.pending) + len(st.redeliver):
            offsets = range(start, end)
        else:  # a wide range (a cumulative ack): walk what is held instead
            offsets = [o for o in st.pending if start <= o < end]
            offsets += [o for o in st.redeliver if start <= o < end]
        if st.pending:
            held = [h for h in map(st.pending.pop, offsets, repeat(None)) if h is not None]
            for cid, n in Counter(h[0] for h in held).items():
                c = self.consumers.get(cid)
                if c is not None:
                    c.unacked -= n
        if st.redeliver:
            st.redeliver.difference_update(offsets)
        if st.counts:
            for o in offsets:
                st.counts.pop(o, None)
        if st.keys:
            for o in offsets:
                st.keys.pop(o, None)
            if st.held:
                st.held.difference_update(offsets)
                st.wake.set()  # held keys may go now

    async def acknowledge(self, ranges: list[tuple[int, int, int]]) -> None:
        """Acknowledge ``(partition, start, end)`` offset ranges; returns once durable.
        All or nothing: one offset never delivered refuses the whole call."""
        self._check_delivered(ranges)
        touched: dict[int, PartitionState] = {}
        for p, start, end in ranges:
            st = touched[p] = self.parts[p]
            st.cursor.ack_range(start, end)
            self._settle_range(st, start, end)
        await _all([st.cursor.persist() for st in touched.values()])

    async def acknowledge_cumulative(self, partition: int, offset: int) -> None:
        """Acknowledge every message of ``partition`` up to and including ``offset``."""
        if not self.dispatcher.allows_cumulative:
            raise BadRequestError(
                f"subscription {self.name!r} is {self.meta.type.value}: cumulative acknowledgement "
                "is not allowed there (messages interleave over consumers); acknowledge each message"
            )
        self._check_delivered([(partition, offset, offset + 1)])
        st = self.parts[partition]
        st.cursor.ack_cumulative(offset)
        self._settle_range(st, 0, offset + 1)
        await _all([st.cursor.persist()])

    def negative_acknowledge(self, ranges: list[tuple[int, int, int]], delay_ms: int) -> None:
        """Deliver the messages of these ``(partition, start, end)`` ranges again after
        ``delay_ms`` (to any consumer that may have them)."""
        if delay_ms < 0 or delay_ms > MAX_DELAY_MS:
            raise BadRequestError(
                f"a negative acknowledgement's delay is 0..{MAX_DELAY_MS} ms, got {delay_ms}"
            )
        self._check_delivered(ranges)
        for p, start, end in ranges:
            st = self.parts[p]
            due = []
            for o in range(start, end):
                held = st.pending.pop(o, None)
                if held is None:
                    continue  # acked already, or already on its way again
                c = self.consumers.get(held[0])
                if c is not None:
                    c.unacked -= 1
                due.append(o)
            if not due:
                continue
            if delay_ms == 0:
                for o in due:
                    self._to_redeliver(st, o)
            else:
                asyncio.get_running_loop().call_later(
                    delay_ms / 1000, self._redeliver_later, st, due
                )

    def _redeliver_later(self, st: PartitionState, offsets: list[int]) -> None:
        if self._closed:
            return
        for o in offsets:
            if not st.cursor.is_acked(o) and o not in st.pending and o not in st.redeliver:
                self._to_redeliver(st, o)

    def _timed_out(
        self, st: PartitionState, consumer_id: int, seq: int, offsets: list[int]
    ) -> None:
        if self._closed:
            return
        c = self.consumers.get(consumer_id)
        for o in offsets:
            if st.pending.get(o) == (consumer_id, seq):
                del st.pending[o]
                if c is not None:
                    c.unacked -= 1
                self._to_redeliver(st, o)

    # ----------------------------------------------------------------- dispatch

    def _start_pump(self, partition: int, st: PartitionState) -> None:
        if st.task is None and not self._closed:
            st.task = asyncio.get_running_loop().create_task(self._pump(partition, st))

    async def _pump(self, partition: int, st: PartitionState) -> None:
        actor = self._actor_of(partition)
        try:
            while not self._closed:
                st.wake.clear()
                if isinstance(self.dispatcher, KeySharedDispatcher):
                    if self._key_shared_round(partition, st, actor, self.dispatcher):
                        await asyncio.sleep(0)
                        continue
                    if len(st.held) < MAX_HELD and self.consumers:
                        await _first(st.wake.wait(), actor.wait_for_data(st.read_pos, None))
                    else:
                        await st.wake.wait()
                    continue
                consumers = self._consumers_of(partition)
                c = self.dispatcher.pick(partition, consumers)
                if c is not None:
                    taken = self._take(
                        st, actor, min(c.permits, self.dispatcher.max_batch), c.whole_batches
                    )
                    if taken is not None:
                        self._deliver(partition, st, c, *taken)
                        await asyncio.sleep(0)
                        continue
                    await _first(st.wake.wait(), actor.wait_for_data(st.read_pos, None))
                else:
                    await st.wake.wait()
        except asyncio.CancelledError:
            raise
        except WeirError as err:  # the partition closed (topic dropped, server stopping)
            log.debug("subscription pump stopped: %s", err)
        except Exception:
            log.exception(
                "subscription pump failed",
                extra={"subscription": self.name, "partition": partition},
            )

    def _take(
        self, st: PartitionState, actor: PartitionActor, limit: int, whole: bool = False
    ) -> tuple[list[int], list[Any]] | None:
        """The next offsets for a consumer with ``limit`` permits (redeliveries first) and
        the stored batches holding them (only those: a read up to the last one). ``whole``:
        every offset due in those batches, so that no batch is cut (may pass ``limit``)."""
        start = actor.start_offset
        if st.cursor.mark_delete < start:  # removed by a size limit: nothing left to deliver
            st.cursor.skip_to(start)
        if st.redeliver:
            for o in [o for o in st.redeliver if st.cursor.is_acked(o)]:
                self._settle(st, o)
        if st.redeliver:
            take = sorted(st.redeliver)[:limit]
            res = actor.read(take[0], MAX_READ_BYTES, take[-1] + 1)
            gone = [o for o in take if o < res.first_offset]
            for o in gone:  # removed from storage meanwhile
                self._settle(st, o)
            if gone:
                st.wake.set()  # look at the rest again
            if whole:
                take = sorted(o for o in st.redeliver if res.first_offset <= o < res.next_offset)
            else:
                take = [o for o in take if res.first_offset <= o < res.next_offset]
            if not take or not res.chunks:
                return None
            st.redeliver.difference_update(take)
            return take, res.chunks
        cursor = st.cursor
        end = actor.end_offset
        # read_pos only moves forward, so nothing from it on is pending: runs of
        # offsets between the acknowledged ranges are taken whole
        o = max(st.read_pos, cursor.mark_delete, start)
        take = []
        while len(take) < limit:
            o = cursor.next_unacked(o)
            if o >= end:
                break
            acked = cursor.next_acked(o)
            stop = min(end, o + limit - len(take), end if acked is None else acked)
            take.extend(range(o, stop))
            o = stop
        if not take:
            st.read_pos = min(o, end)
            return None
        res = actor.read(take[0], MAX_READ_BYTES, take[-1] + 1)
        if not res.chunks:
            st.read_pos = max(st.read_pos, res.next_offset)
            return None
        take = [x for x in take if res.first_offset <= x < res.next_offset]
        if take and actor.log.txns.active:
            # a transaction marker holds an offset and no message: nothing to deliver, so
            # it counts as acknowledged (subscriptions read uncommitted, as Pulsar's)
            markers = set(actor.log.txns.markers_between(take[0], take[-1] + 1))
            if markers:
                for m in markers:
                    cursor.ack_range(m, m + 1)
                take = [x for x in take if x not in markers]
        if not take:
            st.read_pos = max(st.read_pos, res.next_offset)
            return None
        if whole:  # the rest of the last batch: past read_pos, so pending nowhere
            o = take[-1] + 1
            while (o := cursor.next_unacked(o)) < res.next_offset:
                acked = cursor.next_acked(o)
                stop = res.next_offset if acked is None else min(acked, res.next_offset)
                take.extend(range(o, stop))
                o = stop
        st.read_pos = take[-1] + 1
        st.dispatched_high = max(st.dispatched_high, st.read_pos)
        if self.dispatcher.type is SubscriptionType.SHARED:
            take = self._hold_back_delayed(st, take, res.chunks)
            if not take:
                return None
        return take, res.chunks

    def _hold_back_delayed(self, st: PartitionState, take: list[int], chunks: Any) -> list[int]:
        """``take`` without the messages whose delivery time is still to come (they wait
        in ``st.delayed`` and come back through redelivery, their count unchanged)."""
        times = deliver_times(chunks, take[0], take[-1] + 1)
        if not times:
            return take
        now = _now_ms()
        later = {o for o in take if times.get(o, 0) > now}
        if not later:
            return take
        for o in later:
            heapq.heappush(st.delayed, (times[o], o))
        self._arm_delay(st)
        return [o for o in take if o not in later]

    def _arm_delay(self, st: PartitionState) -> None:
        if st.delay_timer is not None:
            st.delay_timer.cancel()
            st.delay_timer = None
        if st.delayed and not self._closed:
            wait = max(0.0, (st.delayed[0][0] - _now_ms()) / 1000)
            st.delay_timer = asyncio.get_running_loop().call_later(wait, self._release_delayed, st)

    def _release_delayed(self, st: PartitionState) -> None:
        st.delay_timer = None
        now = _now_ms()
        while st.delayed and st.delayed[0][0] <= now:
            _, o = heapq.heappop(st.delayed)
            if not st.cursor.is_acked(o) and o not in st.pending:
                st.redeliver.add(o)
                st.wake.set()
        self._arm_delay(st)

    def _key_shared_round(
        self,
        partition: int,
        st: PartitionState,
        actor: PartitionActor,
        ks: KeySharedDispatcher,
    ) -> bool:
        """One dispatch round of a Key_Shared partition; False when nothing could be sent."""
        consumers = self._consumers_of(partition)
        left = {c.consumer_id: min(c.permits, ks.max_batch) for c in consumers}
        if not any(n > 0 for n in left.values()):
            return False
        # a consumer that takes whole batches only: batches go whole, by their sticky key
        sticky = any(c.whole_batches for c in consumers)
        start = actor.start_offset
        cursor = st.cursor
        if cursor.mark_delete < start:
            cursor.skip_to(start)
        for o in [o for o in st.redeliver | st.held if cursor.is_acked(o) or o < start]:
            self._settle(st, o)
        waiting = sorted(st.redeliver | st.held)
        fresh: list[int] = []
        if len(st.held) < MAX_HELD:
            budget = sum(left.values())
            end = actor.end_offset
            o = max(st.read_pos, cursor.mark_delete, start)
            while len(fresh) < budget:
                o = cursor.next_unacked(o)
                if o >= end:
                    break
                acked = cursor.next_acked(o)
                stop = min(end, o + budget - len(fresh), end if acked is None else acked)
                fresh.extend(range(o, stop))
                o = stop
            if fresh:
                res = actor.read(fresh[0], MAX_READ_BYTES, fresh[-1] + 1)
                fresh = [x for x in fresh if res.first_offset <= x < res.next_offset]
                if fresh and sticky:  # the rest of the last batch: never cut one
                    o = fresh[-1] + 1
                    while (o := cursor.next_unacked(o)) < res.next_offset:
                        acked = cursor.next_acked(o)
                        stop = res.next_offset if acked is None else min(acked, res.next_offset)
                        fresh.extend(range(o, stop))
                        o = stop
                if fresh:
                    keys_of = batch_keys if sticky else message_keys
                    st.keys.update(keys_of(res.chunks, fresh[0], fresh[-1] + 1))
                    st.read_pos = fresh[-1] + 1
                    st.dispatched_high = max(st.dispatched_high, st.read_pos)
                    fresh = self._hold_back_delayed(st, fresh, res.chunks)
        holder = {st.keys.get(o, 0) & HASH_MASK: cid for o, (cid, _) in st.pending.items()}
        blocked: set[int] = set()
        chosen: dict[int, list[int]] = {}
        batch_of: dict[int, int] = {}  # consumer -> base offset of the batch it was last given
        for o in waiting + fresh:  # waiting ones are all below read_pos: offset order
            v = st.keys.get(o, 0)
            k = v & HASH_MASK
            target = ks.select(consumers, k)
            cid = target.consumer_id
            # sticky: the rest of a batch follows its first message, past the permits
            room = left[cid] > 0 or (sticky and batch_of.get(cid) == v >> 32)
            if k in blocked or not room or holder.get(k, cid) != cid:
                blocked.add(k)  # and so every later message of k waits too
                if o not in st.redeliver:
                    st.held.add(o)
                continue
            batch_of[cid] = v >> 32
            left[cid] -= 1
            holder[k] = cid
            chosen.setdefault(cid, []).append(o)
            st.held.discard(o)
            st.redeliver.discard(o)
        for cid, offsets in chosen.items():
            res = actor.read(offsets[0], 1 << 62, offsets[-1] + 1)  # all of them, in one go
            self._deliver(partition, st, self.consumers[cid], offsets, res.chunks)
        return bool(chosen)

    def _deliver(
        self,
        partition: int,
        st: PartitionState,
        c: AttachedConsumer,
        offsets: list[int],
        chunks: list[Any],
    ) -> None:
        self._delivery_seq += 1
        seq = self._delivery_seq
        st.pending.update(zip(offsets, repeat((c.consumer_id, seq))))
        c.permits -= len(offsets)
        c.unacked += len(offsets)
        counts = [st.counts.get(o, 0) for o in offsets] if st.counts else [0] * len(offsets)
        c.handle.deliver(Delivery(self.topic, partition, chunks, offsets, counts))
        if c.ack_timeout_ms > 0:
            asyncio.get_running_loop().call_later(
                c.ack_timeout_ms / 1000, self._timed_out, st, c.consumer_id, seq, offsets
            )

    # ----------------------------------------------------------------- seek

    async def seek(self, positions: dict[int, int]) -> None:
        """Move cursors: partition -> the first offset to deliver (clamped to what is stored).

        As Pulsar does, the consumers are disconnected first (with a retryable error, so
        they reconnect): nothing they had in flight can be acknowledged against the
        new positions, and what they held is simply delivered again from there.
        """
        for p in positions:
            self._state(p)
        for c in list(self.consumers.values()):
            self.detach(c.consumer_id)
            c.handle.close(UnavailableError(f"subscription {self.name!r} was moved by a seek"))
        waits = []
        for p, offset in positions.items():
            st = self.parts[p]
            actor = self._actor_of(p)
            target = min(max(offset, actor.start_offset), actor.end_offset)
            st.cursor.reset(target)
            st.pending.clear()
            st.redeliver.clear()
            st.counts.clear()
            st.keys.clear()
            st.held.clear()
            st.dead.clear()
            st.delayed.clear()
            self._arm_delay(st)
            st.read_pos = target
            st.wake.set()
            waits.append(st.cursor.persist())
        await _all(waits)

    # ----------------------------------------------------------------- admin

    def describe(self, short_topic: str) -> SubscriptionInfo:
        consumers = list(self.consumers.values())
        parts = []
        for p, st in sorted(self.parts.items()):
            actor = self._actor_of(p)
            mark = max(st.cursor.mark_delete, actor.start_offset)
            backlog = max(0, actor.end_offset - mark - st.cursor.acked_above())
            owner = self.dispatcher.owner(p, self._consumers_of(p))
            parts.append(
                SubscriptionPartitionInfo(
                    p,
                    st.cursor.mark_delete,
                    len(st.cursor.acked),
                    backlog,
                    len(st.pending),
                    owner.name if owner is not None else "",
                )
            )
        return SubscriptionInfo(
            short_topic,
            self.name,
            self.meta.type,
            self.meta.initial_position.value,
            self.meta.created_at_ms,
            parts,
            [
                SubscriptionConsumerInfo(c.consumer_id, c.name, c.permits, c.unacked)
                for c in consumers
            ],
            self.meta.max_redeliver_count,
            DeadLetterPolicy(self.meta.max_redeliver_count, self.meta.dead_letter_topic).topic_for(
                short_topic, self.name
            )
            if self.meta.max_redeliver_count
            else "",
        )

    async def close(self, err: WeirError | None = None) -> None:
        """Stop dispatching; with ``err``, tell the attached consumers why they are dropped."""
        self._closed = True
        for st in self.parts.values():
            if st.delay_timer is not None:
                st.delay_timer.cancel()
        tasks = [st.task for st in self.parts.values() if st.task is not None]
        tasks += [st.burying for st in self.parts.values() if st.burying is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if err is not None:
            for c in list(self.consumers.values()):
                c.handle.close(err)
        self.consumers.clear()


def _tell(c: AttachedConsumer, partition: int, active: bool) -> None:
    hook = getattr(c.handle, "active_changed", None)
    if hook is not None:
        hook(partition, active)


async def _all(waits: list[asyncio.Future[None]]) -> None:
    # shield: a caller that goes away must not cancel a snapshot others wait for too
    await asyncio.gather(*(asyncio.shield(w) for w in waits))


async def _first(*aws: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            t.result()
    finally:
        for t in tasks:
            t.cancel()


def _now_ms() -> int:
    return int(time.time() * 1000)

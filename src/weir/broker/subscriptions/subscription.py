"""One durable subscription of one topic: a cursor per partition, the consumers attached
to it, and what has been delivered to whom.

Per partition a pump task hands the next messages to the consumer the dispatcher
picks, within that consumer's permits. Messages delivered and not yet acknowledged
are *pending* (with the consumer that holds them); a negative ack, an ack timeout or
the consumer leaving moves them to *redeliver*, which the pump serves first, each
with its redelivery count raised. The cursor alone decides what is acknowledged;
pending and redelivery state live in memory (after a restart every unacknowledged
message is delivered again, as in Pulsar), the redelivery counts beside the cursor.
Acknowledgements are the `acks` mixin; the shared state is `state`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from bisect import bisect_left
from collections.abc import Callable, Iterable
from itertools import repeat
from typing import Any

from weir.broker.partition_actor import PartitionActor
from weir.broker.subscriptions.acks import Acknowledgements
from weir.broker.subscriptions.consumer import AttachedConsumer, Delivery
from weir.broker.subscriptions.cursor import Cursor, drop_acked
from weir.broker.subscriptions.dead_letter import DeadLetterPolicy
from weir.broker.subscriptions.dispatcher import Dispatcher
from weir.broker.subscriptions.info import (
    SubscriptionConsumerInfo,
    SubscriptionInfo,
    SubscriptionPartitionInfo,
)
from weir.broker.subscriptions.key_shared import (
    HASH_MASK,
    MAX_HELD,
    KeySharedDispatcher,
    batch_keys,
    message_keys,
)
from weir.broker.subscriptions.rates import RateMeter
from weir.broker.subscriptions.reads import read_span
from weir.broker.subscriptions.settings import SubscriptionMeta, SubscriptionType
from weir.broker.subscriptions.shared import SharedDispatcher
from weir.broker.subscriptions.single_active import SingleActiveDispatcher
from weir.broker.subscriptions.state import (
    DeadLetterSink,
    PartitionState,
    all_durable,
    ignore_failure,
    log,
)
from weir.errors import (
    BadRequestError,
    ConsumerBusyError,
    UnavailableError,
    WeirError,
)
from weir.storage.partition import PartitionLog

MAX_READ_BYTES = 1 << 20


def make_dispatcher(type: SubscriptionType, name: str) -> Dispatcher:
    if type is SubscriptionType.SHARED:
        return SharedDispatcher(name)
    if type is SubscriptionType.KEY_SHARED:
        return KeySharedDispatcher(name)
    return SingleActiveDispatcher(type, name)


class Subscription(Acknowledgements):
    """A subscription: its partitions, consumers, dispatch and admin (acks: `acks`)."""

    def __init__(
        self,
        topic: str,
        topic_id: int,
        meta: SubscriptionMeta,
        actor_of: Callable[[int], PartitionActor],
        new_cursor: Callable[[int, int], Cursor],
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
        self.rate_out = RateMeter()
        self.rate_redeliver = RateMeter()
        self.rate_ack = RateMeter()

    # ----------------------------------------------------------------- partitions

    def add_partition(self, partition: int, cursor: Cursor, fresh: bool) -> None:
        """Track ``partition``. A fresh cursor has delivered nothing; a loaded one may have
        delivered anything written before the restart, so acks of those are accepted."""
        actor = self._actor_of(partition)
        high = cursor.mark_delete if fresh else max(cursor.mark_delete, actor.end_offset)
        st = PartitionState(cursor, cursor.mark_delete, high, partition=partition)
        st.delayed.on_due = lambda offsets: self._release_delayed(st, offsets)
        self.parts[partition] = st
        if self.consumers:
            self._start_pump(partition, st)

    def drop_partition(self, partition: int, err: WeirError) -> None:
        """Stop serving ``partition`` (it moved to another broker): its pump stops, what
        was pending there is forgotten (the next owner delivers it again), and the
        consumers that took it alone are dropped with ``err`` (retryable: they look the
        partition up and reattach at its owner)."""
        st = self.parts.pop(partition, None)
        if st is None:
            return
        st.delayed.close()
        for t in (st.task, st.burying):
            if t is not None:
                t.cancel()
        for cid, _ in list(st.pending.values()):
            holder = self.consumers.get(cid)
            if holder is not None:
                holder.unacked -= 1
        st.pending.clear()
        for c in list(self.consumers.values()):
            if c.takes(partition) and (c.partitions is not None or not self.parts):
                self.detach(c.consumer_id)
                c.handle.close(err)

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
                    if await self._key_shared_round(partition, st, actor, self.dispatcher):
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
                    taken = await self._take(partition, st, actor, c)
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

    def _still_for(
        self, partition: int, st: PartitionState, c: AttachedConsumer, seeks: int
    ) -> bool:
        """After a read (an await: an offloaded blob may have been fetched meanwhile):
        True when ``c`` may still be given what was read (no seek, still attached, still
        the partition's owner for a single-active subscription, permits left)."""
        if self._closed or st.seeks != seeks or self.consumers.get(c.consumer_id) is not c:
            return False
        shared = self.dispatcher.type is SubscriptionType.SHARED
        if not shared and self.dispatcher.owner(partition, self._consumers_of(partition)) is not c:
            return False
        return c.permits > 0

    async def _take(
        self, partition: int, st: PartitionState, actor: PartitionActor, c: AttachedConsumer
    ) -> tuple[list[int], list[Any]] | None:
        """The next offsets for consumer ``c`` within its permits (redeliveries first) and
        the stored batches holding them (only those: a read up to the last one). A consumer
        that takes whole batches gets every offset due in those batches, so that no batch
        is cut (may pass its permits). The read is ``read_async``: what changed while it
        ran (acks, a seek, the consumer leaving) is looked at again after it."""
        whole = c.whole_batches
        limit = min(c.permits, self.dispatcher.max_batch)
        seeks = st.seeks
        start = actor.start_offset
        if st.cursor.mark_delete < start:  # removed by a size limit: nothing left to deliver
            st.cursor.skip_to(start)
        if st.redeliver:
            for o in [o for o in st.redeliver if st.cursor.is_acked(o)]:
                self._settle(st, o)
        if st.redeliver:
            take = sorted(st.redeliver)[:limit]
            res = await actor.read_async(take[0], MAX_READ_BYTES, take[-1] + 1)
            if not self._still_for(partition, st, c, seeks):
                st.wake.set()
                return None
            limit = min(c.permits, self.dispatcher.max_batch)
            take = [o for o in take if o in st.redeliver and not st.cursor.is_acked(o)][:limit]
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
        read_pos = st.read_pos
        res = await actor.read_async(take[0], MAX_READ_BYTES, take[-1] + 1)
        if not self._still_for(partition, st, c, seeks) or st.read_pos != read_pos:
            st.wake.set()
            return None
        # acked meanwhile (a skip), or permits spent by another partition's delivery
        take = drop_acked(cursor, take)[: min(c.permits, self.dispatcher.max_batch)]
        if not take:
            st.wake.set()
            return None
        if not res.chunks:
            st.read_pos = max(st.read_pos, res.next_offset)
            return None
        take = take[bisect_left(take, res.first_offset) : bisect_left(take, res.next_offset)]
        if take and isinstance(actor.log, PartitionLog) and actor.log.txns.active:
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
            take = st.delayed.hold_back(take, res.chunks)
            if not take:
                return None
        return take, res.chunks

    def _release_delayed(self, st: PartitionState, offsets: list[int]) -> None:
        """Held-back messages whose time came: delivered next (their count unchanged)."""
        for o in offsets:
            if not st.cursor.is_acked(o) and o not in st.pending:
                st.redeliver.add(o)
                st.wake.set()

    async def _key_shared_round(
        self,
        partition: int,
        st: PartitionState,
        actor: PartitionActor,
        ks: KeySharedDispatcher,
    ) -> bool:
        """One dispatch round of a Key_Shared partition; False when nothing could be sent.

        Reads are ``read_async`` (an offloaded blob is fetched off the event loop): the
        fresh messages are read first, then the choice is made on the state as it is
        after that read, then each consumer's messages are read and delivered; what one
        of those reads outlived (its consumer left, a seek) is not delivered."""
        consumers = self._consumers_of(partition)
        if not any(min(c.permits, ks.max_batch) > 0 for c in consumers):
            return False
        cursor = st.cursor
        if cursor.mark_delete < actor.start_offset:
            cursor.skip_to(actor.start_offset)
        fresh: list[int] = []
        if len(st.held) < MAX_HELD:
            budget = sum(min(c.permits, ks.max_batch) for c in consumers)
            end = actor.end_offset
            o = max(st.read_pos, cursor.mark_delete, actor.start_offset)
            while len(fresh) < budget:
                o = cursor.next_unacked(o)
                if o >= end:
                    break
                acked = cursor.next_acked(o)
                stop = min(end, o + budget - len(fresh), end if acked is None else acked)
                fresh.extend(range(o, stop))
                o = stop
            if fresh:
                seeks, read_pos = st.seeks, st.read_pos
                res = await actor.read_async(fresh[0], MAX_READ_BYTES, fresh[-1] + 1)
                if self._closed or st.seeks != seeks or st.read_pos != read_pos:
                    st.wake.set()  # moved while reading: look again
                    return False
                # consumers and permits as they are now (they may have changed meanwhile)
                consumers = self._consumers_of(partition)
                sticky = any(c.whole_batches for c in consumers)
                fresh = drop_acked(
                    cursor,
                    fresh[
                        bisect_left(fresh, res.first_offset) : bisect_left(fresh, res.next_offset)
                    ],
                )
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
                    fresh = st.delayed.hold_back(fresh, res.chunks)
        left = {c.consumer_id: min(c.permits, ks.max_batch) for c in consumers}
        # a consumer that takes whole batches only: batches go whole, by their sticky key
        sticky = any(c.whole_batches for c in consumers)
        start = actor.start_offset
        for o in [o for o in st.redeliver | st.held if cursor.is_acked(o) or o < start]:
            self._settle(st, o)
        waiting = sorted(st.redeliver | st.held)
        fresh = [o for o in fresh if o >= start]
        holder = {st.keys.get(o, 0) & HASH_MASK: cid for o, (cid, _) in st.pending.items()}
        blocked: set[int] = set()
        chosen: dict[int, list[int]] = {}
        batch_of: dict[int, int] = {}  # consumer -> base offset of the batch it was last given
        for o in waiting + fresh:  # waiting ones are all below read_pos: offset order
            v = st.keys.get(o, 0)
            k = v & HASH_MASK
            target = ks.select(consumers, k)
            cid = -1 if target is None else target.consumer_id  # -1: a slot nobody claims
            # sticky: the rest of a batch follows its first message, past the permits
            room = left.get(cid, 0) > 0 or (
                target is not None and sticky and batch_of.get(cid) == v >> 32
            )
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
            seeks = st.seeks
            res = await read_span(actor, offsets[0], offsets[-1] + 1)  # all of them
            if self._closed or st.seeks != seeks:
                return True  # the seek reset what these were: nothing to give back
            offsets = [o for o in offsets if not cursor.is_acked(o)]
            c = self.consumers.get(cid)
            if c is None or not c.takes(partition):
                # it left while its messages were read: they go to the others, in order,
                # their count unchanged (they never reached it)
                st.redeliver.update(offsets)
                st.wake.set()
                continue
            if offsets:
                self._deliver(partition, st, c, offsets, res.chunks)
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
        known = st.cursor.counts
        counts = [known.get(o, 0) for o in offsets] if known else [0] * len(offsets)
        self.rate_out.add(len(offsets))
        if known:
            again = len(offsets) - counts.count(0)
            if again:
                self.rate_redeliver.add(again)
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
            st.cursor.counts.clear()
            st.keys.clear()
            st.held.clear()
            st.dead.clear()
            st.delayed.clear()
            st.read_pos = target
            st.seeks += 1  # a dispatch read in flight is not delivered
            st.wake.set()
            waits.append(st.cursor.persist())
        await all_durable(waits)

    async def skip(self, count: int | None, partitions: Iterable[int]) -> int:
        """Acknowledge, on each of ``partitions``, its ``count`` oldest unacknowledged
        messages (None: all of them, Pulsar's clear-backlog), delivered or not; returns
        how many were skipped once that is durable. Consumers stay attached: what they
        hold of it is simply acknowledged already."""
        if count is not None and count < 1:
            raise BadRequestError(f"skip needs a count >= 1 (or all), got {count}")
        states = [(p, self._state(p)) for p in partitions]
        skipped = 0
        for p, st in states:
            actor = self._actor_of(p)
            cursor = st.cursor
            end = actor.end_offset
            if cursor.mark_delete < actor.start_offset:
                cursor.skip_to(actor.start_offset)
            left = end if count is None else count
            o = cursor.mark_delete
            while left > 0:
                o = cursor.next_unacked(o)
                if o >= end:
                    break
                acked = cursor.next_acked(o)
                stop = min(end, o + left, end if acked is None else acked)
                cursor.ack_range(o, stop)
                self._settle_range(st, o, stop)
                skipped += stop - o
                left -= stop - o
                o = stop
            st.wake.set()
        await all_durable([st.cursor.persist() for _, st in states])
        return skipped

    def evict(self, partition: int, offset: int) -> int:
        """Acknowledge everything of ``partition`` below ``offset`` (a backlog eviction);
        1 if the cursor moved. Durable with the next group commit; nobody waits for it."""
        st = self.parts.get(partition)
        if st is None or st.cursor.mark_delete >= offset:
            return 0
        st.cursor.skip_to(offset)
        self._settle_range(st, 0, offset)
        st.read_pos = max(st.read_pos, offset)
        st.wake.set()
        if not self._closed:
            st.cursor.persist().add_done_callback(ignore_failure)
        log.info(
            "backlog quota: subscription cursor moved forward",
            extra={"subscription": self.name, "partition": partition, "offset": offset},
        )
        return 1

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
                SubscriptionConsumerInfo(
                    c.consumer_id, c.name, c.permits, c.unacked, c.hash_ranges or ()
                )
                for c in consumers
            ],
            self.meta.max_redeliver_count,
            DeadLetterPolicy(self.meta.max_redeliver_count, self.meta.dead_letter_topic).topic_for(
                short_topic, self.name
            )
            if self.meta.max_redeliver_count
            else "",
            msg_rate_out=self.rate_out.rate(),
            msg_rate_redeliver=self.rate_redeliver.rate(),
            ack_rate=self.rate_ack.rate(),
            consumer=self.consumer_backed,
        )

    def close_soon(self, err: WeirError) -> None:
        """`close` from code that cannot wait (in a task of its own)."""
        self._closed = True
        task = asyncio.get_running_loop().create_task(self.close(err))
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())

    async def close(self, err: WeirError | None = None) -> None:
        """Stop dispatching; with ``err``, tell the attached consumers why they are dropped."""
        self._closed = True
        for st in self.parts.values():
            st.delayed.close()
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


async def _first(*aws: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            t.result()
    finally:
        for t in tasks:
            t.cancel()

"""Acknowledgements (a mixin of `Subscription`): individual, cumulative, batch-index
and negative acks, ack timeouts, reconsume-later and dead letters.

An ack changes the cursor at once (nothing acked is dispatched again) and answers once
the cursor snapshot holding it is durable. A message given back (a negative ack, an ack
timeout, its consumer leaving) goes to *redeliver* with its redelivery count raised
and stored; past the dead-letter policy's count it is *buried* instead: copied to the
dead-letter topic, then acknowledged.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from itertools import chain, repeat

from weir.broker.subscriptions.batch_index import batch_count_at, index_ranges
from weir.broker.subscriptions.dead_letter import (
    ORIGIN_PARTITION,
    ORIGIN_SUBSCRIPTION,
    ORIGIN_TOPIC,
    DeadLetterPolicy,
    dead_letter_batches,
)
from weir.broker.subscriptions.reads import read_span
from weir.broker.subscriptions.retry import RetryLetters, retry_copies
from weir.broker.subscriptions.state import (
    MAX_DELAY_MS,
    PartitionState,
    SubscriptionState,
    all_durable,
    ignore_failure,
    log,
    now_ms,
)
from weir.broker.topics import short_topic
from weir.errors import BadRequestError, UnavailableError, WeirError


class Acknowledgements(SubscriptionState):
    """What consumers say about the messages they got."""

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
        if st.cursor.counts:
            st.cursor.counts.pop(o, None)
        if st.dead:
            st.dead.discard(o)
        if st.keys:
            st.keys.pop(o, None)
            if st.held:
                st.held.discard(o)
                st.wake.set()  # held keys may go now

    def _settle_range(self, st: PartitionState, start: int, end: int) -> None:
        """Forget what is pending or due again in ``[start, end)``: it is acknowledged."""
        self._settle_ranges(st, [(start, end)])

    def _settle_ranges(self, st: PartitionState, ranges: list[tuple[int, int]]) -> None:
        """Forget what is pending or due again in these ``[start, end)`` ranges."""
        offsets: Iterable[int]
        total = sum(b - a for a, b in ranges)
        if total <= len(st.pending) + len(st.redeliver):
            offsets = (
                range(*ranges[0])
                if len(ranges) == 1
                else [o for a, b in ranges for o in range(a, b)]
            )
        else:  # wide ranges (a cumulative ack): walk what is held instead
            offsets = [
                o for o in chain(st.pending, st.redeliver) if any(a <= o < b for a, b in ranges)
            ]
        if st.pending:
            held = [h for h in map(st.pending.pop, offsets, repeat(None)) if h is not None]
            if held:
                first = held[0][0]
                if all(h[0] == first for h in held):  # the usual case: one consumer's
                    c = self.consumers.get(first)
                    if c is not None:
                        c.unacked -= len(held)
                else:
                    for cid, n in Counter(h[0] for h in held).items():
                        holder = self.consumers.get(cid)
                        if holder is not None:
                            holder.unacked -= n
        if st.redeliver:
            st.redeliver.difference_update(offsets)
        counts = st.cursor.counts
        if counts:
            for o in offsets:
                counts.pop(o, None)
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
        by_part: dict[int, list[tuple[int, int]]] = {}
        n = 0
        for p, start, end in ranges:
            by_part.setdefault(p, []).append((start, end))
            n += end - start
        for p, rs in by_part.items():
            self.parts[p].cursor.check_acks(rs)
        for p, rs in by_part.items():
            st = self.parts[p]
            ack = st.cursor.ack_range
            for a, b in rs:
                ack(a, b)
            self._settle_ranges(st, rs)
        self.rate_ack.add(n)
        await all_durable([self.parts[p].cursor.persist() for p in by_part])

    async def acknowledge_batch_indexes(
        self, partition: int, batch_offset: int, indexes: Iterable[int]
    ) -> None:
        """Acknowledge the messages at ``indexes`` of the stored batch that starts at
        ``batch_offset`` (Pulsar's batch-index acks); returns once durable. The batch's
        other messages stay unacknowledged: a redelivery sends only them."""
        self._state(partition)
        count = await batch_count_at(self._actor_of(partition), batch_offset)
        await self.acknowledge(
            [(partition, a, b) for a, b in index_ranges(batch_offset, count, indexes)]
        )

    async def acknowledge_cumulative(self, partition: int, offset: int) -> None:
        """Acknowledge every message of ``partition`` up to and including ``offset``."""
        if not self.dispatcher.allows_cumulative:
            raise BadRequestError(
                f"subscription {self.name!r} is {self.meta.type.value}: cumulative acknowledgement "
                "is not allowed there (messages interleave over consumers); acknowledge each message"
            )
        self._check_delivered([(partition, offset, offset + 1)])
        st = self.parts[partition]
        self.rate_ack.add(max(0, offset + 1 - st.cursor.mark_delete))
        st.cursor.ack_cumulative(offset)
        self._settle_range(st, 0, offset + 1)
        await all_durable([st.cursor.persist()])

    async def reconsume_later(
        self, ranges: list[tuple[int, int, int]], delay_ms: int, letters: RetryLetters
    ) -> None:
        """Copy these messages to the retry topic to come back after ``delay_ms`` (or to the
        dead-letter topic past the limit: see `retry`), then acknowledge them here;
        returns once both are durable. All or nothing, as an ack."""
        if delay_ms < 0 or delay_ms > MAX_DELAY_MS:
            raise BadRequestError(f"a reconsume delay is 0..{MAX_DELAY_MS} ms, got {delay_ms}")
        self._check_delivered(ranges)
        if self._dead_letter_sink is None:
            raise UnavailableError("this broker cannot write retry letters")
        deliver_at = now_ms() + delay_ms
        short = short_topic(self.topic)
        retry: list[bytes] = []
        dead: list[bytes] = []
        for p, start, end in ranges:
            st = self.parts[p]
            todo = [o for o in range(start, end) if not st.cursor.is_acked(o)]
            if not todo:
                continue
            res = await read_span(self._actor_of(p), todo[0], todo[-1] + 1)
            origin = {ORIGIN_TOPIC: short, ORIGIN_PARTITION: str(p), ORIGIN_SUBSCRIPTION: self.name}
            r, d = retry_copies(res.chunks, set(todo), origin, deliver_at, letters)
            retry += r
            dead += d
        if retry:
            await self._dead_letter_sink(letters.topic, retry)
        if dead:
            await self._dead_letter_sink(letters.dead_letter_topic, dead)
        await self.acknowledge(ranges)

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

    def _to_redeliver(self, st: PartitionState, offset: int) -> None:
        counts = st.cursor.counts
        n = counts[offset] = counts.get(offset, 0) + 1
        self._persist_counts(st)
        limit = self.meta.max_redeliver_count
        if limit and n > limit and self._dead_letter_sink is not None:
            st.dead.add(offset)
            if st.burying is None and not self._closed:
                st.burying = asyncio.get_running_loop().create_task(self._bury(st))
            return
        st.redeliver.add(offset)
        st.wake.set()

    def _persist_counts(self, st: PartitionState) -> None:
        """Store the raised counts in the background (the next group commit): nobody waits
        for them, and a crash before then only loses the latest raise."""
        if self._closed:
            return
        fut = st.cursor.persist()
        fut.add_done_callback(ignore_failure)

    async def _bury(self, st: PartitionState) -> None:
        """Copy dead letters to the dead-letter topic, then acknowledge them here."""
        assert self._dead_letter_sink is not None
        actor = self._actor_of(st.partition)
        short = short_topic(self.topic)
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
                res = await read_span(actor, offsets[0], offsets[-1] + 1)
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
                await all_durable([st.cursor.persist()])
        finally:
            st.burying = None

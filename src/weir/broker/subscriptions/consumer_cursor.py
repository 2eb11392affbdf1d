"""A consumer's committed offset seen as a subscription's cursor.

The consumers of a topic (``client.reader(topic, consumer=...)``, the YDB front's
consumers, Kafka groups) keep one committed offset per partition: the next offset to
read, in the ``offsets`` table (`weir.broker.consumers.OffsetStore`). To the
subscription registry each such consumer is a Failover subscription whose cursor's
mark-delete position *is* that committed offset: acknowledging cumulatively commits,
and a reader's commit moves the subscription. There are no acknowledged ranges above
it, so an individual ack must extend it (acks in order); others are refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from weir.broker.consumers import OffsetStore
from weir.broker.subscriptions.ranges import RangeSet
from weir.errors import BadRequestError
from weir.storage.kv import Op

log = logging.getLogger("weir.subscriptions")


class ConsumerCursor:
    """A `Cursor` over one partition's committed offset of one consumer."""

    def __init__(
        self,
        offsets: OffsetStore,
        topic_id: int,
        partition: int,
        consumer: str,
        start_offset: Callable[[], int],
        on_commit: Callable[[int], None] | None = None,
    ) -> None:
        self._offsets = offsets
        self._topic_id = topic_id
        self._partition = partition
        self._consumer = consumer
        self._start_offset = start_offset  # where a consumer that never committed starts
        self._on_commit = on_commit  # told each offset stored (the commit metric)
        self._target: int | None = None  # moved here, not yet durable
        self._backwards = False  # a seek back: the target wins over what is stored
        self._inflight = False
        self._next: asyncio.Future[None] | None = None
        self.counts: dict[int, int] = {}  # redelivery counts: in memory only
        self._empty = RangeSet()

    def _stored(self) -> int:
        c = self._offsets.get(self._topic_id, self._partition, self._consumer)
        return self._start_offset() if c is None else c

    @property
    def mark_delete(self) -> int:
        stored = self._stored()
        if self._target is None:
            return stored
        return self._target if self._backwards else max(stored, self._target)

    @property
    def acked(self) -> RangeSet:
        return self._empty

    def is_acked(self, offset: int) -> bool:
        return offset < self.mark_delete

    def next_unacked(self, offset: int) -> int:
        return max(offset, self.mark_delete)

    def next_acked(self, offset: int) -> int | None:
        return None

    def check_acks(self, ranges: list[tuple[int, int]]) -> None:
        mark = self.mark_delete
        for a, b in sorted(ranges):
            if a > mark:
                raise BadRequestError(
                    f"subscription {self._consumer!r} is the committed offset of consumer "
                    f"{self._consumer!r}: acknowledge in order or cumulatively (offset {a} "
                    f"of partition {self._partition} comes after {mark}, not yet acknowledged)"
                )
            mark = max(mark, b)

    def ack_range(self, start: int, end: int) -> None:
        mark = self.mark_delete
        if start > mark:
            raise BadRequestError(f"offset {start} cannot be acknowledged before {mark}")
        if end > mark:
            self._move(end)

    def ack_cumulative(self, offset: int) -> None:
        self.skip_to(offset + 1)

    def skip_to(self, offset: int) -> None:
        if offset > self.mark_delete:
            self._move(offset)

    def reset(self, offset: int) -> None:
        self._target = offset
        self._backwards = True

    def _move(self, offset: int) -> None:
        if self._backwards:
            self._target = offset
        else:
            self._target = max(offset, self._target or 0)

    def acked_above(self) -> int:
        return 0

    def drop_ops(self) -> list[Op]:
        return []  # the consumer's offsets go with the consumer (alter_topic)

    def persist(self) -> asyncio.Future[None]:
        """A future that resolves once the offset as it is now is committed (durable)."""
        fut = self._next
        if fut is None:
            fut = self._next = asyncio.get_running_loop().create_future()
            if not self._inflight:
                self._write()
        return fut

    def _write(self) -> None:
        fut, self._next = self._next, None
        assert fut is not None
        self._inflight = True
        target, backwards = self.mark_delete, self._backwards
        task = asyncio.get_running_loop().create_task(
            self._offsets.commit(
                self._topic_id,
                self._partition,
                self._consumer,
                target,
                allow_backwards=backwards,
            )
        )

        def finished(t: asyncio.Task[bool]) -> None:
            self._inflight = False
            if t.cancelled():
                fut.cancel()
            elif t.exception() is not None:
                fut.set_exception(t.exception())  # type: ignore[arg-type]
            else:
                if self._target == target and (not backwards or self._backwards):
                    self._target, self._backwards = None, False  # stored: it speaks again
                if t.result() and self._on_commit is not None:
                    self._on_commit(target)
                fut.set_result(None)
            if self._next is not None:
                self._write()

        task.add_done_callback(finished)

"""One partition of a non-persistent topic: offsets and fan-out in memory, nothing stored.

A write is stamped with offsets and the time as a persistent write would be (so a
reader decodes it the same way), acknowledged at once (no durability claim: it was
handed to the consumers connected now), and offered to every *sink*: the queue of
each reader reading the partition, and each subscription of the topic. A sink whose
queue is over its byte bound drops the message and counts it; nothing is ever queued
without bound. Offsets start at 0 each time the server starts.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from weir.broker.observer import NULL_OBSERVER, BrokerObserver
from weir.errors import UnavailableError, WeirError
from weir.storage.batch import stamp_header
from weir.storage.incoming import IncomingBatch
from weir.storage.partition import BatchResult


class Sink(Protocol):
    def offer(self, partition: int, batch: bytes, first: int, end: int) -> tuple[int, int]:
        """Take the messages ``[first, end)`` of ``batch``: (delivered, dropped) counts."""


class LiveQueue:
    """The bounded queue of one consumer of a non-persistent partition."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.items: deque[tuple[int, bytes, list[int]]] = deque()  # (partition, batch, offsets)
        self.nbytes = 0
        self.delivered = 0
        self.dropped = 0
        self.closed: WeirError | None = None
        self._event = asyncio.Event()

    def put(self, partition: int, batch: bytes, offsets: list[int]) -> bool:
        """Queue the messages; False (dropped, counted) when the queue is full. One batch
        bigger than the bound still goes into an empty queue, so nothing is dropped only
        for its size."""
        if self.closed is not None or (self.items and self.nbytes + len(batch) > self.max_bytes):
            self.dropped += len(offsets)
            return False
        self.items.append((partition, batch, offsets))
        self.nbytes += len(batch)
        self.delivered += len(offsets)
        self._event.set()
        return True

    def offer(self, partition: int, batch: bytes, first: int, end: int) -> tuple[int, int]:
        n = end - first
        return (n, 0) if self.put(partition, batch, list(range(first, end))) else (0, n)

    def take(self, max_bytes: int) -> list[tuple[int, bytes, list[int]]]:
        """At least one queued item (if any), then more up to ``max_bytes``."""
        out: list[tuple[int, bytes, list[int]]] = []
        size = 0
        while self.items and (not out or size + len(self.items[0][1]) <= max_bytes):
            item = self.items.popleft()
            self.nbytes -= len(item[1])
            size += len(item[1])
            out.append(item)
        if not self.items:
            self._event.clear()
        return out

    async def wait(self) -> None:
        """Until something is queued (or the partition is gone: raises why)."""
        while not self.items:
            if self.closed is not None:
                raise self.closed
            self._event.clear()
            await self._event.wait()

    def close(self, err: WeirError) -> None:
        self.closed = err
        self._event.set()


class LivePartition:
    """See the module docstring."""

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        generation: int,
        queue_bytes: int,
        observer: BrokerObserver = NULL_OBSERVER,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.generation = generation
        self.queue_bytes = queue_bytes
        self.observer = observer
        self.end_offset = 0
        self.delivered = 0
        self.dropped = 0
        self.last_write_ms = 0
        self.sinks: list[Sink] = []
        self._closed = False

    @property
    def start_offset(self) -> int:
        """Nothing is kept: a reader starts at the end."""
        return self.end_offset

    def open_queue(self) -> LiveQueue:
        """A queue for a reader of this partition (close it with `close_queue`)."""
        if self._closed:
            raise UnavailableError(f"partition {self.topic}/{self.partition} is closed")
        q = LiveQueue(self.queue_bytes)
        self.sinks.append(q)
        return q

    def close_queue(self, q: LiveQueue) -> None:
        if q in self.sinks:
            self.sinks.remove(q)

    def publish(self, batches: Sequence[IncomingBatch]) -> list[BatchResult]:
        """Stamp and hand the batches to every sink now; the results of an acknowledged write."""
        if self._closed:
            raise UnavailableError(f"partition {self.topic}/{self.partition} is shutting down")
        now = max(int(time.time() * 1000), self.last_write_ms)
        results = []
        delivered = dropped = nbytes = 0
        for b in batches:
            h = b.header
            first = self.end_offset
            end = first + h.record_count
            head = stamp_header(b.buf, h, first, now)
            data = head + bytes(memoryview(b.buf)[h.payload_start : h.length])
            for sink in list(self.sinks):
                d, x = sink.offer(self.partition, data, first, end)
                delivered += d
                dropped += x
            self.end_offset = end
            nbytes += len(data)
            results.append(BatchResult(first, h.record_count, 0))
        self.last_write_ms = now
        self.delivered += delivered
        self.dropped += dropped
        self.observer.on_non_persistent(self.topic, self.partition, delivered, dropped, nbytes)
        return results

    def close(self, err: WeirError) -> None:
        self._closed = True
        for sink in self.sinks:
            if isinstance(sink, LiveQueue):
                sink.close(err)
        self.sinks.clear()

"""The synchronous reader (`weir.Reader`), twin of `weir.aio.Reader`: its stream runs
in the client's loop thread; messages are handed out one by one from the batch taken.

Batches reach the caller's thread through a `BatchHandoff`: a task in the loop thread
takes the next batch as soon as it arrives and puts it in a thread-safe queue, at most
one batch ahead of the caller (plus the one it holds). A caller waiting for the next
batch is woken once, by the put; before, each batch cost a round trip through the
loop (a coroutine sent there, a task, its result sent back), two thread wake-ups.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from weir.client import aio
from weir.client.loop import LoopThread
from weir.client.messages import Batch, Message
from weir.client.reader import PartitionSession
from weir.errors import ClosedError, WeirError

if TYPE_CHECKING:
    from weir.client.transaction_sync import Transaction


class BatchHandoff:
    """The loop thread's batches, taken by the caller's thread (module docstring).

    A task in the loop awaits ``inner.receive_batch`` and puts each batch (or the
    exception it raised, after which the task ends) in a `queue.SimpleQueue`. It keeps
    at most ``AHEAD`` batches there; with the queue full it waits for the caller to
    take one, and only then does the caller wake it. Batches are credited to the
    server as the task takes them, so a reader holds at most ``buffer_bytes`` plus
    two batches it has not handed out.
    """

    AHEAD = 1

    def __init__(self, inner: aio.Reader, loop: LoopThread) -> None:
        self._inner = inner
        self._loop = loop
        self._ready: queue.SimpleQueue[Batch | BaseException] = queue.SimpleQueue()
        self._lock = threading.Lock()  # orders a caller's take against the task's wait
        self._wants_room = False  # the task waits for the caller to take a batch
        self._room: asyncio.Event | None = None
        self._task: concurrent.futures.Future[None] | None = None  # None: not running
        self._closed = False

    def take(self, timeout: float | None) -> Batch | None:
        """The next batch, None after ``timeout`` seconds (0: only what is here)."""
        self._loop.check_outside()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._closed:
                raise ClosedError("reader is closed")
            with self._lock:  # one task, however many threads take
                if self._task is None:
                    self._task = asyncio.run_coroutine_threadsafe(self._run(), self._loop.loop)
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = self._ready.get(wait is None or wait > 0, wait)
            except queue.Empty:
                return None
            with self._lock:
                wake = self._wants_room
            if wake and self._room is not None:
                self._loop.loop.call_soon_threadsafe(self._room.set)
            if isinstance(item, BaseException):
                if self._closed:
                    self._ready.put(item)  # for the next caller waiting, if any
                else:
                    self._task = None  # it ended; the next take asks again (and sees it)
                raise item.with_traceback(None)
            ps = item.session
            if ps is None or not (ps.closed or ps.revoking):
                return item
            # its partition was taken from this reader (stream lost, rebalance) after the
            # task took the batch: dropped, as the reader's buffer drops it; it comes again

    async def _run(self) -> None:
        self._room = asyncio.Event()
        item: Batch | BaseException | None = None
        try:
            while True:
                try:
                    item = await self._inner.receive_batch(None)
                except Exception as exc:  # handed to the caller, who raises it
                    item = exc
                if item is None:
                    continue
                await self._wait_for_room()
                self._ready.put(item)
                if isinstance(item, BaseException):
                    return
        finally:
            if not isinstance(item, BaseException):  # cancelled: wake a waiting caller
                self._ready.put(ClosedError("reader is closed"))

    async def _wait_for_room(self) -> None:
        assert self._room is not None
        while self._ready.qsize() >= self.AHEAD:
            self._room.clear()
            with self._lock:
                # a caller reads the flag under this lock after its get: it either sees
                # the flag (and wakes us) or took its batch before we look here
                self._wants_room = True
                if self._ready.qsize() < self.AHEAD:
                    self._wants_room = False
                    return
            await self._room.wait()
            with self._lock:
                self._wants_room = False

    def stop(self) -> None:
        """End the task, from any thread; the batches it holds are dropped, as the
        reader's buffer is at close (none of them was committed), and every caller
        waiting is woken with `ClosedError`."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        while not self._ready.empty():
            self._ready.get_nowait()
        # what wakes a caller waiting in another thread (the task's own ClosedError may
        # have been among what was just dropped); each such caller passes it on
        self._ready.put(ClosedError("reader is closed"))


class Reader:
    """Synchronous reader: iterate messages, or take batches; commit what you processed."""

    def __init__(self, inner: aio.Reader, loop: LoopThread) -> None:
        self._inner = inner
        self._loop = loop
        self._batch: Batch | None = None
        self._pos = 0
        self._handoff = BatchHandoff(inner, loop)

    @property
    def connected(self) -> bool:
        """Whether the reader has a live stream now (False while it reconnects)."""
        return self._inner._core.connected

    @property
    def disconnected_for(self) -> float:
        """Seconds since the stream was lost, 0 while connected."""
        return self._inner._core.disconnected_for

    @property
    def last_error(self) -> WeirError | None:
        """The error behind the latest reconnect (the reader retries for as long as it lives)."""
        return self._inner._core.last_error

    @property
    def reconnects(self) -> int:
        return self._inner._core.reconnects

    @property
    def partitions(self) -> list[PartitionSession]:
        """The partitions this reader holds now (read in the loop thread that changes them)."""

        async def get() -> list[PartitionSession]:
            return self._inner.partitions

        return self._loop.run(get())

    def wait_connected(self, timeout: float | None = 30.0) -> Reader:
        self._loop.run(self._inner.wait_connected(timeout))
        return self

    def receive_batch(self, timeout: float | None = None) -> Batch | None:
        """The next batch (None if none arrives within ``timeout`` seconds; with 0, only
        a batch the reader already holds)."""
        return self._handoff.take(timeout)

    def receive_message(self, timeout: float | None = None) -> Message | None:
        if self._batch is None or self._pos >= len(self._batch.messages):
            self._batch = self.receive_batch(timeout)
            self._pos = 0
            if self._batch is None:
                return None
        msg = self._batch.messages[self._pos]
        self._pos += 1
        return msg

    def __iter__(self) -> Iterator[Message]:
        while True:
            if self._batch is not None and self._pos < len(self._batch):
                msg = self.receive_message()  # what receive_message left of its batch
                if msg is not None:
                    yield msg
                continue
            batch = self.receive_batch()
            if batch is None:
                continue
            # built one at a time as the loop takes them (`Batch.__iter__`); the position
            # is kept so that receive_message after a break goes on from the next one
            self._batch, self._pos = batch, 0
            for msg in batch:
                self._pos += 1
                yield msg

    def commit(self, item: Message | Batch, *, transaction: Transaction | None = None) -> None:
        """Commit up to and including ``item``; returns at once (`close()` waits for the ack).
        With a ``transaction`` the offset moves when it commits (this waits until the
        transaction holds it)."""
        self._inner._core.check_commit(item)
        if transaction is not None:
            transaction.commit_offsets(item, self._inner._core.consumer)
            return
        self._loop.loop.call_soon_threadsafe(self._inner.commit, item)

    def commit_with_ack(self, item: Message | Batch, timeout: float | None = 30.0) -> None:
        self._loop.run(self._inner.commit_with_ack(item, timeout))

    def close(self, timeout: float | None = 10.0) -> None:
        try:
            self._loop.run(self._inner.close(timeout))
        finally:
            self._handoff.stop()

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

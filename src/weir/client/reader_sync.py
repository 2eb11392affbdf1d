"""The synchronous reader (`weir.Reader`), twin of `weir.aio.Reader`: its calls run
in the client's loop thread; messages are handed out one by one from the batch taken."""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from weir.client import aio
from weir.client.loop import LoopThread
from weir.client.messages import Batch, Message
from weir.client.reader import PartitionSession
from weir.errors import WeirError

if TYPE_CHECKING:
    from weir.client.transaction_sync import Transaction


class Reader:
    """Synchronous reader: iterate messages, or take batches; commit what you processed."""

    def __init__(self, inner: aio.Reader, loop: LoopThread) -> None:
        self._inner = inner
        self._loop = loop
        self._batch: Batch | None = None
        self._pos = 0

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
        return self._loop.run(self._inner.receive_batch(timeout))

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
        self._loop.run(self._inner.close(timeout))

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

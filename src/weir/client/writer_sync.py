"""The synchronous writer (`weir.Writer`), twin of `weir.aio.Writer`.

``write()`` only touches the writer's thread-safe buffer, so it costs a local append;
the waits (flush, close, wait_init) run in the client's loop thread, or, for a
caller-driven writer (`weir.client.direct_writer`), drive its socket from the
calling thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
from collections.abc import Mapping, Sequence
from types import TracebackType

from weir.client import aio
from weir.client.deliver_at import with_deliver_at
from weir.client.direct_writer import DirectWriterCore, DrivenFuture
from weir.client.loop import LoopThread
from weir.client.write_columns import ArrowColumn, IntColumn
from weir.client.writer_settings import WriteResult
from weir.errors import WeirError


class Writer:
    """Synchronous writer: `write()` buffers and returns; `flush()` waits for acks."""

    def __init__(self, inner: aio.Writer, loop: LoopThread) -> None:
        self._inner = inner
        self._core = inner._core
        self._loop = loop
        # the caller's calls drive it (`weir.client.direct_writer`), not the loop
        self._direct = self._core if isinstance(self._core, DirectWriterCore) else None
        if self._direct is not None:  # its write() is this one, a Python call less per message
            self.write = self._direct.write  # type: ignore[method-assign]

    @property
    def partition(self) -> int | None:
        return self._core.partition

    @property
    def producer_epoch(self) -> int | None:
        """The topic's producer epoch when this writer connected (it grows each time an
        exclusive producer takes the topic); None before the first connection."""
        return self._core.producer_epoch

    @property
    def last_seq_no(self) -> int | None:
        return self._core.last_seq_no

    @property
    def producer_id(self) -> str:
        """The writer's producer id: the one given, else generated (resends stay safe)."""
        return self._core.producer_id

    @property
    def last_error(self) -> WeirError | None:
        """The error (server down, storage full, overloaded...) behind the latest reconnect;
        the writer keeps retrying until its delivery timeout, this says why it is waiting."""
        return self._core.last_error

    @property
    def reconnects(self) -> int:
        """How many times this writer has reconnected (after a lost stream or a refusal)."""
        return self._core.reconnects

    @property
    def unacknowledged(self) -> int:
        """Messages written and not yet acknowledged (lost, when the writer has failed)."""
        return self._core.unacknowledged

    @property
    def max_message_bytes(self) -> int:
        """The largest message (data plus key) this writer takes: its setting, lowered to
        the server's limit once connected."""
        return self._core.max_message_bytes

    def wait_init(self, timeout: float | None = 30.0) -> Writer:
        if self._direct is not None:
            self._direct.wait_init_sync(timeout)
        else:
            self._loop.run(self._core.wait_init(timeout))
        return self

    def write(
        self,
        data: bytes | str,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: dt.datetime | int | None = None,
        deliver_at: dt.datetime | int | None = None,
        deliver_after: float | dt.timedelta | None = None,
        timeout: float | None = None,
    ) -> None:
        """Buffer a message; returns at once unless the buffer is full (then waits up to ``timeout``)."""
        if deliver_at is not None or deliver_after is not None:  # (a call less per write)
            headers = with_deliver_at(headers, deliver_at, deliver_after)
        self._core.write_threadsafe(data, key, headers, seq_no, created_at, timeout)

    def write_many(
        self,
        values: Sequence[bytes | str] | ArrowColumn,
        *,
        keys: Sequence[bytes | str | None] | ArrowColumn | None = None,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        seq_nos: Sequence[int] | IntColumn | None = None,
        created_at: Sequence[int] | IntColumn | int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Buffer many messages in one call (columns of equal length): for bulk producers.

        ``values`` and ``keys`` may be pyarrow arrays (binary or string; a null key is
        no key) and ``seq_nos`` / ``created_at`` numpy arrays: they are then checked
        once per column and encoded straight from Arrow's buffers, with no Python
        object per message (the same batches, rules and errors as lists)."""
        self._core.write_many_threadsafe(values, keys, headers, seq_nos, created_at, timeout)

    def write_future(
        self,
        data: bytes | str,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: dt.datetime | int | None = None,
        deliver_at: dt.datetime | int | None = None,
        deliver_after: float | dt.timedelta | None = None,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[WriteResult]:
        """Buffer a message; the future resolves with its WriteResult once acknowledged."""
        if deliver_at is not None or deliver_after is not None:  # (a call less per write)
            headers = with_deliver_at(headers, deliver_at, deliver_after)
        fut: concurrent.futures.Future[WriteResult] = (
            concurrent.futures.Future() if self._direct is None else DrivenFuture(self._direct)
        )
        self._core.write_threadsafe(data, key, headers, seq_no, created_at, timeout, fut)
        return fut

    def write_with_result(
        self,
        data: bytes | str,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: dt.datetime | int | None = None,
        deliver_at: dt.datetime | int | None = None,
        deliver_after: float | dt.timedelta | None = None,
        timeout: float | None = None,
    ) -> WriteResult:
        """Write and wait for the ack: partition, offset and seq_no (or skipped)."""
        if deliver_at is not None or deliver_after is not None:  # (a call less per write)
            headers = with_deliver_at(headers, deliver_at, deliver_after)
        fut = self.write_future(
            data, key=key, headers=headers, seq_no=seq_no, created_at=created_at, timeout=timeout
        )
        return fut.result(timeout)

    def flush(self, timeout: float | None = None) -> None:
        if self._direct is not None:
            self._direct.flush_sync(timeout)
        else:
            self._loop.run(self._core.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        if self._core.closed:
            return
        if self._direct is not None:
            self._direct.close_sync(timeout)
        else:
            self._loop.run(self._core.close(timeout))

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if e is None:
            self.close()
            return
        # an error is on its way out already (often this writer's own): do not mask it
        with contextlib.suppress(WeirError):
            self.close()

"""The writer: a bounded buffer, background batching, in-order acks, reconnect and resend.

Follows the YDB SDK guide (seed 001): ``write()`` puts a message in an internal
buffer and returns at once; it blocks only while the buffer (bounded in
messages and bytes) is full, and one call may overshoot the bound so progress
never stalls. A background sender packs buffered messages into batches (the
storage batch format, columnar, encoded in C) and sends several per request;
acks come back in order. ``flush()`` waits for every ack, ``close()`` flushes
and then every call raises ClosedError.

seq_nos are assigned automatically, continuing from the producer's last stored
seq_no that the server reports at init, or supplied by the caller (then they
must grow). Every writer has a producer id (generated when none is given). After
a lost connection or a refusal (partition full, overloaded, storage full) the
writer reconnects with exponential backoff and jitter (a wait that ends early once a
lost connection is back: `Connection.pause`), and resends every unacknowledged batch as
it was; the broker's dedup drops what it already has and reports it as skipped. The
backoff starts over only once an ack shows progress.

Waits are bounded: when messages wait and none has been acknowledged for
``delivery_timeout`` seconds (60 by default), the writer gives up: it fails
with a DeliveryTimeoutError that names the last reason, and ``write()``,
``flush()`` and ``close()`` raise it. A connection refused before the writer
ever got through fails at once. ``on_reconnect`` is called with the reason each
time the writer is about to reconnect.

The same core serves the sync and the asyncio writer: its state is guarded by
a lock, the sender and the ack reader run as tasks in an event loop (the
caller's for `weir.aio`, the client's own thread for `weir.Client`), and a sync
``write()`` touches only the buffer, so it costs a lock and a few appends.
"""

from __future__ import annotations

import asyncio
import contextlib

from weir.client.write_batching import WriteBatching
from weir.client.write_stream import WriteStream
from weir.errors import (
    ClosedError,
    WeirTimeoutError,
)

# how long close() waits for the server to end the half-closed stream (it answers at once)
END_STREAM_WAIT_S = 5.0


class WriterCore(WriteBatching, WriteStream):
    """Shared by `weir.Writer` and `weir.aio.Writer`; see the module docstring.

    Built of `WriterState` (state and failure), `WriteBatching` (the buffer and its
    batches) and `WriteStream` (session, sender, acks); here it starts and stops."""

    def start(self) -> None:
        """Start the background tasks (call in the loop thread)."""
        self._tasks = [
            self.loop.create_task(self._session_loop(), name=f"weir-writer-session-{self.topic}"),
            self.loop.create_task(self._sender(), name=f"weir-writer-sender-{self.topic}"),
        ]
        if self.settings.delivery_timeout is not None:
            self._tasks.append(
                self.loop.create_task(self._watchdog(), name=f"weir-writer-watchdog-{self.topic}")
            )

    async def wait_init(self, timeout: float | None = None) -> None:
        """Wait until the first session is established (partition and last seq_no known)."""
        try:
            await asyncio.wait_for(self._wait_init(), timeout)
        except TimeoutError:
            raise WeirTimeoutError(
                f"writer to {self.topic!r} at {self.conn.endpoint} not connected after "
                f"{timeout:g} s{self._why()}"
            ) from None

    async def _wait_init(self) -> None:
        await self._init_done.wait()  # also set when the writer fails
        self._raise_error()

    # ------------------------------------------------------------------ flush / close

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message written before this call is acknowledged."""
        if self._closed:
            raise ClosedError(f"writer to {self.topic!r} is closed")
        with self._lock:
            target = self._written
        deadline = None if timeout is None else self.loop.time() + timeout
        while True:
            self._raise_error()
            if self._acked >= target:
                return
            self._acked_event.clear()
            remaining = None if deadline is None else deadline - self.loop.time()
            if remaining is not None and remaining <= 0:
                raise WeirTimeoutError(
                    f"flush timed out: {target - self._acked} messages to {self.topic!r} not "
                    f"acknowledged after {timeout:g} s{self._why()}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._acked_event.wait(), remaining)

    async def _end_stream(self) -> None:
        """Half-close the stream and wait until the server ends it: it has then let go of
        the session, so a producer opened right after this close (an exclusive one, or any
        producer after an exclusive one) is not refused for it. Cancelling the stream
        instead left the release to whenever the server saw the cancellation."""
        call = self._call
        if call is None or self._unacked:
            return
        self._half_closed = True
        with contextlib.suppress(Exception):
            await call.done_writing()
            # the server answers at once (nothing is pending); the bound is for a server that
            # does not, which close() then leaves to the cancellation below
            await asyncio.wait_for(self._stream_ended.wait(), END_STREAM_WAIT_S)

    async def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``; the delivery timeout bounds it too), then stop; later
        calls raise ClosedError. Raises the writer's error when it failed with messages
        left unacknowledged (not stored, or not all) and no call or future has carried
        the error to the caller yet."""
        if self._closed:
            return
        with self._lock:
            self._closing = True
        try:
            if self._error is None:
                await self.flush(timeout)
                await self._end_stream()
            elif self._unacked and not self._error_seen:
                self._raise_error()
        finally:
            with self._lock:
                self._closed = True
                self._space.notify_all()
            for t in self._tasks:
                t.cancel()
            for t in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            call = self._call
            if call is not None:
                call.cancel()
            self._fail_pending(ClosedError("writer closed before the message was acknowledged"))

"""The state of a writer (`weir.client.writer.WriterCore`) that its buffering and its
stream share, and how the writer fails: the first error is kept, raised to every
later call and set on every pending future."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any
from uuid import uuid4

from weir.client.connection import Backoff, Connection
from weir.client.delivery import MessageLimit
from weir.client.write_buffer import AnyFuture, Buffer, Request
from weir.client.write_columns import Block
from weir.client.writer_settings import WriterSettings
from weir.errors import (
    ClosedError,
    DeliveryTimeoutError,
    NotOwnerError,
    WeirError,
)

log = logging.getLogger("weir.client.writer")


class WriterState:
    """The writer's buffer, counters, stream state and error (see `weir.client.writer`)."""

    def __init__(
        self,
        conn: Connection,
        topic: str,
        settings: WriterSettings,
        loop: asyncio.AbstractEventLoop,
        routed: bool = False,
    ) -> None:
        self.conn = conn
        # where the write streams go: ``conn``, or (cluster mode) the connection to the
        # broker that owns the partition (`weir.client.owners`)
        self.target = conn
        # one of a routing writer's per-partition cores (see weir.client.routing): no pin,
        # dedup per (producer, partition); the partition of its first session is kept
        self.routed = routed
        self.topic = topic
        self.settings = settings
        # Every writer is a producer: without an id given, a fresh one still lets the
        # broker drop what a resend after a reconnect repeats (with or without partition=).
        self.producer_id: str = settings.producer_id or uuid4().hex
        self.loop = loop
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._buf = Buffer()
        # Arrow columns from write_many, older than anything in _buf (see write_columns)
        self._blocks: deque[Block] = deque()
        self._buf_bytes = 0
        self._unacked = 0
        self._unacked_bytes = 0
        self._written = 0
        self._acked = 0
        self._manual_seq: bool | None = None
        self._last_manual_seq = -1
        self._next_seq = 1
        self._sender_idle = True
        self._error: WeirError | None = None
        self._error_seen = False  # raised to the caller, or set on a future
        self._closed = False
        self._closing = False
        # loop-thread state
        self._wake = asyncio.Event()
        self._space_event = asyncio.Event()
        self._acked_event = asyncio.Event()
        self._ready = asyncio.Event()
        self._inflight: deque[Request] = deque()
        self._inflight_event = asyncio.Event()
        self._call: Any = None
        self._call_id = 0
        self._init_done = asyncio.Event()
        self._half_closed = False  # close() sent done_writing: end, do not reconnect
        self._stream_ended = asyncio.Event()  # the stream close() half-closed is over
        self.partition: int | None = settings.partition
        self.generation: int | None = None
        self.last_seq_no: int | None = None
        self.session_id = ""
        self.producer_epoch: int | None = None  # the topic's, from the first init
        self.partitions: int | None = None  # the topic's partition count, from the init
        self.reconnects = 0
        self.last_error: WeirError | None = None  # the retryable error behind the latest reconnect
        self._tasks: list[asyncio.Task[None]] = []
        self._backoff = Backoff()
        self.limit = MessageLimit(settings.max_message_bytes)
        self._inited = threading.Event()  # the first init, or the writer failed
        # called (in the loop) with the error the core failed with: a routing writer
        # re-learns the partition count when a partition it wrote to is unknown
        self.on_failed: Callable[[WeirError], None] | None = None

    def _wrote_threadsafe(self, wake: bool) -> None:
        """A thread's write has been buffered; ``wake``: the sender idles and must be woken.
        (`weir.client.direct_writer` sends from the caller's thread here instead.)"""
        if wake:
            self.loop.call_soon_threadsafe(self._wake.set)

    def _wait_space_locked(self, remaining: float | None) -> None:
        """Wait (the lock held) until acks make room in the buffer, or ``remaining`` passes."""
        self._space.wait(remaining)

    def _why(self) -> str:
        """The last error behind a wait, for messages: "; last error: ..." or nothing."""
        return f"; last error: {self.last_error.message}" if self.last_error is not None else ""

    def _raise_error(self) -> None:
        """Raise the error the writer failed with, if it did (the caller has seen it then).

        The same exception object is raised on every later call: its old traceback is
        dropped each time, or a caller retrying in a loop grows it without bound (a soak
        process reached 23 GB that way)."""
        if self._error is not None:
            self._error_seen = True
            raise self._error.with_traceback(None)

    def _check_usable(self) -> None:
        self._raise_error()
        if self._closed or self._closing:
            raise ClosedError(f"writer to {self.topic!r} is closed")

    @property
    def max_message_bytes(self) -> int:
        return self.limit.bytes

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def unacknowledged(self) -> int:
        return self._unacked

    def _lost(self, err: WeirError, endpoint: str | None) -> float | None:
        """The writer's stream to ``endpoint`` was lost with ``err`` (both kinds of stream:
        the loop's `weir.client.write_stream` and the caller's `weir.client.direct_writer`):
        fail the writer on a fatal error or when the server was never reached (None), else
        count the reconnect, tell ``on_reconnect`` and return the backoff before the next
        stream, which resends every unacknowledged request in order. None also once closed."""
        fast = self.target.unreachable(err, endpoint)
        if fast is not None:
            err = fast
        if not err.retryable or fast is not None:
            self.last_error = err
            self._fail(err)
            return None
        if self._closed:
            return None
        self.reconnects += 1
        self.last_error = err
        delay = self._backoff.next_delay()
        log.warning("writer to %s: %s; reconnecting within %.2f s", self.topic, err.message, delay)
        self._notify_reconnect(err)
        return delay

    def _delivery_timeout(self, unacked: int, limit: float, endpoint: str) -> DeliveryTimeoutError:
        """The error a writer gives up with: ``unacked`` messages waited ``limit`` seconds
        (``delivery_timeout``) with none acknowledged; names the last reason."""
        reason = self.last_error
        why = (
            f"last error: {reason.message}"
            if reason is not None
            else f"the server at {endpoint} did not answer"
        )
        return DeliveryTimeoutError(
            f"writer to {self.topic!r} gave up: {unacked} messages not acknowledged "
            f"for {limit:g} s (delivery_timeout); {why}",
            reason,
        )

    def _notify_reconnect(self, err: WeirError) -> None:
        cb = self.settings.on_reconnect
        if cb is None:
            return
        try:
            cb(err)
        except Exception:
            log.exception("on_reconnect callback of the writer to %s failed", self.topic)

    def _follow_due(self, err: WeirError) -> bool:
        """Cluster mode: after ``err`` the partition's owner must be looked up (a not-owner
        answer, or a failure of an owner's broker; the client's own broker failing too,
        when other brokers are known to ask: `weir.client.owners`)."""
        return (
            isinstance(err, NotOwnerError)
            or self.target is not self.conn
            or self.conn.can_fail_over
        )

    def _owner_partition(self, err: WeirError) -> int | None:
        """The partition whose owner to look up (None: the topic's first)."""
        if self.settings.partition is not None:
            return self.settings.partition
        if self.partition is not None:
            return self.partition
        if isinstance(err, NotOwnerError) and err.partition >= 0:
            return err.partition
        return None

    def _followed(self, before: Connection, found: Connection | None, part: int | None) -> bool:
        """Send the next stream to ``found`` (the owner; None: nobody owns it now, back to
        the client's own broker). True when that is another broker than ``before`` (go at
        once), False when it is the same (back off)."""
        self.target = found or self.conn
        if self.target is not before:
            log.info(
                "writer to %s: partition %s is served at %s now",
                self.topic,
                part,
                self.target.endpoint,
            )
        # a fresh owner gets the stream at once; the backoff still grows (reset by an
        # ack), so brokers disagreeing about the owner cannot make a tight loop
        return self.target is not before and self._backoff.attempt <= 3

    def _fail(self, err: WeirError) -> None:
        first = self._error is None
        if first:
            self._error = err
        self._ready.clear()
        self._fail_pending(err)
        with self._lock:
            self._space.notify_all()
        self._space_event.set()
        self._acked_event.set()
        self._init_done.set()
        self._inited.set()
        if first and self.on_failed is not None:
            self.on_failed(err)

    def _fail_pending(self, err: WeirError) -> None:
        futures: list[AnyFuture | None] = []
        for req in self._inflight:
            for sent in req.batches:
                if sent.futures:
                    futures.extend(sent.futures)
        with self._lock:
            futures.extend(self._buf.futures.values())
        for f in futures:
            if f is not None and not f.done():
                f.set_exception(err)
                if err is self._error:
                    self._error_seen = True

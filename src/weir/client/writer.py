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
writer reconnects with exponential backoff and jitter, and resends every
unacknowledged batch as it was; the broker's dedup drops what it already has and
reports it as skipped. The backoff starts over only once an ack shows progress.

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
import logging
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Mapping, Sequence
from itertools import accumulate, pairwise
from time import time as _time
from typing import Any
from uuid import uuid4

import grpc

from weir.client.chunks import split as split_chunks
from weir.client.connection import Backoff, Connection, error_from_rpc
from weir.client.delivery import MessageLimit, StallClock
from weir.client.write_buffer import AnyFuture, Buffer, Request, Sent, as_bytes
from weir.client.writer_settings import WriteResult, WriterSettings
from weir.errors import (
    BadRequestError,
    ClosedError,
    DeliveryTimeoutError,
    UnavailableError,
    WeirError,
    WeirTimeoutError,
    error_from_code,
)
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.wire import RawWriteRequest
from weir.storage.batch import encode_batch

log = logging.getLogger("weir.client.writer")


class WriterCore:
    """Shared by `weir.Writer` and `weir.aio.Writer`; see the module docstring."""

    def __init__(
        self,
        conn: Connection,
        topic: str,
        settings: WriterSettings,
        loop: asyncio.AbstractEventLoop,
        routed: bool = False,
    ) -> None:
        self.conn = conn
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

    # ------------------------------------------------------------------ start / stop

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

    def _why(self) -> str:
        """The last error behind a wait, for messages: "; last error: ..." or nothing."""
        return f"; last error: {self.last_error.message}" if self.last_error is not None else ""

    async def _wait_init(self) -> None:
        await self._init_done.wait()  # also set when the writer fails
        self._raise_error()

    def _raise_error(self) -> None:
        """Raise the error the writer failed with, if it did (the caller has seen it then).

        The same exception object is raised on every later call: its old traceback is
        dropped each time, or a caller retrying in a loop grows it without bound (a soak
        process reached 23 GB that way)."""
        if self._error is not None:
            self._error_seen = True
            raise self._error.with_traceback(None)

    # ------------------------------------------------------------------ writing

    def _check_usable(self) -> None:
        self._raise_error()
        if self._closed or self._closing:
            raise ClosedError(f"writer to {self.topic!r} is closed")

    def _prepare(
        self,
        data: Any,
        key: Any,
        headers: Mapping[str, str] | None,
        seq_no: int | None,
        created_at: Any,
    ) -> tuple[bytes, bytes, int, int]:
        d = as_bytes(data, "data")
        k = b"" if key is None else as_bytes(key, "key")
        size = len(d) + len(k)
        if headers is not None and not isinstance(headers, Mapping):
            raise BadRequestError(
                f"headers must be a mapping of str to str, got {type(headers).__name__}"
            )
        if created_at is None:
            ms = int(time.time() * 1000)
        elif isinstance(created_at, int | float):
            ms = int(created_at)
        elif hasattr(created_at, "timestamp"):
            ms = int(created_at.timestamp() * 1000)
        else:
            raise BadRequestError("created_at must be a datetime or ms since epoch")
        if seq_no is not None and (not isinstance(seq_no, int) or seq_no < 0):
            raise BadRequestError(f"seq_no must be a non-negative int, got {seq_no!r}")
        return d, k, size, ms

    @property
    def max_message_bytes(self) -> int:
        return self.limit.bytes

    def _limit_wait(self, timeout: float | None) -> float | None:
        return timeout if timeout is not None else self.settings.delivery_timeout

    def _limit_unknown(self, size: int, waited: float | None) -> WeirError:
        if self._error is not None:
            self._error_seen = True
            return self._error
        return WeirTimeoutError(
            f"writer to {self.topic!r} at {self.conn.endpoint} not connected after {waited:g} s: "
            f"the server's message size limit, which a message of {size} bytes needs, is "
            f"unknown{self._why()}"
        )

    def _await_limit_threadsafe(self, size: int, timeout: float | None) -> None:
        """A message bigger than the default limit waits for the server's (a thread's call)."""
        wait = self._limit_wait(timeout)
        if not self._inited.wait(wait) or self._error is not None:
            raise self._limit_unknown(size, wait)

    async def _await_limit_async(self, size: int, timeout: float | None) -> None:
        wait = self._limit_wait(timeout)
        try:
            await asyncio.wait_for(self._init_done.wait(), wait)
        except TimeoutError:
            raise self._limit_unknown(size, wait) from None
        self._raise_error()

    def _append(
        self,
        d: bytes,
        k: bytes,
        headers: Mapping[str, str] | None,
        seq_no: int | None,
        ms: int,
        size: int,
        fut: AnyFuture | None,
    ) -> bool:
        """Append under the lock; True when the sender must be woken."""
        manual = seq_no is not None
        if self._manual_seq is None:
            self._manual_seq = manual
        elif self._manual_seq != manual:
            raise BadRequestError(
                "either give every message a seq_no or none (automatic numbering)"
            )
        b = self._buf
        if manual:
            assert seq_no is not None
            if seq_no <= self._last_manual_seq:
                raise BadRequestError(
                    f"seq_no {seq_no} is not above the previous {self._last_manual_seq}"
                )
            self._last_manual_seq = seq_no
            b.seqs.append(seq_no)
        i = len(b.data)
        b.data.append(d)
        b.created.append(ms)
        b.sizes.append(size)
        if k:
            b.keys[i] = k
        if headers:
            b.headers[i] = headers
        if fut is not None:
            b.futures[i] = fut
        self._buf_bytes += size
        self._unacked += 1
        self._unacked_bytes += size
        self._written += 1
        if self._sender_idle:
            self._sender_idle = False
            return True
        return False

    def precheck(self, size: int, seq_no: int | None) -> None:
        """Refuse now a message that the limit known so far refuses: too big without
        chunking, or to be chunked yet given a seq_no (chunks need automatic ones)."""
        if size <= self.limit.bytes or self.limit.must_wait(size):
            return
        if not self.settings.chunking:
            self.limit.check(size)
        elif seq_no is not None:
            raise BadRequestError(
                f"a message of {size} bytes is over the limit of {self.limit.bytes} and would be "
                "chunked; chunked messages need automatic seq_nos (give none)"
            )

    def _pieces(
        self, d: bytes, k: bytes, headers: Mapping[str, str] | None, seq_no: int | None, size: int
    ) -> list[tuple[bytes, Mapping[str, str] | None, int]]:
        """The message as it is, or (chunking on, over the limit) its chunks: (data, headers, size)."""
        self.precheck(size, seq_no)
        if size <= self.limit.bytes:
            return [(d, headers, size)]
        room = self.limit.bytes - len(k)
        if room <= 0:
            self.limit.check(size)  # the key alone is too big: refused
        return [(c, h, len(c) + len(k)) for c, h in split_chunks(d, room, headers)]

    def _append_pieces(
        self,
        pieces: list[tuple[bytes, Mapping[str, str] | None, int]],
        k: bytes,
        seq_no: int | None,
        ms: int,
        fut: AnyFuture | None,
    ) -> bool:
        """Append a message or all its chunks (consecutive: one seq_no each) under the lock;
        the future goes with the last chunk. True when the sender must be woken."""
        if len(pieces) == 1:
            d, h, size = pieces[0]
            return self._append(d, k, h, seq_no, ms, size, fut)
        wake = False
        last = len(pieces) - 1
        for i, (d, h, size) in enumerate(pieces):
            wake = self._append(d, k, h, None, ms, size, fut if i == last else None) or wake
        return wake

    def _full(self) -> bool:
        s = self.settings
        return self._unacked > 0 and (
            self._unacked >= s.max_buffer_messages or self._unacked_bytes >= s.max_buffer_bytes
        )

    def write_threadsafe(
        self,
        data: Any,
        key: Any = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: Any = None,
        timeout: float | None = None,
        fut: AnyFuture | None = None,
    ) -> None:
        """Buffer one message from any thread but the loop's; blocks while the buffer is full."""
        if (
            type(data) is bytes
            and key is None
            and headers is None
            and seq_no is None
            and created_at is None
            and fut is None
            and len(data) <= self.limit.bytes
        ):
            # The common call, inlined: a lock and three appends.
            ms = int(_time() * 1000)
            size = len(data)
            with self._lock:
                ok = (
                    self._error is None
                    and not self._closing
                    and not self._closed
                    and self._manual_seq is not True
                    and not self._full()
                )
                if ok:
                    self._manual_seq = False
                    b = self._buf
                    b.data.append(data)
                    b.created.append(ms)
                    b.sizes.append(size)
                    self._buf_bytes += size
                    self._unacked += 1
                    self._unacked_bytes += size
                    self._written += 1
                    wake = self._sender_idle
                    self._sender_idle = False
            if ok:
                if wake:
                    self.loop.call_soon_threadsafe(self._wake.set)
                return
        d, k, size, ms = self._prepare(data, key, headers, seq_no, created_at)
        if self.limit.must_wait(size):
            self._await_limit_threadsafe(size, timeout)
        pieces = self._pieces(d, k, headers, seq_no, size)
        with self._lock:
            self._check_usable()
            if self._full():
                deadline = None if timeout is None else time.monotonic() + timeout
                while self._full():
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise WeirTimeoutError(
                            f"writer buffer full ({self._unacked} messages, {self._unacked_bytes} bytes) "
                            f"for {timeout} s"
                        )
                    self._space.wait(remaining)
                    self._check_usable()
            wake = self._append_pieces(pieces, k, seq_no, ms, fut)
        if wake:
            self.loop.call_soon_threadsafe(self._wake.set)

    def _prepare_many(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Mapping[str, str] | None] | None,
        seq_nos: Sequence[int] | None,
        created_at: Sequence[int] | int | None,
    ) -> tuple[list[bytes], list[bytes] | None, list[int], list[int]]:
        n = len(values)
        for name, col in (("keys", keys), ("headers", headers), ("seq_nos", seq_nos)):
            if col is not None and len(col) != n:
                raise BadRequestError(f"{name} has {len(col)} entries for {n} values")
        data = [v if type(v) is bytes else as_bytes(v, "data") for v in values]
        ks = [b"" if k is None else as_bytes(k, "key") for k in keys] if keys is not None else None
        sizes = list(map(len, data))
        if ks is not None:
            sizes = [a + len(b) for a, b in zip(sizes, ks, strict=True)]
        if created_at is None:
            created = [int(_time() * 1000)] * n
        elif isinstance(created_at, int):
            created = [created_at] * n
        else:
            if len(created_at) != n:
                raise BadRequestError(f"created_at has {len(created_at)} entries for {n} values")
            created = [int(c) for c in created_at]
        if headers is not None:
            for h in headers:
                if h is not None and not isinstance(h, Mapping):
                    raise BadRequestError(
                        f"headers must be mappings of str to str, got {type(h).__name__}"
                    )
        if seq_nos is not None:
            if any(not isinstance(s, int) or s < 0 for s in seq_nos):
                raise BadRequestError("seq_nos must be non-negative ints")
            if any(a >= b for a, b in pairwise(seq_nos)):
                raise BadRequestError("seq_nos must be strictly increasing")
        return data, ks, sizes, created

    def _append_many(
        self,
        data: list[bytes],
        ks: list[bytes] | None,
        headers: Sequence[Mapping[str, str] | None] | None,
        seq_nos: Sequence[int] | None,
        created: list[int],
        sizes: list[int],
    ) -> bool:
        """Append a column of messages under the lock; True when the sender must be woken."""
        manual = seq_nos is not None
        if self._manual_seq is None:
            self._manual_seq = manual
        elif self._manual_seq != manual:
            raise BadRequestError(
                "either give every message a seq_no or none (automatic numbering)"
            )
        b = self._buf
        if manual:
            assert seq_nos is not None
            if seq_nos[0] <= self._last_manual_seq:
                raise BadRequestError(
                    f"seq_no {seq_nos[0]} is not above the previous {self._last_manual_seq}"
                )
            self._last_manual_seq = seq_nos[-1]
            b.seqs.extend(seq_nos)
        base = len(b.data)
        b.data.extend(data)
        b.created.extend(created)
        b.sizes.extend(sizes)
        if ks is not None:
            b.keys.update((base + i, k) for i, k in enumerate(ks) if k)
        if headers is not None:
            b.headers.update((base + i, h) for i, h in enumerate(headers) if h)
        total = sum(sizes)
        self._buf_bytes += total
        self._unacked += len(data)
        self._unacked_bytes += total
        self._written += len(data)
        wake = self._sender_idle
        self._sender_idle = False
        return wake

    def write_many_threadsafe(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        seq_nos: Sequence[int] | None = None,
        created_at: Sequence[int] | int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Buffer a column of messages at once (may overshoot the bound, like one write)."""
        if not values:
            return
        data, ks, sizes, created = self._prepare_many(values, keys, headers, seq_nos, created_at)
        biggest = max(sizes)
        if self.limit.must_wait(biggest):
            self._await_limit_threadsafe(biggest, timeout)
        if self.settings.chunking and biggest > self.limit.bytes:
            for i, v in enumerate(data):  # one by one: the big ones are chunked
                self.write_threadsafe(v, *_row(i, ks, headers, seq_nos, created), timeout)
            return
        self.limit.check(biggest)
        with self._lock:
            self._check_usable()
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._full():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise WeirTimeoutError(f"writer buffer full for {timeout} s")
                self._space.wait(remaining)
                self._check_usable()
            wake = self._append_many(data, ks, headers, seq_nos, created, sizes)
        if wake:
            self.loop.call_soon_threadsafe(self._wake.set)

    async def write_many_async(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        seq_nos: Sequence[int] | None = None,
        created_at: Sequence[int] | int | None = None,
        timeout: float | None = None,
    ) -> None:
        if not values:
            return
        data, ks, sizes, created = self._prepare_many(values, keys, headers, seq_nos, created_at)
        biggest = max(sizes)
        if self.limit.must_wait(biggest):
            await self._await_limit_async(biggest, timeout)
        if self.settings.chunking and biggest > self.limit.bytes:
            for i, v in enumerate(data):  # one by one: the big ones are chunked
                await self.write_async(v, *_row(i, ks, headers, seq_nos, created), timeout)
            return
        self.limit.check(biggest)
        deadline = None if timeout is None else self.loop.time() + timeout
        while True:
            with self._lock:
                self._check_usable()
                if not self._full():
                    wake = self._append_many(data, ks, headers, seq_nos, created, sizes)
                    break
                self._space_event.clear()
            remaining = None if deadline is None else deadline - self.loop.time()
            if remaining is not None and remaining <= 0:
                raise WeirTimeoutError(f"writer buffer full for {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._space_event.wait(), remaining)
        if wake:
            self._wake.set()

    async def write_async(
        self,
        data: Any,
        key: Any = None,
        headers: Mapping[str, str] | None = None,
        seq_no: int | None = None,
        created_at: Any = None,
        timeout: float | None = None,
        fut: AnyFuture | None = None,
    ) -> None:
        """Buffer one message from the loop thread; waits while the buffer is full."""
        d, k, size, ms = self._prepare(data, key, headers, seq_no, created_at)
        if self.limit.must_wait(size):
            await self._await_limit_async(size, timeout)
        pieces = self._pieces(d, k, headers, seq_no, size)
        deadline = None if timeout is None else self.loop.time() + timeout
        while True:
            with self._lock:
                self._check_usable()
                if not self._full():
                    wake = self._append_pieces(pieces, k, seq_no, ms, fut)
                    break
                self._space_event.clear()
            remaining = None if deadline is None else deadline - self.loop.time()
            if remaining is not None and remaining <= 0:
                raise WeirTimeoutError(f"writer buffer full for {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._space_event.wait(), remaining)
        if wake:
            self._wake.set()

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

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def unacknowledged(self) -> int:
        return self._unacked

    # ------------------------------------------------------------------ background

    async def _session_loop(self) -> None:
        backoff = self._backoff
        while not self._closed:
            call = None
            try:
                call = self.conn.stream_write()
                init = pb.WriteInit(topic=self.topic, producer_id=self.producer_id)
                if self.settings.partition is not None:
                    init.partition = self.settings.partition
                elif self.routed and self.partition is not None:
                    init.partition = self.partition  # reconnect: the home stays where it was
                init.routed = self.routed
                init.access_mode = int(self.settings.access_mode)  # type: ignore[assignment]
                if self.producer_epoch is not None and self.settings.access_mode.exclusive:
                    init.producer_epoch = self.producer_epoch  # fenced if it grew since
                await call.write(pb.WriteRequest(init=init))
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    raise UnavailableError("server closed the write stream during init")
                kind = resp.WhichOneof("kind")
                if kind == "error":
                    raise error_from_code(resp.error.code, resp.error.message)
                if kind != "init":
                    raise UnavailableError(f"unexpected {kind} before init result")
                self.conn.ever_connected = True
                self._on_init(resp.init)
                self._call_id += 1
                self._call = call
                self._ready.set()
                self._init_done.set()
                self._inited.set()
                self._wake.set()
                # a sender parked on a full in-flight window (all sent on the old stream,
                # never to be acked) must wake up to resend them on this one
                self._inflight_event.set()
                # no backoff.reset() here: refusals (partition full, overloaded) come after
                # the init; the first ack on this stream resets it (see _on_ack)
                await self._receive(call)
                raise UnavailableError("server ended the write stream")
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except (WeirError, grpc.aio.AioRpcError) as exc:
                err = error_from_rpc(exc) if isinstance(exc, grpc.aio.AioRpcError) else exc
                self._ready.clear()
                self._call = None
                if call is not None:
                    call.cancel()
                fast = self.conn.unreachable(err)
                if fast is not None:
                    err = fast
                if not err.retryable or fast is not None:
                    self.last_error = err
                    self._fail(err)
                    return
                if self._closed:
                    return
                self.reconnects += 1
                self.last_error = err
                delay = backoff.next_delay()
                log.warning(
                    "writer to %s: %s; reconnecting in %.2f s", self.topic, err.message, delay
                )
                self._notify_reconnect(err)
                await asyncio.sleep(delay)
            except Exception as exc:  # a bug: fail loudly rather than hang
                log.exception("writer session failed")
                self._fail(UnavailableError(f"writer failed: {exc!r}"))
                return

    def _on_init(self, r: Any) -> None:
        self.partition = r.partition
        self.generation = r.generation
        self.session_id = r.session_id
        self.producer_epoch = r.producer_epoch
        self.partitions = r.partitions or None
        self.last_seq_no = r.last_seq_no if r.HasField("last_seq_no") else None
        if not self._manual_seq:
            self._next_seq = max(self._next_seq, (self.last_seq_no or 0) + 1)
        self.limit.learn(r.max_message_bytes)

    def _notify_reconnect(self, err: WeirError) -> None:
        cb = self.settings.on_reconnect
        if cb is None:
            return
        try:
            cb(err)
        except Exception:
            log.exception("on_reconnect callback of the writer to %s failed", self.topic)

    async def _watchdog(self) -> None:
        """Give up when messages wait and none is acknowledged for ``delivery_timeout``."""
        limit = self.settings.delivery_timeout
        assert limit is not None
        tick = min(1.0, limit / 10)
        clock = StallClock()
        while not self._closed and self._error is None:
            await asyncio.sleep(tick)
            with self._lock:
                unacked, acked = self._unacked, self._acked
            if clock.observe(unacked, acked, self.loop.time()) >= limit:
                reason = self.last_error
                why = (
                    f"last error: {reason.message}"
                    if reason is not None
                    else f"the server at {self.conn.endpoint} did not answer"
                )
                self._give_up(
                    DeliveryTimeoutError(
                        f"writer to {self.topic!r} gave up: {unacked} messages not acknowledged "
                        f"for {limit:g} s (delivery_timeout); {why}",
                        reason,
                    )
                )
                return

    def _give_up(self, err: WeirError) -> None:
        """Fail the writer and stop reconnecting (from a task of its own)."""
        self._fail(err)
        me = asyncio.current_task()
        for t in self._tasks:
            if t is not me:
                t.cancel()
        call, self._call = self._call, None
        if call is not None:
            call.cancel()

    async def _receive(self, call: Any) -> None:
        while True:
            resp = await call.read()
            if resp is grpc.aio.EOF:
                return
            kind = resp.WhichOneof("kind")
            if kind == "ack":
                self._on_ack(resp.ack.acks)
            elif kind == "error":
                raise error_from_code(resp.error.code, resp.error.message)

    def _on_ack(self, acks: Any) -> None:
        if not self._inflight:
            raise UnavailableError("ack for nothing in flight")
        req = self._inflight.popleft()
        if len(acks) != len(req.batches):
            raise UnavailableError(f"ack for {len(acks)} batches, request had {len(req.batches)}")
        n = nbytes = 0
        part = self.partition if self.partition is not None else -1
        for sent, ack in zip(req.batches, acks, strict=True):
            n += sent.count
            nbytes += sent.nbytes
            if sent.futures is not None:
                for i, fut in enumerate(sent.futures):
                    if fut is None or fut.done():
                        continue
                    seq = sent.seqs[i] if sent.seqs is not None else sent.first_seq + i
                    if i < ack.skipped:
                        fut.set_result(WriteResult(part, None, seq, True))
                    else:
                        fut.set_result(WriteResult(part, ack.offset + i - ack.skipped, seq, False))
        self._backoff.reset()  # progress: the next failure starts the backoff over
        with self._lock:
            self._unacked -= n
            self._unacked_bytes -= nbytes
            self._acked += n
            self._space.notify_all()
        self._space_event.set()
        self._acked_event.set()
        self._inflight_event.set()

    def _take(self) -> list[Sent]:
        """Encode what is buffered into batches for one request (called in the loop thread)."""
        s = self.settings
        with self._lock:
            b = self._buf
            if not b.data:
                return []
            cum = list(accumulate(b.sizes))
            n = max(1, bisect_right(cum, s.max_request_bytes))  # how many fit one request
            if n == len(b.data):
                taken, self._buf = b, Buffer()
            else:
                taken = b.split(n)
                cum = cum[:n]
            self._buf_bytes -= cum[-1]
            manual = bool(self._manual_seq)
            first_auto = self._next_seq
            if not manual:
                self._next_seq += n
        out: list[Sent] = []
        start = 0
        base = 0
        while start < n:
            # one batch: up to max_batch_bytes and max_batch_messages, at least one message
            end = bisect_right(cum, base + s.max_batch_bytes, lo=start)
            end = min(max(end, start + 1), start + s.max_batch_messages, n)
            whole = start == 0 and end == n
            seqs = taken.seqs[start:end] if manual else None
            first_seq = seqs[0] if seqs else first_auto + start
            idx = range(start, end)
            encoded = encode_batch(
                taken.data if whole else taken.data[start:end],
                producer_id=self.producer_id,
                first_seq_no=first_seq,
                seq_nos=seqs,
                created_at=taken.created if whole else taken.created[start:end],
                keys=[taken.keys.get(i, b"") for i in idx] if taken.keys else None,
                headers=[taken.headers.get(i) for i in idx] if taken.headers else None,
                codec=s.codec,
            )
            futures = [taken.futures.get(i) for i in idx] if taken.futures else None
            out.append(Sent(encoded, end - start, cum[end - 1] - base, first_seq, seqs, futures))
            base = cum[end - 1]
            start = end
        return out

    async def _sender(self) -> None:
        s = self.settings
        try:
            while True:
                with self._lock:
                    empty = not self._buf.data
                    if empty:
                        self._sender_idle = True
                        self._wake.clear()
                resend = self._ready.is_set() and any(
                    r.sent_on != self._call_id for r in self._inflight
                )
                if empty and not resend:
                    await self._wake.wait()
                    continue
                if not self._ready.is_set():
                    await self._ready.wait()
                    continue
                call, call_id = self._call, self._call_id
                # resend what the current stream has not seen (after a reconnect), in order
                for req in list(self._inflight):
                    if req.sent_on != call_id:
                        req.sent_on = call_id
                        await self._send(call, req)
                if empty:
                    continue
                if len(self._inflight) >= s.max_inflight_requests:
                    self._inflight_event.clear()
                    await self._inflight_event.wait()
                    continue
                if s.linger_ms and self._buf_bytes < s.max_batch_bytes:
                    await asyncio.sleep(s.linger_ms / 1000)
                batches = self._take()
                if not batches:
                    continue
                req = Request(batches, call_id)
                self._inflight.append(req)
                await self._send(call, req)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("writer sender failed")
            self._fail(UnavailableError(f"writer sender failed: {exc!r}"))

    async def _send(self, call: Any, req: Request) -> None:
        try:
            await call.write(RawWriteRequest([b.data for b in req.batches]))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the writer is closing
            # grpc.aio raises CancelledError on a call the session loop cancelled
            self._ready.clear()
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
            # the stream broke; the session loop reconnects and we resend
            log.debug("write stream broke while sending: %r", exc)
            self._ready.clear()

    def _fail(self, err: WeirError) -> None:
        if self._error is None:
            self._error = err
        self._ready.clear()
        self._fail_pending(err)
        with self._lock:
            self._space.notify_all()
        self._space_event.set()
        self._acked_event.set()
        self._init_done.set()
        self._inited.set()

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


def _row(
    i: int,
    keys: list[bytes] | None,
    headers: Sequence[Mapping[str, str] | None] | None,
    seq_nos: Sequence[int] | None,
    created: list[int],
) -> tuple[Any, Any, Any, Any]:
    """Message ``i`` of write_many's columns as write()'s key, headers, seq_no, created_at."""
    return (
        keys[i] if keys is not None and keys[i] else None,
        headers[i] if headers is not None else None,
        seq_nos[i] if seq_nos is not None else None,
        created[i],
    )

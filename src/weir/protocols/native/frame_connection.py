"""The native TCP port's connections, read as frames straight from the socket.

An `asyncio.StreamReader` copies every byte twice after the socket's own copy: into its
buffer as it arrives, then out of it by ``readexactly`` (which slices, then converts),
on top of the transport's fresh ``bytes`` for each receive. For 10 KB messages those
copies were 17% of the server's samples (docs/performance.md). A `FrameConnection` is an
`asyncio.BufferedProtocol`: the transport receives into its buffer, a small frame is
copied out once, and a large frame (at least `DIRECT_FRAME_BYTES`) is received into a
buffer of its own, the bytes the frame itself is, with no copy at all (a frame over
`DIRECT_PART_BYTES` in parts, joined once).

The reading side keeps `StreamReader`'s shape for the front (`read_magic`,
`read_frame`, `discard`) and its flow control (reading pauses while the buffer is full
and unread); the writing side is a plain `asyncio.StreamWriter` over the same
transport, so the front writes, drains and closes as before.

The SDK reads its native TCP streams the same way (`weir.client.tcp_call`): a
connection made with no ``serve`` is the client's, read by the task that made it; its
large frames, read data the messages of a batch point into, are received in one part up
to the size it allows.

The Kafka front's `weir.protocols.kafka.framing.FrameReader` receives the same way but
splits frames as they arrive and hands each to a callback. This one reads lazily, a
frame when the front asks for one, because each read has its own limit: the hello,
before the client is authenticated, may be 64 KiB, and a longer length is refused
before a byte of it is taken, though the client pipelined its next frames behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, cast

from weir.errors import MessageTooLargeError, UnavailableError
from weir.protocols.native.framing import HEADER, MAGIC, FrameError

# the buffer small frames are received into (and copied out of, one by one): it starts
# at FIRST_BYTES when the first bytes come and grows to CHUNK_BYTES when a frame needs it
FIRST_BYTES = 16 << 10
CHUNK_BYTES = 256 << 10
# a frame at least this big, not in the buffer yet, is received into a buffer of its own
DIRECT_FRAME_BYTES = 64 << 10
# ... in parts of at most this many bytes (not below CHUNK_BYTES), each allocated when the
# part before it is full, joined at the end (one copy, for frames over it only): a peer
# that sends a frame's length and no more makes the server hold one part
DIRECT_PART_BYTES = 4 << 20

Serve = Callable[["FrameConnection", asyncio.StreamWriter], Coroutine[Any, Any, None]]


class FrameConnection(asyncio.BufferedProtocol):
    """One connection: frames in (see the module docstring), a StreamWriter out.

    Not an `asyncio.streams.FlowControlMixin`: that is an `asyncio.Protocol`, and a loop
    may then feed it ``data_received`` (uvloop does) instead of its buffers; the few
    things a StreamWriter asks of its protocol are here instead."""

    def __init__(self, serve: Serve | None, over_ssl: bool, part_bytes: int | None = None) -> None:
        self._serve = serve
        self._over_ssl = over_ssl
        # a large frame's parts: DIRECT_PART_BYTES unless given (not below CHUNK_BYTES)
        self._part_bytes = part_bytes or DIRECT_PART_BYTES
        self.writer: asyncio.StreamWriter | None = None  # set once connected
        self._buf = bytearray()  # allocated when the first bytes come
        self._start = 0  # unread bytes are _buf[_start:_end]
        self._end = 0
        # the large frame being received straight into its parts (see `_read_direct`)
        self._direct: bytearray | None = None  # the part being filled
        self._direct_filled = 0
        self._direct_left = 0  # the frame's bytes after that part
        self._direct_parts: list[bytearray] = []  # its parts filled before that one
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._transport: asyncio.Transport | None = None
        # the writing side's flow control, for StreamWriter.drain
        self._writing_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closed: asyncio.Future[None] | None = None  # done once the connection is lost
        # the serving task: the loop keeps only a weak reference to a task
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ the transport's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        self.writer = asyncio.StreamWriter(self._transport, self, None, loop)
        if self._serve is not None:
            self._task = loop.create_task(self._serve(self, self.writer))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._direct is not None:
            return memoryview(self._direct)[self._direct_filled :]
        if self._end == len(self._buf):
            self._room(1)
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        part = self._direct
        if part is not None:
            self._direct_filled += nbytes
            if self._direct_filled < len(part):
                return
            # The part is full. What comes next is the frame's next part, if any: the
            # transport may ask for a buffer again before the reader runs (over TLS it
            # does), and those bytes must not land in the connection's buffer.
            self._direct_parts.append(part)
            if self._direct_left:
                size = min(self._direct_left, self._part_bytes)
                self._direct = bytearray(size)
                self._direct_filled = 0
                self._direct_left -= size
                return
            self._direct = None  # the frame is whole: what comes next is the next frame's
        else:
            self._end += nbytes
            if self._end == len(self._buf) == CHUNK_BYTES and self._start == 0:
                self._pause_reading()  # a full buffer nobody has read: wait for the reader
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # keep the writing side open for the last answers (the client half-closed), as
        # StreamReaderProtocol does; over TLS a half-close is not possible
        return not self._over_ssl

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self._error = exc
        self._eof = True
        self._wake()
        for w in self._drain_waiters:
            if not w.done():
                w.set_exception(ConnectionResetError("Connection lost") if exc is None else exc)
        self._drain_waiters.clear()
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters.clear()

    async def _drain_helper(self) -> None:
        """What `StreamWriter.drain` awaits: room in the transport's write buffer."""
        if self._closed is not None and self._closed.done():
            raise ConnectionResetError("Connection lost")
        if not self._writing_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _get_close_waiter(self, stream: object) -> asyncio.Future[None]:
        """What `StreamWriter.wait_closed` awaits."""
        assert self._closed is not None
        return self._closed

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None:
            self._reading_paused = False
            self._transport.resume_reading()

    def _room(self, n: int) -> None:
        """Make the buffer hold ``n`` bytes from the first unread one, and one free byte
        after the last (n < DIRECT_FRAME_BYTES): move the unread bytes to the front, or
        move them into a bigger buffer."""
        start, end, buf = self._start, self._end, self._buf
        need = max(n, end - start + 1)
        if start + need <= len(buf):
            return
        if need <= len(buf):
            buf[: end - start] = buf[start:end]  # same size: fine while lent to the transport
        else:
            grown = bytearray(FIRST_BYTES if need <= FIRST_BYTES else CHUNK_BYTES)
            assert need <= len(grown), "a full buffer is paused, never grown"
            grown[: end - start] = buf[start:end]
            self._buf = grown
        self._start, self._end = 0, end - start

    # ------------------------------------------------------------ the front's side

    async def _wait(self) -> None:
        """Until more bytes came, the input ended or the connection was lost."""
        if self._error is not None:
            raise self._error
        if self._eof:
            return
        self._resume_reading()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def _fill(self, n: int) -> int:
        """Until ``n`` unread bytes are buffered or the input ended; how many there are."""
        while self._end - self._start < n and not self._eof:
            self._room(n)
            await self._wait()
        if self._error is not None and self._end - self._start < n:
            raise self._error
        return self._end - self._start

    def _take(self, n: int) -> bytes:
        start = self._start
        data = bytes(memoryview(self._buf)[start : start + n])
        self._start = start + n
        if self._start == self._end:
            self._start = self._end = 0
        self._resume_reading()
        return data

    async def read_magic(self) -> None:
        """The connection's first 4 bytes, which must be `MAGIC`."""
        if await self._fill(len(MAGIC)) < len(MAGIC):
            raise UnavailableError("the connection ended before the protocol magic")
        got = self._take(len(MAGIC))
        if got != MAGIC:
            raise FrameError(
                f"not the weir native TCP protocol (first bytes {got!r}, expected {MAGIC!r}); "
                "gRPC clients use the gRPC port"
            )

    async def read_frame(self, limit: int) -> bytes | bytearray | None:
        """The next frame's payload; None when the peer closed between frames.

        A length over ``limit`` is `MessageTooLargeError` (nothing of it is read); a
        connection that ends inside a frame is `FrameError`; a lost one, its OSError.
        """
        have = await self._fill(HEADER.size)
        if have < HEADER.size:
            if not have:
                return None
            raise FrameError(
                f"the connection ended inside a frame header ({have} of {HEADER.size} bytes)"
            )
        (n,) = HEADER.unpack_from(self._buf, self._start)
        if n > limit:
            raise MessageTooLargeError(f"a frame of {n} bytes exceeds the limit of {limit} bytes")
        self._start += HEADER.size
        have -= HEADER.size
        if have < n and n >= DIRECT_FRAME_BYTES:
            return await self._read_direct(n, have)
        if await self._fill(n) < n:
            raise FrameError(
                f"the connection ended inside a frame ({self._end - self._start} of {n} bytes)"
            )
        return self._take(n)

    async def _read_direct(self, n: int, have: int) -> bytes | bytearray:
        """A large frame, ``have`` bytes of which are buffered (all the unread bytes, fewer
        than ``n``): the rest is received straight into its parts (`buffer_updated`)."""
        first = bytearray(min(n, self._part_bytes))
        assert have < len(first), "parts must not be below CHUNK_BYTES"
        first[:have] = memoryview(self._buf)[self._start : self._end]
        self._start = self._end = 0
        self._direct_parts = []
        self._direct, self._direct_filled = first, have
        self._direct_left = n - len(first)
        try:
            while self._direct is not None and not self._eof:
                await self._wait()
            parts = self._direct_parts
            if self._direct is not None:  # the input ended first
                got = sum(len(p) for p in parts) + self._direct_filled
                if self._error is not None:
                    raise self._error
                raise FrameError(f"the connection ended inside a frame ({got} of {n} bytes)")
        finally:
            self._direct, self._direct_parts = None, []
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def discard(self) -> None:
        """Drop what the peer still sends until it closes."""
        while not self._eof:
            self._start = self._end = 0
            await self._wait()
        self._start = self._end = 0

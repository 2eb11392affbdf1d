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

The Kafka front's `weir.protocols.kafka.framing.FrameReader` receives the same way but
splits frames as they arrive and hands each to a callback. This one reads lazily, a
frame when the front asks for one, because each read has its own limit: the hello,
before the client is authenticated, may be 64 KiB, and a longer length is refused
before a byte of it is taken, though the client pipelined its next frames behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from weir.errors import MessageTooLargeError, UnavailableError
from weir.protocols.native.framing import HEADER, MAGIC, FrameError

# the buffer small frames are received into (and copied out of, one by one)
CHUNK_BYTES = 256 << 10
# a frame at least this big, not in the buffer yet, is received into a buffer of its own
DIRECT_FRAME_BYTES = 64 << 10
# ... in parts of at most this many bytes, joined at the end (one copy, for frames over
# it only): what a peer that sends a frame's length and no more makes the server hold
DIRECT_PART_BYTES = 4 << 20

Serve = Callable[["FrameConnection", asyncio.StreamWriter], Coroutine[Any, Any, None]]


class FrameConnection(asyncio.streams.FlowControlMixin, asyncio.BufferedProtocol):
    """One connection: frames in (see the module docstring), a StreamWriter out."""

    def __init__(self, serve: Serve, over_ssl: bool) -> None:
        super().__init__()
        self._serve = serve
        self._over_ssl = over_ssl
        self._buf = bytearray(CHUNK_BYTES)
        self._start = 0  # unread bytes are _buf[_start:_end]
        self._end = 0
        self._direct: bytearray | None = None  # the large frame being received into itself
        self._direct_filled = 0
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ the transport's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        loop = asyncio.get_running_loop()
        writer = asyncio.StreamWriter(transport, self, None, loop)
        self.task = loop.create_task(self._serve(self, writer))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._direct is not None:
            return memoryview(self._direct)[self._direct_filled :]
        if self._end == len(self._buf):
            self._compact()
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct is not None:
            self._direct_filled += nbytes
            if self._direct_filled == len(self._direct):
                self._direct = None  # complete: what comes next goes to the buffer
        else:
            self._end += nbytes
            if self._end == len(self._buf) and self._start == 0:
                self._pause_reading()  # a full buffer nobody has read: wait for the reader
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # keep the writing side open for the last answers (the client half-closed), as
        # StreamReaderProtocol does; over TLS a half-close is not possible
        return not self._over_ssl

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if exc is not None:
            self._error = exc
        self._eof = True
        self._wake()

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

    def _compact(self) -> None:
        """Move the unread bytes to the front of the buffer (there is room after them)."""
        start, end = self._start, self._end
        if start:
            self._buf[: end - start] = self._buf[start:end]
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
            if self._start + n > len(self._buf):
                self._compact()
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
        """A large frame, ``have`` bytes of which are buffered: received into its own
        buffer (in parts of DIRECT_PART_BYTES, allocated as the bytes come)."""
        parts: list[bytearray] = []
        got = 0
        while got < n:
            part = bytearray(min(n - got, DIRECT_PART_BYTES))
            if not parts:  # have < len(part): have < n, and have <= CHUNK_BYTES
                part[:have] = memoryview(self._buf)[self._start : self._end]
                self._start = self._end = 0
            self._direct, self._direct_filled = part, have if not parts else 0
            try:
                while self._direct_filled < len(part) and not self._eof:
                    await self._wait()
            finally:
                filled = self._direct_filled
                self._direct = None
            if filled < len(part):
                if self._error is not None:
                    raise self._error
                raise FrameError(
                    f"the connection ended inside a frame ({got + filled} of {n} bytes)"
                )
            parts.append(part)
            got += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def discard(self) -> None:
        """Drop what the peer still sends until it closes."""
        while not self._eof:
            self._start = self._end = 0
            await self._wait()
        self._start = self._end = 0


async def start_frame_listener(
    serve: Serve, host: str, port: int, ssl_context: object | None, what: str
) -> asyncio.Server:
    """Listen on ``host:port`` (0: any free port) for ``serve``, one `FrameConnection` per
    connection; ``what`` names the front in the error, as `start_listener` does."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.create_server(
            lambda: FrameConnection(serve, ssl_context is not None),
            host,
            port,
            ssl=ssl_context,  # type: ignore[arg-type]
            reuse_address=True,
        )
    except OSError as exc:
        raise OSError(f"cannot listen for {what} on {host}:{port}: {exc.strerror or exc}") from None

"""Kafka's framing (a big-endian int32 size, then the request): bytes in, whole frames out.

`FrameReader` is the I/O-free half of an asyncio ``BufferedProtocol``: the transport
asks it for a buffer (`get_buffer`) and tells it how much arrived (`buffer_updated`),
so the kernel writes straight into memory this module owns. Small frames gather in
one scratch buffer and are copied out whole (a few hundred bytes); a frame of
``BIG_FRAME`` bytes or more gets a buffer of its own, and the rest of it is received
straight into that buffer. A 1 MB produce request is then copied once (by the
kernel), where asyncio's streams appended each piece to their buffer, sliced the
request out of it and deleted it from the front (three copies in Python, and the
profile's 30% of a 10 KB produce).

A frame over ``BIG_PART`` is received in parts of that size, each allocated when the
bytes before it have come, and joined once at the end: a client that sends a size and
nothing more (before it has authenticated, too) makes the reader hold one part, not the
100 MB the size may say.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

SCRATCH = 64 << 10
BIG_FRAME = 16 << 10
BIG_PART = 4 << 20
_SIZE = struct.Struct(">i")


class FrameSizeError(ValueError):
    """A frame's size prefix is negative or over the limit: the connection must close."""


class FrameReader:
    """Splits the bytes of one connection into frames; see the module docstring.

    ``deliver`` gets each frame (without its size prefix) as a memoryview the reader
    never touches again. It is called from `buffer_updated`, in arrival order; an
    exception it raises propagates (the caller closes the connection).
    """

    def __init__(self, limit: int, deliver: Callable[[memoryview], None]) -> None:
        self.limit = limit
        self._deliver = deliver
        self._scratch = bytearray()  # SCRATCH bytes once the first bytes come
        self._start = 0  # the unread bytes are scratch[start:end]
        self._end = 0
        self._need = 4  # bytes from start the next frame needs in the scratch buffer
        self._big: bytearray | None = None  # the large frame's part being received
        self._filled = 0
        self._parts: list[bytearray] = []  # its parts received before that one
        self._left = 0  # its bytes after that part

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._filled :]
        if not self._scratch:  # not at accept: an idle connection holds nothing
            self._scratch = bytearray(SCRATCH)
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._scratch) - self._start < self._need:
            # move the partial frame to the front so the whole of it fits
            n = self._end - self._start
            self._scratch[:n] = self._scratch[self._start : self._end]
            self._start, self._end = 0, n
        return memoryview(self._scratch)[self._end :]

    @property
    def held(self) -> int:
        """Bytes held for the large frame in progress (its parts so far)."""
        if self._big is None:
            return 0
        return len(self._big) + sum(len(p) for p in self._parts)

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._filled += nbytes
            if self._filled == len(self._big):
                big, self._big = self._big, None
                if self._left:  # the next part, now that this one came whole
                    self._parts.append(big)
                    self._big = bytearray(min(self._left, BIG_PART))
                    self._left -= len(self._big)
                    self._filled = 0
                    return
                if self._parts:  # read-only, as a small frame's is
                    self._parts.append(big)
                    whole, self._parts = b"".join(self._parts), []
                    self._deliver(memoryview(whole))
                    return
                self._deliver(memoryview(big))
            return
        self._end += nbytes
        self._split()

    def _split(self) -> None:
        buf = self._scratch
        while self._end - self._start >= 4:
            (size,) = _SIZE.unpack_from(buf, self._start)
            if size < 0 or size > self.limit:
                raise FrameSizeError(f"request of {size} bytes (limit {self.limit})")
            begin = self._start + 4
            have = self._end - begin
            if have >= size:
                self._start = begin + size
                self._need = 4
                self._deliver(memoryview(bytes(buf[begin : begin + size])))
                continue
            if size >= BIG_FRAME:
                big = bytearray(min(size, BIG_PART))  # have < size, and have <= SCRATCH
                big[:have] = buf[begin : self._end]
                self._big, self._filled = big, have
                self._left = size - len(big)
                self._start = self._end = 0
                self._need = 4
            else:
                self._need = 4 + size
            return
        self._need = 4


__all__ = ["BIG_FRAME", "BIG_PART", "SCRATCH", "FrameReader", "FrameSizeError"]

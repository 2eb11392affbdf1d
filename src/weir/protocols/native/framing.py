"""The framing of the native TCP port: a magic, then length-prefixed protobuf messages.

A connection opens with `MAGIC`, then frames both ways: a 4-byte big-endian
length, then that many bytes of one weir.proto message (weir.proto: TcpHello).
Shared by the server's listener (`weir.protocols.native.tcp_front`, which reads
through `weir.protocols.native.frame_connection`) and the SDK
(`weir.client.tcp_call`: `read_frame`); nothing here knows the broker.
"""

from __future__ import annotations

import asyncio
import struct

from weir.errors import BadRequestError, MessageTooLargeError

DEFAULT_PORT = 2137  # the gRPC port's (2136) neighbour
MAGIC = b"weir"
VERSION = 1
HEADER = struct.Struct(">I")
# The hello and its result are small (a token is at most 8192 characters).
MAX_HELLO_BYTES = 64 << 10
METHOD_WRITE = "StreamWrite"
METHOD_READ = "StreamRead"


def frame(payload: bytes) -> bytes:
    """``payload`` with its length in front (one copy: for the small messages)."""
    return HEADER.pack(len(payload)) + payload


def header(length: int) -> bytes:
    """The length prefix alone, for a big payload written after it without a copy."""
    return HEADER.pack(length)


class FrameError(BadRequestError):
    """The bytes on the connection are not frames of this protocol."""


async def read_frame(reader: asyncio.StreamReader, limit: int) -> bytes | None:
    """The next frame's payload; None when the peer closed between frames.

    A length over ``limit`` is `MessageTooLargeError` (nothing of it is read); a
    connection that ends inside a frame is `FrameError`.
    """
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise FrameError(
            f"the connection ended inside a frame header ({len(exc.partial)} of 4 bytes)"
        ) from None
    (n,) = HEADER.unpack(head)
    if n > limit:
        raise MessageTooLargeError(f"a frame of {n} bytes exceeds the limit of {limit} bytes")
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as exc:
        raise FrameError(
            f"the connection ended inside a frame ({len(exc.partial)} of {n} bytes)"
        ) from None

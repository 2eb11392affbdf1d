"""The framing of the native TCP port: a magic, then length-prefixed protobuf messages.

A connection opens with `MAGIC`, then frames both ways: a 4-byte big-endian
length, then that many bytes of one weir.proto message (weir.proto: TcpHello).
Shared by the server's listener (`weir.protocols.native.tcp_front`) and the SDK
(`weir.client.tcp_call`, `weir.client.direct_writer`). The listener and `tcp_call` read
frames through `weir.protocols.native.frame_connection`, the direct writer with socket
code of its own; nothing here knows the broker.
"""

from __future__ import annotations

import struct

from weir.errors import BadRequestError

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

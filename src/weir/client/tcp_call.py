"""A stream on the server's native TCP port (`weir.protocols.native.tcp_front`).

`TcpStreamCall` has the methods of the grpc.aio call the writer and the reader use
(``write``, ``read``, ``done_writing``, ``cancel``; ``read`` answers ``grpc.aio.EOF`` at
the end), so their session, resend, credit and ack logic (`weir.client.write_stream`,
`weir.client.reader`) is the same on both transports. One connection carries one
stream (a StreamWrite or a StreamRead, named by the hello): it is opened on first use,
with the hello (and the token, when the client logs in) sent in the same packet as the
init, so opening costs the round trip gRPC's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from weir.client.credentials import TokenSource
from weir.errors import TokenRejectedError, UnauthorizedError, UnavailableError, error_from_code
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.frame_connection import FrameConnection
from weir.protocols.native.framing import (
    MAGIC,
    MAX_HELLO_BYTES,
    METHOD_READ,
    METHOD_WRITE,
    VERSION,
    FrameError,
    frame,
    header,
)
from weir.protocols.native.wire import decode_read_response, encode_write_request

# An ack is small: this bounds what a broken server could make a writer allocate.
MAX_RESPONSE_BYTES = 16 << 20
# Read data holds at least one stored batch, however big (limits.max_batch_bytes): a
# reader takes what the gRPC port would send it (weir.server.MAX_MESSAGE_BYTES).
MAX_READ_RESPONSE_BYTES = 256 << 20
# a read data frame is received in parts of this size at most (joined once if bigger)
READ_PART_BYTES = 16 << 20
_WRITE_HIGH_WATER = 4 << 20
_SPLIT_AT = 64 << 10


@dataclass(frozen=True)
class TcpMethod:
    """One stream the port serves: its hello name and how its messages go both ways."""

    name: str
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes | bytearray], Any]
    what: str  # for errors: "write stream", "read stream"
    limit: int  # the biggest response taken


def _write_response(data: bytes | bytearray) -> pb.WriteResponse:
    return pb.WriteResponse.FromString(bytes(data))  # an ack: small, bytes already


WRITE = TcpMethod(
    METHOD_WRITE, encode_write_request, _write_response, "write stream", MAX_RESPONSE_BYTES
)
READ = TcpMethod(
    METHOD_READ,
    pb.ReadRequest.SerializeToString,
    decode_read_response,
    "read stream",
    MAX_READ_RESPONSE_BYTES,
)


class TcpStreamCall:
    """One stream over framed TCP (see the module docstring)."""

    def __init__(
        self,
        method: TcpMethod,
        endpoint: str,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
        tokens: TokenSource | None,
        learn: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        self.method = method
        self.endpoint = endpoint
        self._learn = learn  # asks the server for its TCP port (`Connection.learn_tcp_endpoint`)
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._tokens = tokens
        self._token = ""
        self._conn: FrameConnection | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._hello_done = False
        self._cancelled = False

    async def _opened(self) -> tuple[FrameConnection, asyncio.StreamWriter]:
        if self._cancelled:
            raise UnavailableError(f"the {self.method.what} was cancelled")
        if self._conn is None or self._writer is None:
            if self._learn is not None:
                self.endpoint = await self._learn()
            if self._tokens is not None:
                self._token = await self._tokens.token()
            host, _, port = self.endpoint.rpartition(":")
            try:
                _, conn = await asyncio.get_running_loop().create_connection(
                    lambda: FrameConnection(None, self._ssl is not None, READ_PART_BYTES),
                    host.strip("[]"),
                    int(port),
                    ssl=self._ssl,
                    server_hostname=self._server_hostname if self._ssl is not None else None,
                )
            except ssl.SSLError as exc:
                raise UnavailableError(
                    f"cannot connect to {self.endpoint}: TLS handshake failed: {exc}"
                ) from None
            except OSError as exc:
                why = (
                    "connection refused"
                    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED
                    else str(exc)
                )
                raise UnavailableError(
                    f"cannot reach the weir native TCP port at {self.endpoint}: {why}"
                ) from None
            writer = conn.writer
            assert writer is not None
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = pb.TcpHello(
                version=VERSION,
                method=self.method.name,
                authorization=f"Bearer {self._token}" if self._token else "",
            )
            writer.write(MAGIC + frame(hello.SerializeToString()))
            if self._cancelled:  # cancelled while connecting
                writer.close()
                raise UnavailableError(f"the {self.method.what} was cancelled")
            self._conn, self._writer = conn, writer
        return self._conn, self._writer

    async def write(self, request: Any) -> None:
        """Send one request (a WriteRequest: init, or batches; a ReadRequest); a lost
        connection raises ConnectionError (the writer or reader then waits for its session
        loop to reconnect)."""
        _, writer = await self._opened()
        if writer.is_closing():
            raise ConnectionResetError(f"the {self.method.what}'s connection is closed")
        data = self.method.encode(request)
        if len(data) < _SPLIT_AT:
            writer.write(frame(data))  # one segment for a small request
        else:  # no copy of a big one to put its length in front
            writer.write(header(len(data)))
            writer.write(data)
        if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            await writer.drain()

    async def read(self) -> Any:
        """The next response; ``grpc.aio.EOF`` when the server ended the stream."""
        conn, _ = await self._opened()
        try:
            if not self._hello_done:
                await self._read_hello(conn)
            data = await conn.read_frame(self.method.limit)
        except (OSError, FrameError) as exc:
            raise UnavailableError(f"the {self.method.what}'s connection was lost: {exc}") from None
        if data is None:
            return grpc.aio.EOF
        return self.method.decode(data)

    async def _read_hello(self, conn: FrameConnection) -> None:
        data = await conn.read_frame(MAX_HELLO_BYTES)
        if data is None:
            # what a TLS server does to a plain-text hello, or a server going down
            raise UnavailableError(
                f"socket closed: the server at {self.endpoint} closed the connection before "
                "answering the hello"
            )
        result = pb.TcpHelloResult.FromString(bytes(data))
        self._hello_done = True
        if result.HasField("error"):
            err = error_from_code(result.error.code, result.error.message)
            if self._tokens is not None and isinstance(err, TokenRejectedError | UnauthorizedError):
                self._tokens.refused(self._token)
            raise err

    async def done_writing(self) -> None:
        _, writer = await self._opened()
        if writer.can_write_eof():
            writer.write_eof()

    def cancel(self) -> bool:
        """Close the connection (the server acks nothing more of this stream)."""
        self._cancelled = True
        if self._writer is not None:
            self._writer.close()
        return True

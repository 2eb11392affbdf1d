"""A write stream on the server's native TCP port (`weir.protocols.native.tcp_front`).

`TcpWriteCall` has the methods of the grpc.aio call the writer uses (``write``,
``read``, ``done_writing``, ``cancel``; ``read`` answers ``grpc.aio.EOF`` at the
end), so the writer's session, resend and ack logic (`weir.client.write_stream`)
is the same on both transports. One connection carries one stream: it is opened
on first use, with the hello (and the token, when the client logs in) sent in
the same packet as the init, so opening costs the round trip gRPC's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from weir.client.credentials import TokenSource
from weir.errors import TokenRejectedError, UnauthorizedError, UnavailableError, error_from_code
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.framing import (
    MAGIC,
    MAX_HELLO_BYTES,
    METHOD_WRITE,
    VERSION,
    FrameError,
    frame,
    header,
    read_frame,
)
from weir.protocols.native.wire import encode_write_request

# An ack is small; this bounds what a broken server could make the client allocate.
MAX_RESPONSE_BYTES = 16 << 20
_WRITE_HIGH_WATER = 4 << 20
_SPLIT_AT = 64 << 10


class TcpWriteCall:
    """One StreamWrite over framed TCP (see the module docstring)."""

    def __init__(
        self,
        endpoint: str,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
        tokens: TokenSource | None,
        learn: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._learn = learn  # asks the server for its TCP port (`Connection.learn_tcp_endpoint`)
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._tokens = tokens
        self._token = ""
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._hello_done = False
        self._cancelled = False

    async def _opened(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._cancelled:
            raise UnavailableError("the write stream was cancelled")
        if self._reader is None or self._writer is None:
            if self._learn is not None:
                self.endpoint = await self._learn()
            if self._tokens is not None:
                self._token = await self._tokens.token()
            host, _, port = self.endpoint.rpartition(":")
            try:
                reader, writer = await asyncio.open_connection(
                    host.strip("[]"),
                    int(port),
                    ssl=self._ssl,
                    server_hostname=self._server_hostname if self._ssl is not None else None,
                    limit=1 << 20,
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
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = pb.TcpHello(
                version=VERSION,
                method=METHOD_WRITE,
                authorization=f"Bearer {self._token}" if self._token else "",
            )
            writer.write(MAGIC + frame(hello.SerializeToString()))
            if self._cancelled:  # cancelled while connecting
                writer.close()
                raise UnavailableError("the write stream was cancelled")
            self._reader, self._writer = reader, writer
        return self._reader, self._writer

    async def write(self, request: Any) -> None:
        """Send one WriteRequest (init, or batches); a lost connection raises ConnectionError
        (the writer then waits for its session loop to reconnect)."""
        _, writer = await self._opened()
        if writer.is_closing():
            raise ConnectionResetError("the write stream's connection is closed")
        data = encode_write_request(request)
        if len(data) < _SPLIT_AT:
            writer.write(frame(data))  # one segment for a small request
        else:  # no copy of a big one to put its length in front
            writer.write(header(len(data)))
            writer.write(data)
        if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            await writer.drain()

    async def read(self) -> Any:
        """The next WriteResponse; ``grpc.aio.EOF`` when the server ended the stream."""
        reader, _ = await self._opened()
        try:
            if not self._hello_done:
                await self._read_hello(reader)
            data = await read_frame(reader, MAX_RESPONSE_BYTES)
        except (OSError, FrameError) as exc:
            raise UnavailableError(f"the write stream's connection was lost: {exc}") from None
        if data is None:
            return grpc.aio.EOF
        return pb.WriteResponse.FromString(data)

    async def _read_hello(self, reader: asyncio.StreamReader) -> None:
        data = await read_frame(reader, MAX_HELLO_BYTES)
        if data is None:
            # what a TLS server does to a plain-text hello, or a server going down
            raise UnavailableError(
                f"socket closed: the server at {self.endpoint} closed the connection before "
                "answering the hello"
            )
        result = pb.TcpHelloResult.FromString(data)
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

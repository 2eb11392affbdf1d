"""The native TCP port: weir.proto's write and read streams over framed TCP, without gRPC.

A grpc.aio stream costs about 0.5 ms and several thread and task hops per
message more than a plain asyncio socket (docs/performance.md, issue 26), so
the native protocol's hot streams are also served here: the same messages
(`WriteRequest` in, `WriteResponse` out; `ReadRequest` in, `ReadResponse` out),
the same sessions (`weir.protocols.native.write_session.WriteSession`:
validation, seq_no dedup, acks after the commit is durable, typed errors;
`weir.protocols.native.read_session.ReadSession`: assignments, credit, commits),
one stream per connection (the hello names it), framed as
`weir.protocols.native.framing` says. Subscriptions and admin stay on gRPC.

Authentication is the gRPC port's: the hello carries what the ``authorization``
metadata would (a bearer token), or the TLS connection's client certificate
stands for the caller; `weir.security` decides, and a stream whose caller loses
its right (a revoke, an expired token) ends with the reason, as on gRPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from weir.broker.broker import Broker
from weir.errors import BadRequestError, UnavailableError, WeirError
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.auth import bearer_token
from weir.protocols.native.frame_connection import FrameConnection, Serve
from weir.protocols.native.framing import (
    MAX_HELLO_BYTES,
    METHOD_READ,
    METHOD_WRITE,
    VERSION,
    frame,
    header,
)
from weir.protocols.native.read_session import ReadSession
from weir.protocols.native.service import NativeService
from weir.protocols.native.stream import error_proto
from weir.protocols.native.wire import decode_write_request, encode_read_response
from weir.protocols.native.write_session import WriteSession
from weir.protocols.tcp_listener import start_protocol_listener
from weir.security import Security, current_principal
from weir.security.authenticator import ClientCertificate, Credential
from weir.security.principal import current_checks
from weir.security.tls import ServerTls

log = logging.getLogger("weir.native")

# The biggest frame taken: the gRPC port's message limit (weir.server.MAX_MESSAGE_BYTES).
MAX_FRAME_BYTES = 256 << 20
# How long a new connection may take to send its magic and hello.
HELLO_TIMEOUT_S = 10.0
# After its last answer the server reads (and drops) what the client still sends, for up
# to this long, so that closing with unread input does not reset the connection and lose
# that answer (the error that ended the stream) on its way to the client.
LINGER_S = 2.0
# How long stop() lets connections end on their own (sessions ack what is in flight), by
# default: the server passes its shutdown grace.
STOP_GRACE_S = 5.0
_WRITE_HIGH_WATER = 1 << 20
_SPLIT_AT = 64 << 10
# A read stream's requests are an init (topics, named partitions), credits and commits.
MAX_READ_REQUEST_BYTES = 1 << 20


def _common_name(ssl_object: ssl.SSLObject | None) -> str | None:
    """The verified client certificate's common name, if the connection has one."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for pair in rdn:
            if pair[0] == "commonName":
                return str(pair[1])
    return None


def _serialize(message: Any) -> bytes:
    return message.SerializeToString()  # type: ignore[no-any-return]


class FrameResponses:
    """A session's answers as frames on the connection (`write_session.Responses`),
    each message made bytes by ``encode`` (the generated serializer by default)."""

    def __init__(
        self, writer: asyncio.StreamWriter, encode: Callable[[Any], bytes] = _serialize
    ) -> None:
        self.writer = writer
        self.encode = encode

    async def write(self, message: Any) -> None:
        writer = self.writer
        if writer.is_closing():
            raise ConnectionResetError("the client's connection is closed")
        data = self.encode(message)
        if len(data) < _SPLIT_AT:
            writer.write(frame(data))
        else:  # no copy of a big answer (read data) to put its length in front
            writer.write(header(len(data)))
            writer.write(data)
        if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            await writer.drain()

    def write_nowait(self, message: Any) -> bool:
        """`write` when it would not wait: the connection is open and has not backed up;
        False (nothing written) otherwise."""
        writer = self.writer
        if writer.is_closing() or writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            return False
        writer.write(frame(self.encode(message)))
        return True


def _decode_read_request(data: bytes | bytearray) -> pb.ReadRequest:
    return pb.ReadRequest.FromString(bytes(data))


@dataclass(frozen=True)
class _Stream:
    """What the port serves for one hello ``method``: how requests are decoded, answers
    encoded, the error that ends it after a revoke, and its biggest request."""

    name: str  # the request message, for errors
    decode: Callable[[bytes | bytearray], Any]
    encode: Callable[[Any], bytes]
    error: Callable[[pb.Error], Any]
    limit: int | None = None  # None: the port's max_frame_bytes


_STREAMS = {
    METHOD_WRITE: _Stream(
        "WriteRequest", decode_write_request, _serialize, lambda e: pb.WriteResponse(error=e)
    ),
    METHOD_READ: _Stream(
        "ReadRequest",
        _decode_read_request,
        encode_read_response,
        lambda e: pb.ReadResponse(error=e),
        MAX_READ_REQUEST_BYTES,
    ),
}


async def _requests(conn: FrameConnection, limit: int, stream: _Stream) -> Any:
    """The client's requests, decoded as the gRPC port decodes them."""
    while True:
        try:
            data = await conn.read_frame(limit)
        except OSError as exc:
            raise UnavailableError(f"the client's connection was lost: {exc}") from None
        if data is None:
            return
        try:
            request = stream.decode(data)
        except DecodeError:
            raise BadRequestError(
                f"a frame of {len(data)} bytes is not a {stream.name} message"
            ) from None
        yield request


class NativeTcpFront:
    """Start with `start`, stop with `stop`; ``port`` is the bound one (0 picks a free port)."""

    def __init__(
        self,
        broker: Broker,
        security: Security,
        host: str,
        port: int,
        *,
        tls: ServerTls | None = None,
        stopping: asyncio.Event | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        self.broker = broker
        self.security = security
        self.host = host
        self.port = port
        self.tls = tls
        self.stopping = stopping or asyncio.Event()
        self.max_frame_bytes = max_frame_bytes
        # the gRPC service's authorization of a caller, so both ports decide alike
        self._allow = NativeService(broker, self.stopping, security)._allow
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await start_frame_listener(
            self._serve, self.host, self.port, self.tls, "native TCP clients"
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.debug("native TCP front started", extra={"endpoint": self.endpoint})

    async def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Stop accepting; open streams see the server stopping, ack what is in flight and
        end with UNAVAILABLE (within ``grace`` seconds, else they are cut)."""
        if self._server is not None:
            self._server.close()
        live = list(self._connections)
        if live:
            _, pending = await asyncio.wait(live, timeout=grace)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._server = None

    async def _serve(self, conn: FrameConnection, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await self._connection(conn, writer)
        except OSError:
            pass  # the client went away
        except Exception:
            log.exception("native TCP connection failed")
        finally:
            self._connections.discard(task)
            writer.close()

    def _credential(self, hello: pb.TcpHello, writer: asyncio.StreamWriter) -> Credential | None:
        if hello.authorization:
            return bearer_token(((("authorization", hello.authorization)),))
        name = _common_name(writer.get_extra_info("ssl_object"))
        return ClientCertificate(name) if name is not None else None

    async def _connection(self, conn: FrameConnection, writer: asyncio.StreamWriter) -> None:
        out = FrameResponses(writer)
        try:
            try:
                await asyncio.wait_for(conn.read_magic(), HELLO_TIMEOUT_S)
                data = await asyncio.wait_for(conn.read_frame(MAX_HELLO_BYTES), HELLO_TIMEOUT_S)
            except TimeoutError:
                raise BadRequestError(
                    f"no hello within {HELLO_TIMEOUT_S:g} s of connecting"
                ) from None
            if data is None:
                return
            try:
                hello = pb.TcpHello.FromString(bytes(data))
            except DecodeError:
                raise BadRequestError("the first frame is not a TcpHello message") from None
            if hello.version != VERSION:
                raise BadRequestError(
                    f"framing version {hello.version} is not served (this server speaks {VERSION})"
                )
            stream = _STREAMS.get(hello.method)
            if stream is None:
                raise BadRequestError(
                    f"{hello.method!r} is not served on the native TCP port (only "
                    f"{' and '.join(_STREAMS)}); use the gRPC port"
                )
            credential = self._credential(hello, writer)
            principal = self.security.authenticate(credential)
        except WeirError as err:
            log.info(
                "native TCP connection refused: %s",
                err.message,
                extra={"peer": str(writer.get_extra_info("peername"))},
            )
            await out.write(pb.TcpHelloResult(version=VERSION, error=error_proto(err)))
            await _linger(conn, writer)
            return
        await out.write(pb.TcpHelloResult(version=VERSION))
        current_principal.set(principal)
        checks: list[tuple[object, str, str]] = []
        current_checks.set(checks)  # filled by the authorization checks the stream passes
        requests = _requests(conn, stream.limit or self.max_frame_bytes, stream)
        answers = FrameResponses(writer, stream.encode)
        session = ReadSession if hello.method == METHOD_READ else WriteSession
        run = session(self.broker, answers, self.stopping, allow=self._allow).run(requests)
        task = asyncio.ensure_future(run)
        ended: list[WeirError] = []

        def recheck() -> None:  # users or grants changed, or the token expired
            if ended or task.done():
                return
            err = self.security.still_allowed(credential, principal, checks)
            if err is not None:
                ended.append(err)
                task.cancel()  # before the changing call answers: nothing lands after it

        stop_watching = self.security.watch(recheck, lambda: credential)
        try:
            try:
                await task
            except asyncio.CancelledError:
                if not ended:
                    raise
                with contextlib.suppress(OSError):
                    await answers.write(stream.error(error_proto(ended[0])))
        finally:
            stop_watching()
            task.cancel()
        await _linger(conn, writer)


async def start_frame_listener(
    serve: Serve, host: str, port: int, tls: ServerTls | None, what: str
) -> asyncio.Server:
    """Listen on ``host:port`` (0: any free port) for ``serve``, one `FrameConnection` per
    connection (`start_protocol_listener`)."""
    return await start_protocol_listener(
        lambda: FrameConnection(serve, tls is not None), host, port, tls, what
    )


async def _linger(conn: FrameConnection, writer: asyncio.StreamWriter) -> None:
    """Flush the last answers, half-close, and drop what the client still sends until it
    closes (LINGER_S at most); see LINGER_S."""
    with contextlib.suppress(Exception):
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

        await asyncio.wait_for(conn.discard(), LINGER_S)

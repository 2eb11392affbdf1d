"""The Pulsar listener: a TCP (or TLS: ``pulsar+ssl://``) server whose connections speak
the Pulsar binary protocol (`weir.protocols.pulsar.connection`).

Started by `weir.server.Server` beside the gRPC port when ``pulsar.enabled``; see
docs/pulsar.md for what a Pulsar client gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl

from weir.broker.broker import Broker
from weir.protocols.pulsar.connection import PulsarConnection
from weir.protocols.pulsar.connection_state import FrontSettings, FrontState
from weir.security import Security
from weir.security.tls import ServerTls

log = logging.getLogger("weir.pulsar")

DEFAULT_PORT = 6650
DEFAULT_MAX_MESSAGE_SIZE = 5 << 20  # Pulsar's default: bigger messages are chunked


def _common_name(sock: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    if sock is None:
        return None
    cert = sock.getpeercert()
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for pair in rdn:
            if pair[0] == "commonName":
                return str(pair[1])
    return None


class PulsarFront:
    """Start with `start`, stop with `stop`; ``port`` is the bound one (0 picks a free port)."""

    def __init__(
        self,
        broker: Broker,
        security: Security,
        host: str,
        port: int,
        *,
        tls: ServerTls | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        batch_index_ack: bool = False,
        keep_alive_s: float = 30.0,
        advertised_host: str = "",
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.broker = broker
        self.security = security
        self.host = host
        self.port = port
        self.tls = tls
        self.max_message_size = max(1024, min(max_message_size, broker.config.message_limit))
        self.advertised_host = advertised_host
        self.batch_index_ack = batch_index_ack
        self.keep_alive_s = keep_alive_s
        self.stopping = stopping or asyncio.Event()
        self.state = FrontState()
        self.connections: set[PulsarConnection] = set()
        self._server: asyncio.Server | None = None
        self._settings: FrontSettings | None = None

    @property
    def url(self) -> str:
        scheme = "pulsar+ssl" if self.tls is not None else "pulsar"
        host = self.advertised_host or self.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        if ":" in host:
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._serve,
                self.host,
                self.port,
                ssl=self.tls.ssl_context() if self.tls is not None else None,
                reuse_address=True,
                limit=1 << 20,
            )
        except OSError as exc:
            raise OSError(
                f"cannot listen for Pulsar clients on {self.host}:{self.port}: "
                f"{exc.strerror or exc}"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._settings = FrontSettings(
            self.url,
            self.max_message_size,
            self.tls is not None,
            self.batch_index_ack,
            self.keep_alive_s,
        )
        log.debug("pulsar front started", extra={"endpoint": self.url})

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._settings is not None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = PulsarConnection(
            self.broker,
            self.security,
            self._settings,
            self.state,
            reader,
            writer,
            certificate=_common_name(writer.get_extra_info("ssl_object")),
            stopping=self.stopping,
        )
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            await conn.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

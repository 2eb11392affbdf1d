"""The listening socket of a front that speaks its protocol over TCP (Pulsar, native TCP).

Both open it alike: TLS when configured, address reuse, a 1 MiB stream buffer, and an
error that names the front when the address cannot be had (a taken port is the usual
reason, and the message must say which of the server's ports it was).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator

from weir.security.tls import ServerTls

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def start_listener(
    serve: Serve, host: str, port: int, tls: ServerTls | None, what: str
) -> asyncio.Server:
    """Listen on ``host:port`` (0: any free port) for ``serve``; ``what`` names the front
    in the error (``cannot listen for WHAT on HOST:PORT: reason``)."""
    with _naming(what, host, port):
        return await asyncio.start_server(
            serve,
            host,
            port,
            ssl=tls.ssl_context() if tls is not None else None,
            reuse_address=True,
            limit=1 << 20,
        )


async def start_protocol_listener(
    protocol: Callable[[], asyncio.BaseProtocol],
    host: str,
    port: int,
    tls: ServerTls | None,
    what: str,
) -> asyncio.Server:
    """`start_listener` for a front that is its own protocol (one ``protocol()`` per
    connection) instead of asyncio's streams."""
    with _naming(what, host, port):
        return await asyncio.get_running_loop().create_server(
            protocol,
            host,
            port,
            ssl=tls.ssl_context() if tls is not None else None,
            reuse_address=True,
        )


@contextlib.contextmanager
def _naming(what: str, host: str, port: int) -> Iterator[None]:
    """An OSError of listening, as ``cannot listen for WHAT on HOST:PORT: reason``."""
    try:
        yield
    except OSError as exc:
        raise OSError(f"cannot listen for {what} on {host}:{port}: {exc.strerror or exc}") from None


__all__ = ["Serve", "start_listener", "start_protocol_listener"]

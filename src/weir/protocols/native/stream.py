"""What the native front's server-driven streams share: one sender task, the first
error sent as the stream's last answer, and the end on server shutdown.

gRPC takes one write at a time, so a session (a read session, a subscribe
session) queues its answers and one task writes them in order. `_fail` sends the
first error and ends the session; a server that stops lets in-flight work answer
first (`_drain`), then ends the stream with a retryable UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Generic, Protocol, TypeVar

import grpc

from weir.errors import InternalError, UnavailableError, WeirError
from weir.protocols.native import weir_pb2 as pb
from weir.security.grants import Permission

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Allow(Protocol):
    """NativeService's authorization of the caller: ``operation`` on ``topic`` needs
    ``permission`` (None: any grant), and under consumer group ``group`` (when given) a
    group grant as well (`Security.authorize_group`)."""

    def __call__(
        self, permission: Permission | None, topic: str, operation: str, group: str = ""
    ) -> None: ...


class Responses(Protocol):
    """Where a session's answers go: the gRPC call's context, or a connection of the
    native TCP port (`weir.protocols.native.tcp_front`). The latter also has
    ``write_nowait(message) -> bool`` (write now, or False when it would wait): the
    session then sends its acks in the partition actor's turn (`WriteSession._ack_now`)."""

    async def write(self, message: Any) -> None: ...


def allow_all(permission: Permission | None, topic: str, operation: str, group: str = "") -> None:
    """Sessions made without a service (tests of the session alone) check nothing."""


def error_proto(err: BaseException) -> pb.Error:
    """``err`` on the wire; an unexpected exception is an INTERNAL error."""
    if not isinstance(err, WeirError):
        err = InternalError(f"unexpected server error: {err!r}")
    return pb.Error(code=err.code, message=err.message, retryable=err.retryable)


class StreamSession(Generic[Req, Resp]):
    """Base of a bidirectional stream answered through a queue (see the module doc).

    A subclass handles the requests (`_handle`), builds its error answer
    (`_error_response`), waits for its in-flight work (`_drain`) and lets go of
    what it holds when the stream ends (`_release`).
    """

    def __init__(
        self, context: grpc.aio.ServicerContext | Responses, stopping: asyncio.Event
    ) -> None:
        self.context = context
        self.stopping = stopping
        self._out: asyncio.Queue[Resp | None] = asyncio.Queue()
        self._stop = asyncio.Event()
        self._failure: BaseException | None = None

    async def _handle(self, requests: AsyncIterator[Req]) -> None:
        raise NotImplementedError

    def _error_response(self, error: pb.Error) -> Resp:
        raise NotImplementedError

    async def _drain(self) -> None:
        """Wait until the answers of work in flight are queued."""

    def _release(self) -> None:
        """Let go of what the session holds (the stream is ending)."""

    def _on_failure(self, err: BaseException) -> None:
        """Called once, with the error that ends the session."""

    def _fail(self, err: BaseException) -> None:
        """Send the error and end the session (the client reconnects if it is retryable)."""
        if self._failure is None:
            self._failure = err
            self._on_failure(err)
            self._out.put_nowait(self._error_response(error_proto(err)))
        self._stop.set()

    async def run(self, requests: AsyncIterator[Req]) -> None:
        sender = asyncio.create_task(self._send())
        handler = asyncio.create_task(self._handle(requests))
        stop = asyncio.create_task(self._stop.wait())
        server_stop = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait({handler, stop, server_stop}, return_when=asyncio.FIRST_COMPLETED)
            if server_stop.done() and not stop.done():
                await self._drain()  # their answers go out before the error
                self._fail(UnavailableError("server is shutting down; reconnect later"))
        finally:
            server_stop.cancel()
            handler.cancel()
            stop.cancel()
            self._release()
            self._out.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(sender, 5)

    async def _send(self) -> None:
        while True:
            msg = await self._out.get()
            if msg is None:
                return
            try:
                await self.context.write(msg)
            except Exception:
                return

"""Client credentials: log in once, send the token on every call, log in again when needed.

`weir.Client(endpoint, credentials=weir.UserPassword("alice", "secret"))` (or
the tuple ``("alice", "secret")``) makes the connection call ``Login`` before its
first call and send ``authorization: Bearer <token>`` on every call, unary and
streams alike. The token is cached and renewed before it expires; when the
server refuses it anyway (it restarted with another secret, or the user's
password changed), the next call logs in again, and the refused call fails with
the retryable `TokenRejectedError`, which the writer, the reader and unary calls
retry. A wrong password is the fatal `UnauthorizedError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from weir.errors import BadRequestError, UnauthorizedError
from weir.protocols.native import weir_pb2 as pb

LOGIN_METHOD = "/weir.v1.Weir/Login"
RENEW_AT = 0.8  # of a token's lifetime


@dataclass(frozen=True, slots=True)
class UserPassword:
    """A user and password of the server (``auth.users``); the password is never shown."""

    user: str
    password: str = field(repr=False)


Credentials = UserPassword
CredentialsArg = UserPassword | tuple[str, str] | None


def as_credentials(value: CredentialsArg) -> Credentials | None:
    """Accept ``UserPassword``, a ``(user, password)`` tuple, or None."""
    if value is None or isinstance(value, UserPassword):
        return value
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, str) for v in value)
        and value[0]
    ):
        return UserPassword(value[0], value[1])
    raise BadRequestError(
        "credentials must be weir.UserPassword(user, password) or a (user, password) tuple"
    )


Login = Callable[[pb.LoginRequest], Awaitable[pb.LoginResponse]]  # raises WeirError


class TokenSource:
    """The token of one connection: logs in when there is none, it is about to expire,
    or the server refused it; one login at a time."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self.logins = 0
        self._login: Login | None = None
        self._token: str | None = None
        self._renew_at = 0.0  # loop time
        self._lock: asyncio.Lock | None = None

    def bind(self, login: Login) -> None:
        self._login = login

    async def token(self) -> str:
        loop = asyncio.get_running_loop()
        if self._token is not None and loop.time() < self._renew_at:
            return self._token
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._token is None or loop.time() >= self._renew_at:
                await self._log_in(loop)
            assert self._token is not None
            return self._token

    async def _log_in(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._login is not None, "TokenSource used before bind()"
        req = pb.LoginRequest(user=self.credentials.user, password=self.credentials.password)
        try:
            resp = await self._login(req)
        except UnauthorizedError as err:
            raise UnauthorizedError(
                f"login as {self.credentials.user!r} refused: {err.message}"
            ) from None
        self.logins += 1
        self._token = resp.token
        self._renew_at = loop.time() + resp.expires_in_ms / 1000 * RENEW_AT

    def refused(self, token: str) -> None:
        """The server refused ``token``: the next call logs in again."""
        if token == self._token:
            self._token = None


async def _with_token(source: TokenSource, details: Any) -> tuple[Any, str | None]:
    method = details.method.decode() if isinstance(details.method, bytes) else details.method
    if method == LOGIN_METHOD:
        return details, None
    token = await source.token()
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    metadata.add("authorization", f"Bearer {token}")
    return details._replace(metadata=metadata), token


def _watch(source: TokenSource, call: Any, token: str | None) -> Any:
    """Forget the token when the server answers UNAUTHENTICATED to a call that carried it."""
    if token is None:
        return call

    async def check(done: Any) -> None:
        if await done.code() == grpc.StatusCode.UNAUTHENTICATED:
            source.refused(token)

    def on_done(done: Any) -> None:
        task = asyncio.ensure_future(check(done))
        _pending.add(task)
        task.add_done_callback(_pending.discard)

    call.add_done_callback(on_done)
    return call


_pending: set[asyncio.Future[None]] = set()


class _UnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        details, token = await _with_token(self.source, details)
        return _watch(self.source, await continuation(details, request), token)


class _UnaryStream(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        details, token = await _with_token(self.source, details)
        return _watch(self.source, await continuation(details, request), token)


class _StreamUnary(grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def intercept_stream_unary(
        self, continuation: Any, details: Any, request_iterator: Any
    ) -> Any:
        details, token = await _with_token(self.source, details)
        return _watch(self.source, await continuation(details, request_iterator), token)


class _StreamStream(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def intercept_stream_stream(
        self, continuation: Any, details: Any, request_iterator: Any
    ) -> Any:
        details, token = await _with_token(self.source, details)
        return _watch(self.source, await continuation(details, request_iterator), token)


class _StreamCall:
    """A bidirectional call whose ``write`` on an ended call raises the call's own error.

    grpc.aio's intercepted stream calls raise a bare InvalidStateError there (a plain
    call raises the AioRpcError), which would hide why the server ended the call
    (UNAUTHENTICATED, UNAVAILABLE) from the writer's and reader's retry logic.
    """

    __slots__ = ("_call",)

    def __init__(self, call: Any) -> None:
        self._call = call

    async def write(self, request: Any) -> None:
        try:
            await self._call.write(request)
        except asyncio.InvalidStateError:
            code = await self._call.code()
            if code != grpc.StatusCode.OK:
                raise grpc.aio.AioRpcError(
                    code,
                    await self._call.initial_metadata(),
                    await self._call.trailing_metadata(),
                    await self._call.details(),
                ) from None
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


def with_call_errors(open_call: Callable[..., Any]) -> Callable[..., Any]:
    """``open_call`` (a stream-stream multicallable) returning `_StreamCall` wrappers."""

    def open_wrapped(*args: Any, **kwargs: Any) -> Any:
        return _StreamCall(open_call(*args, **kwargs))

    return open_wrapped


def interceptors(source: TokenSource) -> list[grpc.aio.ClientInterceptor]:
    """One interceptor per call kind (grpc.aio files each under its first matching kind)."""
    return [_UnaryUnary(source), _UnaryStream(source), _StreamUnary(source), _StreamStream(source)]

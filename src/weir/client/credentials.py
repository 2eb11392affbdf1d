"""Client credentials: log in once, send the token on every call, log in again when needed.

`weir.Client(endpoint, credentials=weir.UserPassword("alice", "secret"))` (or
the tuple ``("alice", "secret")``) makes the connection call ``Login`` before its
first call and send ``authorization: Bearer <token>`` in the metadata of every
call, unary and streams alike. The token is cached and renewed before it
expires; when the server refuses it anyway (it came back with another secret,
or the user's password changed), the next call logs in again, and the refused
call fails with the retryable `TokenRejectedError`, which the writer, the reader
and unary calls retry. A wrong password is the fatal `UnauthorizedError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from weir.errors import BadRequestError, UnauthorizedError
from weir.protocols.native import weir_pb2 as pb

RENEW_AT = 0.8  # of a token's lifetime


@dataclass(frozen=True, slots=True)
class UserPassword:
    """A user and password of the server (``auth.users``); the password is never shown."""

    user: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Token:
    """A bearer token made elsewhere (a JWT from `weir token create` or an identity
    provider): sent as it is on every call, never renewed; never shown."""

    token: str = field(repr=False)


Credentials = UserPassword | Token
CredentialsArg = UserPassword | Token | tuple[str, str] | None


def as_credentials(value: CredentialsArg) -> Credentials | None:
    """Accept ``UserPassword``, ``Token``, a ``(user, password)`` tuple, or None."""
    if isinstance(value, Token):
        if not value.token or any(c.isspace() for c in value.token):
            raise BadRequestError("a token must be a non-empty string without spaces")
        return value
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
        "credentials must be weir.UserPassword(user, password), weir.Token(token) or a "
        "(user, password) tuple"
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
        if isinstance(self.credentials, Token):
            return self.credentials.token
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
        assert isinstance(self.credentials, UserPassword)
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


class AuthedCall:
    """A stream call (bidirectional or server-streaming) that opens itself with the
    connection's token on first use: the token may need a login, which is async, while
    the SDK opens calls synchronously. Once open it is the plain grpc.aio call, so the
    hot path pays nothing; a refusal of the token makes the next call log in again."""

    __slots__ = ("_args", "_call", "_open", "_source", "_token")

    def __init__(self, source: TokenSource, open_call: Callable[..., Any], *args: Any) -> None:
        self._source = source
        self._open = open_call
        self._args = args
        self._call: Any = None
        self._token = ""

    async def _opened(self) -> Any:
        if self._call is None:
            self._token = await self._source.token()
            self._call = self._open(*self._args, metadata=bearer(self._token))
        return self._call

    def _check(self, exc: grpc.aio.AioRpcError) -> None:
        if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
            self._source.refused(self._token)

    async def write(self, request: Any) -> None:
        call = await self._opened()
        try:
            await call.write(request)
        except grpc.aio.AioRpcError as exc:
            self._check(exc)
            raise

    async def read(self) -> Any:
        call = await self._opened()
        try:
            return await call.read()
        except grpc.aio.AioRpcError as exc:
            self._check(exc)
            raise

    async def done_writing(self) -> None:
        await (await self._opened()).done_writing()

    def cancel(self) -> bool:
        return bool(self._call.cancel()) if self._call is not None else False

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._responses()

    async def _responses(self) -> AsyncIterator[Any]:
        call = await self._opened()
        try:
            async for response in call:
                yield response
        except grpc.aio.AioRpcError as exc:
            self._check(exc)
            raise


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries a token."""
    return (("authorization", f"Bearer {token}"),)

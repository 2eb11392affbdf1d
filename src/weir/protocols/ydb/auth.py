"""YDB static credentials: Auth.Login and the ``x-ydb-auth-ticket`` check, over `weir.security`.

The SDK logs in with user and password, then sends the token it got in the
``x-ydb-auth-ticket`` header of every call. Users, tokens (signed, stored
secret, bound to the password) and the anonymous rule live in `weir.security`,
shared with the native front; this module extracts YDB's header and answers in
YDB's words and statuses. Calls without a ticket are served when
``allow_anonymous`` is on; a ticket that is present must be valid either way.

An open StreamWrite or StreamRead is `watching`: when users or grants change, its
caller is checked again inside the call that made the change, and a stream that lost
what it needs is ended there and then (as the native front ends its streams).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import grpc

from weir.broker.broker import Broker
from weir.broker.topics import canonical_topic
from weir.errors import TokenRejectedError, UnauthorizedError, WeirError
from weir.protocols.ydb.protos import ydb_auth_pb2, ydb_auth_v1_pb2_grpc
from weir.protocols.ydb.status import operation
from weir.security import TOKEN_TTL_S, BearerToken, Principal, Security, current_principal
from weir.security.authenticator import Credential
from weir.security.grants import Permission
from weir.security.principal import current_checks
from weir.security.tls import client_certificate, peer_host

AUTH_HEADER = "x-ydb-auth-ticket"


class WatchedStream(Protocol):
    """A stream session as `Authenticator.watching` sees it."""

    credential: Credential | None  # what proves its caller now (a renewed ticket replaces it)
    principal: Principal | None  # None until the stream has authenticated its caller

    def end_access(self, err: WeirError) -> None:
        """End the stream with ``err`` now: take nothing more from the client, send no data."""


class Authenticator:
    """The YDB front's view of `Security`: tickets in, user names out."""

    def __init__(
        self, broker: Broker, *, ttl_s: float = TOKEN_TTL_S, security: Security | None = None
    ) -> None:
        self.security = (
            security if security is not None else Security.for_broker(broker, ttl_s=ttl_s)
        )

    @property
    def allow_anonymous(self) -> bool:
        return self.security.allow_anonymous

    def login(self, user: str, password: str, peer: str = "") -> str:
        """A token for ``user``; UnauthorizedError for a wrong user or password."""
        return self.security.login(user, password, peer).token

    def verify(self, token: str) -> str:
        """The user a ticket was issued to; UnauthorizedError if it is forged or expired."""
        return self.principal_of(token).name

    def check(self, context: grpc.aio.ServicerContext) -> str:
        """The caller's user ("" for anonymous); UnauthorizedError if it may not call."""
        return self.principal(context).name

    def credential(self, context: grpc.aio.ServicerContext) -> Credential | None:
        """The call's ticket, else its client certificate, else None (anonymous)."""
        for key, value in context.invocation_metadata() or ():
            if key == AUTH_HEADER:
                return BearerToken(value if isinstance(value, str) else value.decode(), "ticket")
        return client_certificate(context)

    def principal(self, context: grpc.aio.ServicerContext) -> Principal:
        """The caller (ticket, else client certificate, else anonymous), also set as
        `current_principal`; UnauthorizedError if it may not call."""
        credential = self.credential(context)
        if isinstance(credential, BearerToken):
            found = self.principal_of(credential.token)
        else:
            found = self.security.authenticate(credential)
        current_principal.set(found)
        return found

    @contextlib.contextmanager
    def watching(self, stream: WatchedStream) -> Iterator[None]:
        """While the block runs ``stream``, end it as soon as a change of users or grants takes
        away what it needs: the authorization checks it passed (recorded from here on, in the
        tasks it starts) are made again, with its credential, inside the call that made the
        change, before that call answers; a revoked user's stream does not outlive it."""
        checks: list[tuple[object, str, str]] = []
        reset = current_checks.set(checks)
        ended = False

        def recheck() -> None:
            nonlocal ended
            if ended or stream.principal is None:
                return
            err = self.security.still_allowed(stream.credential, stream.principal, checks)
            if isinstance(err, TokenRejectedError):  # in YDB's words, as `principal_of` says
                err = UnauthorizedError(err.message)
            if err is not None:
                ended = True
                stream.end_access(err)

        stop_watching = self.security.watch(recheck, lambda: stream.credential)
        try:
            yield
        finally:
            stop_watching()
            current_checks.reset(reset)

    def allow(
        self, permission: Permission | None, path: str, database: str, operation: str
    ) -> None:
        """Authorization of the caller (set by `principal`) for ``operation`` on a topic path,
        checked before the topic is looked up."""
        self.security.authorize(
            current_principal.get(), permission, canonical_topic(path, database), operation
        )

    def principal_of(self, token: str) -> Principal:
        try:
            return self.security.authenticate(BearerToken(token, "ticket"))
        except TokenRejectedError as err:  # YDB has no such status: the SDK logs in again itself
            raise UnauthorizedError(err.message) from None


class AuthServicer(ydb_auth_v1_pb2_grpc.AuthServiceServicer):
    """``Ydb.Auth.V1.AuthService``: Login with a static user and password."""

    def __init__(self, auth: Authenticator) -> None:
        self.auth = auth

    async def Login(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            # the password check (scrypt, tens of ms) runs off the event loop
            token = await asyncio.to_thread(
                self.auth.login, request.user, request.password, peer_host(context)
            )
        except UnauthorizedError as err:
            return ydb_auth_pb2.LoginResponse(operation=operation(error=err))
        result = ydb_auth_pb2.LoginResult(token=token)
        return ydb_auth_pb2.LoginResponse(operation=operation(result))

"""YDB static credentials: Auth.Login and the ``x-ydb-auth-ticket`` check, over `weir.security`.

The SDK logs in with user and password, then sends the token it got in the
``x-ydb-auth-ticket`` header of every call. Users, tokens (signed, stored
secret, bound to the password) and the anonymous rule live in `weir.security`,
shared with the native front; this module extracts YDB's header and answers in
YDB's words and statuses. Calls without a ticket are served when
``allow_anonymous`` is on; a ticket that is present must be valid either way.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from weir.broker.broker import Broker
from weir.broker.topics import canonical_topic
from weir.errors import TokenRejectedError, UnauthorizedError
from weir.protocols.ydb.protos import ydb_auth_pb2, ydb_auth_v1_pb2_grpc
from weir.protocols.ydb.status import operation
from weir.security import TOKEN_TTL_S, BearerToken, Principal, Security, current_principal
from weir.security.grants import Permission
from weir.security.tls import client_certificate, peer_host

AUTH_HEADER = "x-ydb-auth-ticket"


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

    def principal(self, context: grpc.aio.ServicerContext) -> Principal:
        """The caller (ticket, else client certificate, else anonymous), also set as
        `current_principal`; UnauthorizedError if it may not call."""
        found: Principal | None = None
        for key, value in context.invocation_metadata() or ():
            if key == AUTH_HEADER:
                found = self.principal_of(value if isinstance(value, str) else value.decode())
                break
        if found is None:
            found = self.security.authenticate(client_certificate(context))
        current_principal.set(found)
        return found

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

"""Authentication on the native front: the bearer token of every call, checked by `weir.security`.

`guard` wraps each method handler (unary, server-streaming and bidirectional
alike) so that the call is admitted before the handler runs: the
``authorization: Bearer <token>`` metadata is authenticated, or the call counts
as anonymous when it has none. A refused call ends with UNAUTHENTICATED and the
weir code in the trailing metadata, before any request is read. The principal
is set in `weir.security.current_principal` for the handler.

A refused *streaming* call first waits (briefly) for the client's first request:
a client that opens a stream writes at once, and when the server's end arrives
before that write completes, gRPC's client reports the write as "Internal error
from Core" and the UNAUTHENTICATED status is lost to it (seen in about one call
in twelve). Read first, refuse after, and the client reads the real status.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from weir.errors import UnauthorizedError, WeirError
from weir.protocols.native.status import CODE_KEY, grpc_status
from weir.security import BearerToken, Principal, Security, current_principal
from weir.security.authenticator import Credential
from weir.security.principal import current_checks
from weir.security.tls import client_certificate

AUTHORIZATION = "authorization"
BEARER = "bearer "
MAX_TOKEN_CHARS = 8192
# Methods served without authentication: the one that hands out tokens.
PUBLIC_METHODS = frozenset({"Login"})
# How long a refused stream waits for the client's first request before ending.
FIRST_REQUEST_WAIT_S = 2.0


def bearer_token(metadata: Any) -> BearerToken | None:
    """The bearer token of a call's metadata; None when it carries none."""
    for key, value in metadata or ():
        if key != AUTHORIZATION:
            continue
        text = value if isinstance(value, str) else value.decode(errors="replace")
        if len(text) > MAX_TOKEN_CHARS:
            raise UnauthorizedError(f"authorization metadata too long ({len(text)} characters)")
        if not text.lower().startswith(BEARER):
            raise UnauthorizedError("authorization metadata must be 'Bearer <token>'")
        return BearerToken(text[len(BEARER) :].strip())
    return None


async def admit(
    security: Security,
    context: grpc.aio.ServicerContext,
    requests: AsyncIterator[Any] | None = None,
) -> tuple[Principal, Credential | None]:
    """The caller's principal and the credential that proved it; a refused call is aborted
    with UNAUTHENTICATED.

    ``requests``: the request stream of a client-streaming call (see the module docstring).
    """
    credential: Credential | None = None
    try:
        credential = bearer_token(context.invocation_metadata()) or client_certificate(context)
        principal = security.authenticate(credential)
    except WeirError as err:
        if requests is not None:
            with contextlib.suppress(Exception):  # its content is never looked at
                await asyncio.wait_for(anext(requests, None), FIRST_REQUEST_WAIT_S)
        await context.abort(
            grpc_status(err), err.message, trailing_metadata=((CODE_KEY, err.code),)
        )
        raise AssertionError("unreachable") from None
    current_principal.set(principal)
    return principal, credential


async def _watched(
    security: Security,
    behavior: Callable[..., Any],
    request: Any,
    context: grpc.aio.ServicerContext,
    principal: Principal,
    credential: Credential | None,
) -> Any:
    """Run a stream and end it (with the reason, as its status) as soon as a change of users
    or grants takes away what it needs, or its token expires: a revoked user's stream does
    not outlive it, nor a stream its token's lifetime (a weir token's expiry ends it with the
    retryable TOKEN_REJECTED, and the SDK logs in again and reopens it; a JWT's with
    UNAUTHENTICATED: the client needs a new one)."""
    checks: list[tuple[object, str, str]] = []
    current_checks.set(checks)  # filled by the authorization checks the stream passes
    task = asyncio.ensure_future(behavior(request, context))
    ended: list[WeirError] = []

    def recheck() -> None:  # run inside the call that changed users or grants
        if ended or task.done():
            return
        err = security.still_allowed(credential, principal, checks)
        if err is not None:
            ended.append(err)
            task.cancel()  # before that call answers: nothing sent after its answer lands

    stop_watching = security.watch(recheck, lambda: credential)
    try:
        try:
            return await task
        except asyncio.CancelledError:
            if not ended:
                raise
        err = ended[0]
        await context.abort(
            grpc_status(err), err.message, trailing_metadata=((CODE_KEY, err.code),)
        )
    finally:
        stop_watching()
        task.cancel()
    raise AssertionError("unreachable")


def guard(
    security: Security, behavior: Callable[..., Any], *, client_streaming: bool = False
) -> Callable[..., Any]:
    """``behavior`` (a method handler) behind the authentication check."""
    if inspect.isasyncgenfunction(behavior):

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await admit(security, context, request if client_streaming else None)
            async for response in behavior(request, context):
                yield response

        return stream

    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        principal, credential = await admit(
            security, context, request if client_streaming else None
        )
        if client_streaming:  # the write and read sessions: they last
            return await _watched(security, behavior, request, context, principal, credential)
        return await behavior(request, context)

    return call

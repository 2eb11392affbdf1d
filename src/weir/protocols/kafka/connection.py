"""One Kafka client connection: framing, ordered answers, authentication state, dispatch.

Requests are received straight into buffers of their own (`framing.FrameReader`
behind an asyncio BufferedProtocol) and each is handled in its own task, started in
arrival order (so a Produce is queued for storage in the order it arrived, before
the next request starts), while answers go out strictly in request order, as Kafka
clients expect. Past ``MAX_IN_FLIGHT`` requests in hand the connection stops reading
(backpressure) until answers go out.

Before a client authenticates (when the server asks for credentials), only
ApiVersions, SaslHandshake and SaslAuthenticate are served; anything else closes
the connection, as Kafka does. An authenticated connection is closed as soon as it
loses its caller: when the OAUTHBEARER token it logged in with expires (a client
reconnects with a new one; `session_lifetime_ms` stays 0, so clients do not try
KIP-368's re-authentication on the connection), or when a change of users takes
the user away (deleted, password changed). Grants are checked on every request, so
a revoked grant applies to the next one. Undecodable bytes and unknown APIs close it too;
ApiVersions of an unknown version is answered with UNSUPPORTED_VERSION and the
versions served (the client retries with one of them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from weir.errors import PermissionDeniedError, UnauthorizedError, WeirError
from weir.protocols.kafka import messages as m
from weir.protocols.kafka import txn_messages as tm
from weir.protocols.kafka.admin import AdminHandlers
from weir.protocols.kafka.codec import (
    Api,
    KafkaCodecError,
    Message,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    encode_response,
)
from weir.protocols.kafka.errors import ErrorCode, KafkaError, error_code
from weir.protocols.kafka.fetch import FetchHandlers
from weir.protocols.kafka.framing import FrameReader, FrameSizeError
from weir.protocols.kafka.group_api import GroupHandlers
from weir.protocols.kafka.produce import ProduceHandlers
from weir.protocols.kafka.sasl import SaslExchange
from weir.security.authenticator import BearerToken
from weir.security.principal import ANONYMOUS, Principal

if TYPE_CHECKING:
    from weir.protocols.kafka.front import KafkaFront

log = logging.getLogger("weir.kafka")

MAX_IN_FLIGHT = 32
UNAUTHENTICATED_APIS = frozenset(
    {m.API_VERSIONS.key, m.SASL_HANDSHAKE.key, m.SASL_AUTHENTICATE.key}
)

Handler = Callable[[RequestHeader, Message], Awaitable[Message | None]]


class KafkaConnection(asyncio.BufferedProtocol):
    """Serves one client connection until it closes; see the module docstring.

    An asyncio ``BufferedProtocol``: requests are received straight into their own
    buffers (`weir.protocols.kafka.framing`) and dispatched as they complete; a task
    writes the answers in request order.
    """

    def __init__(self, front: KafkaFront) -> None:
        self.front = front
        self.broker = front.broker
        self.security = front.security
        self.transport: asyncio.Transport | None = None
        self.peer_host = ""
        self.principal: Principal | None = None
        self.sasl: SaslExchange | None = None
        self._credential: BearerToken | None = None  # an OAUTHBEARER token: it expires
        self._expires_at: float | None = None
        self._fingerprint: bytes | None = None  # a password user's, at login
        self._stop_watching: Callable[[], None] | None = None
        self._frames = FrameReader(front.config.max_request_bytes, self._dispatch)
        self._answers: deque[tuple[Api, RequestHeader, asyncio.Task[Message | None]]] = deque()
        self._more = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._reading_paused = False
        self._closing = False
        self.closed = asyncio.get_running_loop().create_future()
        self._sender: asyncio.Task[None] | None = None
        produce = ProduceHandlers(self)
        fetch = FetchHandlers(self)
        groups = GroupHandlers(self)
        admin = AdminHandlers(self)
        txns = produce.txn_handlers  # InitProducerId with a transactional id goes there too
        self.handlers: dict[int, Handler] = {
            m.API_VERSIONS.key: self.handle_api_versions,
            m.SASL_HANDSHAKE.key: self.handle_sasl_handshake,
            m.SASL_AUTHENTICATE.key: self.handle_sasl_authenticate,
            m.METADATA.key: admin.handle_metadata,
            m.PRODUCE.key: produce.handle_produce,
            tm.INIT_PRODUCER_ID.key: produce.handle_init_producer_id,
            tm.ADD_PARTITIONS_TO_TXN.key: txns.handle_add_partitions,
            tm.ADD_OFFSETS_TO_TXN.key: txns.handle_add_offsets,
            tm.TXN_OFFSET_COMMIT.key: txns.handle_txn_offset_commit,
            tm.END_TXN.key: txns.handle_end_txn,
            m.FETCH.key: fetch.handle_fetch,
            m.LIST_OFFSETS.key: fetch.handle_list_offsets,
            m.FIND_COORDINATOR.key: groups.handle_find_coordinator,
            m.JOIN_GROUP.key: groups.handle_join_group,
            m.SYNC_GROUP.key: groups.handle_sync_group,
            m.HEARTBEAT.key: groups.handle_heartbeat,
            m.LEAVE_GROUP.key: groups.handle_leave_group,
            m.OFFSET_COMMIT.key: groups.handle_offset_commit,
            m.OFFSET_FETCH.key: groups.handle_offset_fetch,
            m.DESCRIBE_GROUPS.key: groups.handle_describe_groups,
            m.LIST_GROUPS.key: groups.handle_list_groups,
            m.DELETE_GROUPS.key: groups.handle_delete_groups,
            m.OFFSET_DELETE.key: groups.handle_offset_delete,
            m.CREATE_TOPICS.key: admin.handle_create_topics,
            m.DELETE_TOPICS.key: admin.handle_delete_topics,
            m.CREATE_PARTITIONS.key: admin.handle_create_partitions,
            m.DESCRIBE_CONFIGS.key: admin.handle_describe_configs,
            m.ALTER_CONFIGS.key: admin.handle_alter_configs,
            m.INCREMENTAL_ALTER_CONFIGS.key: admin.handle_incremental_alter_configs,
            m.DELETE_RECORDS.key: admin.handle_delete_records,
            m.DESCRIBE_CLUSTER.key: admin.handle_describe_cluster,
        }

    # ------------------------------------------------------------------ asyncio protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        cert_principal = self.front.certificate_principal(transport)
        if cert_principal is not None:
            self.principal = cert_principal
        elif self.security.allow_anonymous:
            self.principal = ANONYMOUS
        self.front.connection_opened(self)
        self._sender = asyncio.get_running_loop().create_task(self._send_loop())

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:
            return
        try:
            self._frames.buffer_updated(nbytes)
        except (_Close, FrameSizeError) as why:
            log.info("closing Kafka connection", extra={"peer": self.peer_host, "reason": str(why)})
            self.close()
            return
        if len(self._answers) >= MAX_IN_FLIGHT and not self._reading_paused:
            self._reading_paused = True  # backpressure: resumed as answers go out
            assert self.transport is not None
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._more.set()
        self._writable.set()
        for _, _, task in self._answers:
            task.cancel()
        if self._stop_watching is not None:
            self._stop_watching()
        self.front.connection_closed(self)
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def close(self) -> None:
        """Stop serving: in-flight requests are cancelled, the transport closes."""
        self._closing = True
        self._more.set()
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ requests, answers

    def _dispatch(self, frame: memoryview) -> None:
        try:
            header, api, body = decode_request(m.BY_KEY, frame)
        except UnsupportedVersionError as exc:
            if exc.api_key != m.API_VERSIONS.key:
                raise _Close(str(exc)) from None
            header = RequestHeader(exc.api_key, 0, exc.correlation_id, None)
            self._queue(m.API_VERSIONS, header, self._unsupported_api_versions())
            return
        except KafkaCodecError as exc:
            log.debug("undecodable Kafka request", extra={"frame": bytes(frame[:256]).hex()})
            raise _Close(f"undecodable request: {exc}") from None
        if self.principal is None and api.key not in UNAUTHENTICATED_APIS:
            raise _Close(f"{api.name} before authentication")
        if self._expires_at is not None and time.time() >= self._expires_at:
            raise _Close(f"{api.name} after the OAUTHBEARER token expired")
        self._queue(api, header, self.handlers[api.key](header, body))

    def _queue(self, api: Api, header: RequestHeader, coro: Awaitable[Message | None]) -> None:
        task = asyncio.ensure_future(coro)
        self._answers.append((api, header, task))
        self._more.set()

    async def _send_loop(self) -> None:
        transport = self.transport
        assert transport is not None
        try:
            while True:
                if not self._answers:
                    if self._closing:
                        return
                    self._more.clear()
                    await self._more.wait()
                    continue
                api, header, task = self._answers[0]
                try:
                    body = await task
                except (_Close, asyncio.CancelledError):
                    return
                except Exception:
                    log.exception("Kafka request failed", extra={"api": api.name})
                    return
                finally:
                    if self._answers and self._answers[0][2] is task:
                        self._answers.popleft()
                    if self._reading_paused and len(self._answers) < MAX_IN_FLIGHT:
                        self._reading_paused = False
                        if not self._closing:
                            transport.resume_reading()
                if self._closing and transport.is_closing():
                    return
                if body is not None:  # None: an acks=0 produce gets no answer
                    transport.write(
                        encode_response(api, header.api_version, header.correlation_id, body)
                    )
                if not self._writable.is_set():
                    await self._writable.wait()
                if self._closing and not self._answers:
                    return  # answered what was asked before a close (a failed SASL login)
        finally:
            transport.close()

    # ------------------------------------------------------------------ helpers for handlers

    def require_principal(self) -> Principal:
        if self.principal is None:
            raise _Close("not authenticated")
        return self.principal

    def allow(self, permission: Any, topic: str, operation: str) -> None:
        """Raise PermissionDeniedError unless the caller may (``topic``: weir's full name)."""
        self.security.authorize(self.require_principal(), permission, topic, operation)

    def allow_group(self, group: str, operation: str) -> None:
        """Raise KafkaError GROUP_AUTHORIZATION_FAILED unless the caller may ``operation``
        under consumer group ``group`` (Kafka's READ / DESCRIBE / DELETE on the Group
        resource: weir's consume on ``group:NAME``)."""
        try:
            self.security.authorize_group(self.require_principal(), group, operation)
        except PermissionDeniedError as exc:
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, exc.message) from None

    # ------------------------------------------------------------------ ApiVersions, SASL

    def api_keys(self) -> list[Message]:
        return [
            {"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
            for a in m.ALL
        ]

    async def _unsupported_api_versions(self) -> Message:
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": self.api_keys()}

    async def handle_api_versions(self, header: RequestHeader, body: Message) -> Message:
        return {"error_code": 0, "api_keys": self.api_keys()}

    async def handle_sasl_handshake(self, header: RequestHeader, body: Message) -> Message:
        mechanisms = self.front.sasl_mechanisms()
        mech = body["mechanism"]
        if mech not in mechanisms:
            return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
        self.sasl = SaslExchange(mech, self.security, self.peer_host)
        return {"error_code": 0, "mechanisms": mechanisms}

    async def handle_sasl_authenticate(self, header: RequestHeader, body: Message) -> Message:
        if self.sasl is None:
            return {
                "error_code": ErrorCode.ILLEGAL_SASL_STATE,
                "error_message": "SaslAuthenticate before SaslHandshake",
            }
        try:
            reply, principal = await self.sasl.step(body["auth_bytes"])
        except (UnauthorizedError, WeirError) as err:
            self.sasl = None
            # answer, then close: a failed authentication ends the connection (as in Kafka)
            self._closing = True
            return {
                "error_code": error_code(err)
                if not isinstance(err, UnauthorizedError)
                else ErrorCode.SASL_AUTHENTICATION_FAILED,
                "error_message": err.message,
            }
        if principal is not None:
            self._logged_in(principal, self.sasl.credential)
            self.sasl = None
        return {"error_code": 0, "auth_bytes": reply, "session_lifetime_ms": 0}

    def _logged_in(self, principal: Principal, credential: BearerToken | None) -> None:
        """Watch the caller from now on: see the module docstring."""
        self.principal = principal
        self._credential = credential
        self._expires_at = self.security.expires_at(credential)
        self._fingerprint = (
            self.security.fingerprint(principal.name) if credential is None else None
        )
        if self._stop_watching is None:
            self._stop_watching = self.security.watch(self._recheck, lambda: self._credential)

    def _recheck(self) -> None:
        if self._closing or self.principal is None:
            return
        if self._credential is not None:
            err = self.security.still_allowed(self._credential, self.principal, [])
            why = err.message if err is not None else None
        elif self.security.fingerprint(self.principal.name) != self._fingerprint:
            why = "the user was deleted or its password changed"
        else:
            why = None
        if why is not None:
            log.info("Kafka connection ended: %s", why, extra={"peer": self.peer_host})
            self.close()
            for _, _, task in self._answers:
                task.cancel()


class _Close(Exception):
    """End the connection (a protocol violation, not an error to answer)."""

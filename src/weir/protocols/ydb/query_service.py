"""``Ydb.Query.V1.QueryService``: what the SDK's transactions need, and no SQL.

The ydb SDK's transactional topic writer and reader
(``topic_client.tx_writer(tx, ...)``, ``reader.receive_batch_with_tx(tx)``) take a
transaction of the SDK's query session pool. weir serves what that pool does with
one: CreateSession, AttachSession (a stream that stays open while the session
lives: the SDK drops a session whose stream ends), DeleteSession,
BeginTransaction, CommitTransaction and RollbackTransaction.

A transaction here is a broker transaction (`weir.broker.transactions`) owned by
its session, named ``weir-tx-<id in hex>``: StreamWrite requests naming it write
into it, UpdateOffsetsInTransaction stages its consumer offsets, and only its
session may end it. A session that goes away (DeleteSession, its attach stream
closing) aborts the transactions it left open. ExecuteQuery, ExecuteScript and
FetchScriptResults answer UNSUPPORTED: weir runs no SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from weir.broker.broker import Broker
from weir.errors import UnknownTransactionError, WeirError
from weir.protocols.ydb.auth import Authenticator
from weir.protocols.ydb.discovery import node_of
from weir.protocols.ydb.protos import ydb_query_pb2, ydb_query_v1_pb2_grpc
from weir.protocols.ydb.shutdown import ServerState, Shutdown
from weir.protocols.ydb.status import (
    SUCCESS,
    UnsupportedError,
    as_weir_error,
    issue,
    operation,
    status_of,
)

log = logging.getLogger("weir.ydb.query")

TX_PREFIX = "weir-tx-"
NO_SQL = (
    "weir serves the YDB Topic API and the query-session calls its transactions need; "
    "it runs no SQL queries"
)


class BadSessionError(WeirError):
    """The query session is unknown or over: YDB's BAD_SESSION (the SDK makes a new one)."""

    code = "BAD_SESSION"


def tx_id_of(txn_id: int) -> str:
    return f"{TX_PREFIX}{txn_id:x}"


def txn_id_of(tx_id: str) -> int:
    """The broker transaction a YDB transaction id names (UnknownTransactionError if none)."""
    if tx_id.startswith(TX_PREFIX):
        with contextlib.suppress(ValueError):
            return int(tx_id[len(TX_PREFIX) :], 16)
    raise UnknownTransactionError(f"transaction {tx_id!r} is unknown")


@dataclass(eq=False)
class QuerySession:
    id: str
    owner: str  # the principal that made it
    txns: set[int] = field(default_factory=set)
    closed: asyncio.Event = field(default_factory=asyncio.Event)


Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[Any]]


def _answer(response: Any) -> Callable[[Handler], Handler]:
    """Run the call; an error becomes the response's status and issue (no exception)."""

    def wrap(fn: Handler) -> Handler:
        async def call(self: QueryServicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                self.auth.check(context)
                return await fn(self, request, context)
            except Exception as err:
                werr = as_weir_error(err)
                return response(status=status_of(werr), issues=[issue(werr.message)])

        call.__name__ = fn.__name__
        call.__doc__ = fn.__doc__
        return call

    return wrap


class QueryServicer(ydb_query_v1_pb2_grpc.QueryServiceServicer):
    """Query sessions and their transactions over the broker; see the module docstring."""

    def __init__(self, broker: Broker, auth: Authenticator, server: ServerState) -> None:
        self.broker = broker
        self.auth = auth
        self.shutdown = Shutdown(server)
        self.sessions: dict[str, QuerySession] = {}

    def session(self, session_id: str, context: grpc.aio.ServicerContext) -> QuerySession:
        s = self.sessions.get(session_id)
        if s is None or s.owner != self.auth.check(context):
            raise BadSessionError(f"query session {session_id!r} is unknown or over")
        return s

    async def _end_session(self, s: QuerySession) -> None:
        if self.sessions.get(s.id) is not s:
            return
        del self.sessions[s.id]
        s.closed.set()
        for txn_id in list(s.txns):
            with contextlib.suppress(WeirError):  # ended meanwhile: nothing to undo
                await self.broker.abort_transaction(
                    txn_id, s.id, "it was aborted: its query session ended"
                )

    # ------------------------------------------------------------------ sessions

    @_answer(ydb_query_pb2.CreateSessionResponse)
    async def CreateSession(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        s = QuerySession(f"weir-qs-{uuid.uuid4().hex}", self.auth.check(context))
        self.sessions[s.id] = s
        return ydb_query_pb2.CreateSessionResponse(
            status=SUCCESS, session_id=s.id, node_id=node_of(self.broker.cluster)
        )

    @_answer(ydb_query_pb2.DeleteSessionResponse)
    async def DeleteSession(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        s = self.sessions.get(request.session_id)
        if s is not None and s.owner == self.auth.check(context):
            await self._end_session(s)
        return ydb_query_pb2.DeleteSessionResponse(status=SUCCESS)

    async def AttachSession(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """One SessionState (SUCCESS), then open until the session ends; its close ends it."""
        try:
            s = self.session(request.session_id, context)
        except Exception as err:
            werr = as_weir_error(err)
            yield ydb_query_pb2.SessionState(status=status_of(werr), issues=[issue(werr.message)])
            return
        try:
            yield ydb_query_pb2.SessionState(status=SUCCESS)
            stop = asyncio.ensure_future(self.shutdown.wait())
            closed = asyncio.ensure_future(s.closed.wait())
            try:
                await asyncio.wait({stop, closed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                closed.cancel()
            if not s.closed.is_set():  # the server is stopping
                yield ydb_query_pb2.SessionState(
                    status=status_of(BadSessionError()),
                    issues=[issue("server is shutting down")],
                )
        finally:
            # the client hung up (or the session is over): what it left open is aborted
            await asyncio.shield(self._end_session(s))

    # ------------------------------------------------------------------ transactions

    @_answer(ydb_query_pb2.BeginTransactionResponse)
    async def BeginTransaction(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        s = self.session(request.session_id, context)
        txn = await self.broker.begin_transaction(owner=s.id)
        s.txns.add(txn.id)
        return ydb_query_pb2.BeginTransactionResponse(
            status=SUCCESS, tx_meta=ydb_query_pb2.TransactionMeta(id=tx_id_of(txn.id))
        )

    @_answer(ydb_query_pb2.CommitTransactionResponse)
    async def CommitTransaction(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        s = self.session(request.session_id, context)
        txn_id = txn_id_of(request.tx_id)
        try:
            await self.broker.commit_transaction(txn_id, s.id)
        finally:
            if txn_id not in self.broker.transactions.open_ids:
                s.txns.discard(txn_id)
        return ydb_query_pb2.CommitTransactionResponse(status=SUCCESS)

    @_answer(ydb_query_pb2.RollbackTransactionResponse)
    async def RollbackTransaction(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        s = self.session(request.session_id, context)
        txn_id = txn_id_of(request.tx_id)
        try:
            await self.broker.abort_transaction(txn_id, s.id)
        finally:
            if txn_id not in self.broker.transactions.open_ids:
                s.txns.discard(txn_id)
        return ydb_query_pb2.RollbackTransactionResponse(status=SUCCESS)

    # ------------------------------------------------------------------ no SQL

    async def ExecuteQuery(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        yield ydb_query_pb2.ExecuteQueryResponsePart(
            status=status_of(UnsupportedError()), issues=[issue(NO_SQL)]
        )

    async def ExecuteScript(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return operation(error=UnsupportedError(NO_SQL))

    async def FetchScriptResults(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return ydb_query_pb2.FetchScriptResultsResponse(
            status=status_of(UnsupportedError()), issues=[issue(NO_SQL)]
        )

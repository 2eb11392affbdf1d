"""The native front's transaction calls (a mixin of `NativeService`): each translates one
message into one broker call. A transaction belongs to the principal that began it:
another principal's calls find it unknown."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import grpc

from weir.broker.transactions.facade import TxnOffset
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.stream import Allow
from weir.protocols.native.unary import unary
from weir.security import Security, current_principal
from weir.security.grants import Permission

if TYPE_CHECKING:
    from weir.broker.broker import Broker

Ctx: TypeAlias = grpc.aio.ServicerContext


def transaction_owner() -> str:
    """The owner of the caller's transactions: its principal (anonymous callers share one)."""
    p = current_principal.get()
    return "" if p.anonymous else f"native:{p.name}"


class TransactionCalls:
    """InitTransactions, BeginTransaction, AddTransactionOffsets, Commit/AbortTransaction."""

    broker: Broker
    security: Security

    _allow: Allow  # NativeService's authorization

    @unary
    async def InitTransactions(
        self, request: pb.InitTransactionsRequest, context: Ctx
    ) -> pb.InitTransactionsResponse:
        p = await self.broker.init_transactional_producer(request.transactional_id)
        return pb.InitTransactionsResponse(producer_number=p.number, epoch=p.epoch)

    @unary
    async def BeginTransaction(
        self, request: pb.BeginTransactionRequest, context: Ctx
    ) -> pb.BeginTransactionResponse:
        txn = await self.broker.begin_transaction(
            producer=request.transactional_id,
            epoch=request.epoch if request.HasField("epoch") else None,
            key=request.key if request.HasField("key") else None,
            timeout_ms=request.timeout_ms or None,
            owner=transaction_owner(),
        )
        return pb.BeginTransactionResponse(transaction_id=txn.id, timeout_ms=txn.timeout_ms)

    @unary
    async def AddTransactionOffsets(
        self, request: pb.AddTransactionOffsetsRequest, context: Ctx
    ) -> pb.AddTransactionOffsetsResponse:
        for o in request.offsets:
            self._allow(Permission.CONSUME, o.topic, "commit an offset of", request.consumer)
        await self.broker.add_transaction_offsets(
            request.transaction_id,
            [TxnOffset(o.topic, o.partition, request.consumer, o.offset) for o in request.offsets],
            owner=transaction_owner(),
        )
        return pb.AddTransactionOffsetsResponse()

    @unary
    async def CommitTransaction(
        self, request: pb.EndTransactionRequest, context: Ctx
    ) -> pb.EndTransactionResponse:
        await self.broker.commit_transaction(request.transaction_id, transaction_owner())
        return pb.EndTransactionResponse()

    @unary
    async def AbortTransaction(
        self, request: pb.EndTransactionRequest, context: Ctx
    ) -> pb.EndTransactionResponse:
        await self.broker.abort_transaction(request.transaction_id, transaction_owner())
        return pb.EndTransactionResponse()

"""Transactions in the SDK: writes to many partitions and consumer offsets, all or nothing.

    async with client.transaction() as tx:          # weir.aio; `with` in weir
        batch = await reader.receive_batch()
        out = tx.writer("out")
        await out.write(transform(batch))
        await reader.commit(batch, transaction=tx)  # the offsets move with the commit
    # leaving the block commits: every writer of tx is flushed, then the server makes
    # every message and offset visible at once; an exception aborts instead

Writers made by `Transaction.writer` write into the transaction; read-committed
readers see nothing of it until it commits and nothing at all if it aborts
(read-uncommitted readers see its messages as they are stored, as Kafka's). With
a ``transactional_id`` the client is one *instance* of a transactional producer:
its first transaction with that id starts a new instance on the server, which
fences every older instance (their writes and commits fail with
ProducerFencedError) and aborts what an older one left open. With a ``key`` as
well, the transaction is *joinable*: every process that begins one with the same
id and key gets the same open transaction (there is no fencing then), and any of
them, knowing its ``id``, may end it with `Client.commit_transaction` (the Spark
sink: its tasks write into the micro-batch's transaction, its driver commits).
A transaction that is neither committed nor aborted within ``timeout`` is
aborted by the server.

The commit is sent once; when its answer is lost and the call is retried, a
"committed already" answer means it landed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from weir.client.messages import Batch, Message
from weir.errors import (
    BadRequestError,
    ClosedError,
    TransactionCommittedError,
    WeirError,
)
from weir.protocols.native import weir_pb2 as pb

if TYPE_CHECKING:
    from weir.client.aio import Client, Writer


def timeout_ms(timeout: float | dt.timedelta | None) -> int:
    if timeout is None:
        return 0
    seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else float(timeout)
    if not seconds > 0:
        raise BadRequestError(f"a transaction timeout must be > 0 seconds, got {timeout!r}")
    return max(1, int(seconds * 1000))


def offsets_of(items: Message | Batch | Iterable[Message | Batch]) -> list[pb.TransactionOffset]:
    """The next offset to read per partition, after every message or batch of ``items``."""
    seq = [items] if isinstance(items, Message | Batch) else list(items)
    top: dict[tuple[str, int], int] = {}
    for item in seq:
        if not isinstance(item, Message | Batch):
            raise BadRequestError(f"commit takes Messages or Batches, not {type(item).__name__}")
        key = (item.topic, item.partition)
        top[key] = max(top.get(key, 0), item.commit_offset)
    return [pb.TransactionOffset(topic=t, partition=p, offset=o) for (t, p), o in top.items()]


class Transaction:
    """An asyncio transaction (`weir.aio.Client.transaction`); see the module docstring."""

    def __init__(
        self,
        client: Client,
        *,
        transactional_id: str | None = None,
        key: str | None = None,
        timeout: float | dt.timedelta | None = None,
    ) -> None:
        self._client = client
        self.transactional_id = transactional_id
        self.key = key
        self._timeout_ms = timeout_ms(timeout)
        self.id: int | None = None
        self.timeout_ms: int | None = None
        self.state = "new"  # new, open, ending, committed, aborted
        self._writers: list[Writer] = []

    async def begin(self, *, call_timeout: float | None = 30.0) -> Transaction:
        """Open the transaction on the server (``async with`` does it for you)."""
        if self.state != "new":
            raise BadRequestError(f"transaction is {self.state}, it cannot begin again")
        req = pb.BeginTransactionRequest(
            transactional_id=self.transactional_id or "", timeout_ms=self._timeout_ms
        )
        if self.transactional_id and self.key is None:  # joinable ones are shared: no fencing
            req.epoch = await self._client._producer_epoch(self.transactional_id, call_timeout)
        if self.key is not None:
            req.key = self.key
        resp = await self._client.conn.call("BeginTransaction", req, call_timeout)
        self.id = resp.transaction_id
        self.timeout_ms = resp.timeout_ms
        self.state = "open"
        return self

    def _check_open(self) -> int:
        if self.state != "open" or self.id is None:
            raise ClosedError(f"transaction is {self.state}: begin one to write in")
        return self.id

    def writer(self, topic: str, **kwargs: Any) -> Writer:
        """A writer (see `weir.aio.Client.writer`, same arguments) whose messages belong to
        this transaction. The commit flushes and closes it; do not reuse it after."""
        txn_id = self._check_open()
        w = self._client.writer(topic, transaction_id=txn_id, **kwargs)
        self._writers.append(w)
        return w

    async def commit_offsets(
        self,
        items: Message | Batch | Iterable[Message | Batch],
        consumer: str,
        *,
        call_timeout: float | None = 30.0,
    ) -> None:
        """Commit ``consumer``'s offsets past ``items`` as part of this transaction: they move
        when it commits, never if it aborts (`Reader.commit` with ``transaction=``)."""
        txn_id = self._check_open()
        if not consumer:
            raise BadRequestError("offsets in a transaction need a consumer")
        req = pb.AddTransactionOffsetsRequest(
            transaction_id=txn_id, consumer=consumer, offsets=offsets_of(items)
        )
        await self._client.conn.call("AddTransactionOffsets", req, call_timeout)

    async def commit(self, *, call_timeout: float | None = 60.0) -> None:
        """Flush and close every writer of the transaction, then commit it: every message and
        offset becomes visible at once. A writer that failed aborts it instead (and raises)."""
        txn_id = self._check_open()
        self.state = "ending"
        try:
            for w in self._writers:
                await w.close()
        except BaseException:
            await self._abort(txn_id, call_timeout)
            raise
        try:
            await self._client.conn.call(
                "CommitTransaction", pb.EndTransactionRequest(transaction_id=txn_id), call_timeout
            )
        except TransactionCommittedError:
            pass  # a retry after a lost answer: the first attempt committed it
        except WeirError as err:
            # over on the server (aborted, timed out, fenced, forgotten), or still open (a
            # commit that failed, or an answer that never came: the outcome is unknown)
            self.state = "open" if err.retryable else "aborted"
            raise
        except BaseException:
            self.state = "open"
            raise
        self.state = "committed"

    async def abort(self, *, call_timeout: float | None = 30.0) -> None:
        """Discard every message and offset of the transaction."""
        txn_id = self._check_open()
        self.state = "ending"
        await self._abort(txn_id, call_timeout)

    async def _abort(self, txn_id: int, call_timeout: float | None) -> None:
        for w in self._writers:
            with contextlib.suppress(WeirError):
                await w._core.close(0.0)  # no flush: what was not sent is discarded
        try:
            await self._client.conn.call(
                "AbortTransaction", pb.EndTransactionRequest(transaction_id=txn_id), call_timeout
            )
        finally:
            self.state = "aborted"

    async def __aenter__(self) -> Transaction:
        if self.state == "new":
            await self.begin()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.state != "open":
            return
        if e is None:
            await self.commit()
            return
        with contextlib.suppress(WeirError):  # the error on its way out is the one to see
            await self.abort()

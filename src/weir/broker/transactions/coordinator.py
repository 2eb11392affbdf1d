"""The transaction coordinator: begin, admit writes and offsets, commit or abort, time out.

A transaction groups writes to any partitions of any topics and consumer offset
commits. Its writes go into the log at once, as any write (read-uncommitted
readers see them); each partition's `weir.storage.txn_state` keeps it open, which
holds that partition's last stable offset, so read-committed readers wait. Its
offsets wait here, in memory.

**Commit and abort** (`_end`): wait until every write admitted into it has been
answered, queue a marker on every partition it wrote to (one step, so every
actor meets the ends of all transactions in one order), let each actor prepare its
marker, then commit every marker, every offset and nothing else as **one job of
the group committer**, so one KV transaction and one fsync make the whole outcome
durable; then apply every partition's change and the offsets in one step of the
event loop. A commit that fails changes nothing: the transaction is open again.

**Crash safety**: the coordinator's durable state is what the partitions hold
(an open transaction's batches, in the same KV as everything else) and the
transactional producers' epochs. A restart (kill -9 included) finds every
transaction either with its markers (its one KV transaction committed) or still
open in the partitions, and `recover` aborts those before the server serves:
every transaction ends in exactly one of the two outcomes. Offsets of a
transaction are written only by its commit.

**Timeouts**: a transaction neither committed nor aborted within its timeout is
aborted. **Fencing**: see `weir.broker.transactions.producers`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable, KeysView
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from weir.broker.config import BrokerConfig
from weir.broker.transactions.commit_group import CommitGroup
from weir.broker.transactions.producers import TransactionalProducers, TxnProducer
from weir.broker.transactions.transaction import Transaction, TxnState
from weir.errors import (
    BadRequestError,
    CommitFailedError,
    ProducerFencedError,
    TransactionBusyError,
    TransactionCommittedError,
    TransactionEndedError,
    UnavailableError,
    UnknownTransactionError,
    WeirError,
)
from weir.storage.committer import GroupCommitter
from weir.storage.kv import KV, Op

if TYPE_CHECKING:
    from weir.broker.partition_actor import PartitionActor

log = logging.getLogger("weir.transactions")

MAX_ENDED = 100_000  # ended transactions remembered, for a clear answer to a late call
ABORT_RETRY_S = 1.0


class TransactionHost(Protocol):
    """What the coordinator needs of the broker."""

    config: BrokerConfig
    generation: int

    def partition_actor(self, topic: str, partition: int) -> PartitionActor | None: ...

    def offset_commit_ops(
        self, topic: str, partition: int, consumer: str, offset: int
    ) -> tuple[list[Op], Callable[[], None]]: ...


@dataclass(frozen=True, slots=True)
class Ended:
    committed: bool
    reason: str
    fenced: bool = False


class TxnCoordinator:
    """Every open transaction of the broker; see the module docstring."""

    def __init__(self, host: TransactionHost, kv: KV, committer: GroupCommitter) -> None:
        self.host = host
        self.committer = committer
        self.producers = TransactionalProducers(kv)
        self._open: dict[int, Transaction] = {}
        self._ended: OrderedDict[int, Ended] = OrderedDict()
        self._ending: dict[int, asyncio.Future[None]] = {}
        self._ids = itertools.count(1)
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.committed = 0
        self.aborted = 0

    # ------------------------------------------------------------------ queries

    @property
    def open_transactions(self) -> list[Transaction]:
        return list(self._open.values())

    @property
    def open_ids(self) -> KeysView[int]:
        return self._open.keys()

    def get(self, txn_id: int, owner: str = "") -> Transaction:
        """The transaction ``txn_id`` (open or ending), checked against its owner and its
        producer's epoch; a clear error when it is unknown, over or fenced."""
        txn = self._open.get(txn_id)
        if txn is None or (txn.owner and owner != txn.owner):
            ended = self._ended.get(txn_id)
            if ended is not None and (txn is None):
                if ended.fenced:
                    raise ProducerFencedError(f"transaction {txn_id:#x} {ended.reason}")
                if ended.committed:
                    raise TransactionCommittedError(f"transaction {txn_id:#x} was committed")
                raise TransactionEndedError(f"transaction {txn_id:#x} has ended: {ended.reason}")
            raise UnknownTransactionError(
                f"transaction {txn_id:#x} is unknown (never begun here, or open when the "
                "server restarted: a restart aborts every open transaction)"
            )
        if txn.producer:
            p = self.producers.get(txn.producer)
            if p is not None and p.epoch != txn.epoch:
                raise ProducerFencedError(
                    f"{txn.describe()} is fenced: a newer instance of the producer started "
                    f"(epoch {p.epoch}, this transaction's {txn.epoch})"
                )
        return txn

    def open_for_use(self, txn_id: int, owner: str = "") -> Transaction:
        """``get``, and the transaction must still take writes and offsets."""
        txn = self.get(txn_id, owner)
        if txn.state is not TxnState.OPEN:
            raise TransactionEndedError(f"{txn.describe()} is ending: it takes nothing more")
        return txn

    # ------------------------------------------------------------------ producers

    async def init_producer(self, transactional_id: str) -> TxnProducer:
        """A new instance of ``transactional_id``: its epoch grows (durably), which fences
        every older instance, and the transaction an older one left open is aborted."""
        self._check_open()
        async with self._lock(transactional_id):
            record, ops = self.producers.next_epoch(transactional_id)
            await asyncio.wrap_future(self.committer.submit(ops))
            self.producers.installed(record)
            old = self._open.get(record.open_txn)
            if old is not None:
                reason = (
                    f"is fenced: a newer instance of producer {transactional_id!r} started "
                    f"(epoch {record.epoch}) and aborted it"
                )
                await self._end(old, False, reason, fenced=True)
            record.open_txn = 0
            log.info(
                "transactional producer initialised",
                extra={"producer": transactional_id, "producer_epoch": record.epoch},
            )
            return record

    def _lock(self, tid: str) -> asyncio.Lock:
        lock = self._locks.get(tid)
        if lock is None:
            lock = self._locks[tid] = asyncio.Lock()
        return lock

    # ------------------------------------------------------------------ begin

    async def begin(
        self,
        *,
        producer: str = "",
        epoch: int | None = None,
        key: str | None = None,
        timeout_ms: int | None = None,
        owner: str = "",
    ) -> Transaction:
        """Open a transaction. With a transactional ``producer``: its ``epoch`` (when given)
        must be the current one, and it may have one transaction open at a time; with a
        ``key``, an open transaction of the same key is joined (returned) and one of
        another key aborted (the Spark sink: every task of a micro-batch joins its
        transaction, a replay after a crash starts over)."""
        self._check_open()
        timeout = self._timeout(timeout_ms)
        if not producer:
            if key is not None:
                raise BadRequestError("a transaction key needs a transactional producer id")
            return self._start(Transaction(self._new_id(), timeout, owner))
        async with self._lock(producer):
            p = self.producers.get_or_add(producer)
            if epoch is not None and epoch != p.epoch:
                if epoch < p.epoch:
                    raise ProducerFencedError(
                        f"producer {producer!r} is fenced: a newer instance started (epoch "
                        f"{p.epoch}, this instance's {epoch})"
                    )
                raise BadRequestError(f"producer {producer!r} has epoch {p.epoch}, not {epoch}")
            current = self._open.get(p.open_txn)
            if current is not None:
                if key is not None and current.key == key and current.state is TxnState.OPEN:
                    if current.owner != owner:
                        raise TransactionBusyError(f"{current.describe()} belongs to another owner")
                    return current
                if key is None:
                    raise TransactionBusyError(
                        f"{current.describe()} is still open: commit or abort it first"
                    )
                await self._end(
                    current, False, f"it was aborted: a transaction with key {key!r} began"
                )
            txn = self._start(Transaction(self._new_id(), timeout, owner, producer, p.epoch, key))
            p.open_txn = txn.id
            return txn

    def _start(self, txn: Transaction) -> Transaction:
        self._open[txn.id] = txn
        loop = asyncio.get_running_loop()
        txn.timer = loop.call_later(txn.timeout_ms / 1000, self._expire, txn.id)
        return txn

    def _new_id(self) -> int:
        # unique across restarts: the broker's generation grows at every start
        return (self.host.generation << 32) | next(self._ids)

    def _timeout(self, timeout_ms: int | None) -> int:
        cfg = self.host.config
        if not timeout_ms:
            return cfg.transaction_timeout_ms
        if not 0 < timeout_ms <= cfg.max_transaction_timeout_ms:
            raise BadRequestError(
                f"a transaction timeout is 1 to {cfg.max_transaction_timeout_ms} ms "
                f"(transactions.max_timeout_ms), not {timeout_ms}"
            )
        return timeout_ms

    # ------------------------------------------------------------------ use

    def admit_write(self, txn_id: int, owner: str, topic: str, partition: int) -> Transaction:
        """Count a write into ``txn_id`` (call `Transaction.write_done` when answered)."""
        txn = self.open_for_use(txn_id, owner)
        txn.partitions.add((topic, partition))
        txn.write_started()
        return txn

    def stage_offsets(
        self, txn_id: int, owner: str, offsets: Iterable[tuple[str, int, str, int]]
    ) -> None:
        """Offsets (topic, partition, consumer, next offset) the commit will store."""
        txn = self.open_for_use(txn_id, owner)
        for topic, partition, consumer, offset in offsets:
            txn.offsets[(topic, partition, consumer)] = offset

    # ------------------------------------------------------------------ end

    async def commit(self, txn_id: int, owner: str = "") -> None:
        txn = self.get(txn_id, owner)
        if txn.state is not TxnState.OPEN:
            raise TransactionEndedError(f"{txn.describe()} is being ended already")
        await self._end(txn, True, "it was committed")

    async def abort(self, txn_id: int, owner: str = "", reason: str = "") -> None:
        txn = self.get(txn_id, owner)
        if txn.state is not TxnState.OPEN:
            raise TransactionEndedError(f"{txn.describe()} is being ended already")
        await self._end(txn, False, reason or "it was aborted by its client")

    async def _end(self, txn: Transaction, commit: bool, reason: str, fenced: bool = False) -> None:
        """Commit or abort ``txn`` (see the module docstring); a second end of one that is
        ending waits for the first."""
        running = self._ending.get(txn.id)
        if running is not None:
            await asyncio.shield(running)
            return
        txn.state = TxnState.ENDING
        if txn.timer is not None:
            txn.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._run_end(txn, commit, reason, fenced))
        self._ending[txn.id] = task
        task.add_done_callback(lambda _: self._ending.pop(txn.id, None))
        # the end runs to its outcome even when the caller goes away (a client hung up)
        await asyncio.shield(task)

    async def _run_end(self, txn: Transaction, commit: bool, reason: str, fenced: bool) -> None:
        try:
            await txn.writes_done()
            actors = []
            for topic, partition in sorted(txn.partitions):
                actor = self.host.partition_actor(topic, partition)
                if actor is not None:  # a topic dropped meanwhile took its batches with it
                    actors.append(actor)
            group = CommitGroup(len(actors))
            for actor in actors:  # all in one step: see the module docstring
                actor.end_txn(txn.id, commit, group)
            changes = await group.gather()
            ops: list[Op] = [op for _, change in changes for op in change.ops]
            nbytes = sum(change.nbytes for _, change in changes)
            done: list[Callable[[], None]] = []
            if commit:
                for (topic, partition, consumer), offset in txn.offsets.items():
                    try:
                        more, on_done = self.host.offset_commit_ops(
                            topic, partition, consumer, offset
                        )
                    except WeirError as exc:  # the topic or consumer went away
                        log.warning("transaction offset dropped: %s", exc)
                        continue
                    ops.extend(more)
                    done.append(on_done)
            try:
                if ops:
                    await asyncio.wrap_future(self.committer.submit(ops, nbytes))
            except BaseException:
                group.abort()
                raise
            group.apply()
            for on_done in done:
                on_done()
        except BaseException as exc:
            txn.state = TxnState.OPEN  # nothing changed: it is open as it was
            if isinstance(exc, asyncio.CancelledError):
                raise
            err = (
                exc
                if isinstance(exc, WeirError)
                else CommitFailedError(f"ending {txn.describe()} failed: {exc!r}")
            )
            log.warning("%s could not be %s: %s", txn.describe(), _done(commit), err.message)
            if not commit and not self._closed:  # an abort is retried until it ends
                asyncio.get_running_loop().call_later(
                    ABORT_RETRY_S, self._retry_abort, txn.id, reason, fenced
                )
            else:
                self._restart_timer(txn)
            raise err from None
        self._forget(txn, commit, reason, fenced)

    def _forget(self, txn: Transaction, committed: bool, reason: str, fenced: bool) -> None:
        txn.state = TxnState.COMMITTED if committed else TxnState.ABORTED
        self._open.pop(txn.id, None)
        if txn.producer:
            p = self.producers.get(txn.producer)
            if p is not None and p.open_txn == txn.id:
                p.open_txn = 0
        self._ended[txn.id] = Ended(committed, reason, fenced)
        while len(self._ended) > MAX_ENDED:
            self._ended.popitem(last=False)
        if committed:
            self.committed += 1
        else:
            self.aborted += 1
        log.debug("%s %s", txn.describe(), reason)

    def _restart_timer(self, txn: Transaction) -> None:
        if txn.id in self._open and not self._closed:
            loop = asyncio.get_running_loop()
            txn.timer = loop.call_later(txn.timeout_ms / 1000, self._expire, txn.id)

    def _expire(self, txn_id: int) -> None:
        txn = self._open.get(txn_id)
        if txn is None or txn.state is not TxnState.OPEN or self._closed:
            return
        reason = f"it timed out: neither committed nor aborted within {txn.timeout_ms} ms"
        self._spawn(self._end(txn, False, reason))

    def _retry_abort(self, txn_id: int, reason: str, fenced: bool) -> None:
        txn = self._open.get(txn_id)
        if txn is None or txn.state is not TxnState.OPEN or self._closed:
            return
        self._spawn(self._end(txn, False, reason, fenced))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.debug("background transaction end failed: %r", t.exception())

        task.add_done_callback(done)

    # ------------------------------------------------------------------ lifecycle

    async def recover(self, partitions: Iterable[tuple[str, int, PartitionActor]]) -> int:
        """Abort every transaction a restart found open in the partitions (before the
        server serves); returns how many."""
        found: dict[int, set[tuple[str, int]]] = {}
        for topic, partition, actor in partitions:
            for txn_id in actor.log.txns.open:
                found.setdefault(txn_id, set()).add((topic, partition))
        reason = "it was aborted at restart: the server stopped while it was open"
        ends = []
        for txn_id, parts in found.items():
            txn = Transaction(txn_id, self.host.config.transaction_timeout_ms)
            txn.partitions = parts
            self._open[txn_id] = txn
            ends.append(self._end(txn, False, reason))
        await asyncio.gather(*ends)
        if found:
            log.info("aborted the transactions open at restart", extra={"transactions": len(found)})
        return len(found)

    def _check_open(self) -> None:
        if self._closed:
            raise UnavailableError("server is shutting down")

    async def close(self) -> None:
        """Stop timers and take no more; ends under way finish (their partitions are open)."""
        self._closed = True
        for txn in self._open.values():
            if txn.timer is not None:
                txn.timer.cancel()
        running = [*self._ending.values(), *self._tasks]
        if running:
            await asyncio.wait(running, timeout=30)


def _done(commit: bool) -> str:
    return "committed" if commit else "aborted"

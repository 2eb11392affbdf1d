"""The broker's transaction calls (a mixin of `Broker`): what every front calls to begin,
write in, commit offsets in, and end a transaction. The rules are the coordinator's
(`weir.broker.transactions.coordinator`) and the partitions' (`weir.storage.txn_state`).

Kafka's model maps onto these calls directly: ``InitProducerId`` is
`init_transactional_producer` (producer number and epoch; a newer instance fences
the older), ``AddPartitionsToTxn`` plus Produce is `begin_transaction` (once per
transaction) and `submit_in_transaction`, ``TxnOffsetCommit`` is
`add_transaction_offsets`, ``EndTxn`` is `commit_transaction` / `abort_transaction`,
and a ``read_committed`` Fetch reads with ``committed=True`` up to `stable_offset`
(control batches with ``control=True``; `aborted_transactions` for the aborted list).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from weir.broker.consumer_offsets import ConsumerOffsets
from weir.broker.partition_actor import PartitionActor
from weir.broker.topics import check_consumer_name, short_topic
from weir.broker.transactions.coordinator import TxnCoordinator
from weir.broker.transactions.producers import TxnProducer
from weir.broker.transactions.transaction import Transaction
from weir.broker.writes import Writes
from weir.errors import BadRequestError
from weir.storage.incoming import IncomingBatch
from weir.storage.kv import Op
from weir.storage.partition import BatchResult
from weir.storage.producers import ProducerState
from weir.storage.txn_state import TxnMarker


@dataclass(frozen=True, slots=True)
class TxnOffset:
    """A consumer's next offset to read, committed by a transaction."""

    topic: str
    partition: int
    consumer: str
    offset: int


class TransactionFacade(ConsumerOffsets, Writes):
    """Transactions as the fronts see them."""

    transactions: TxnCoordinator

    # ------------------------------------------------------------------ host of the coordinator

    def partition_actor(self, topic: str, partition: int) -> PartitionActor | None:
        """The live actor of a partition, None when its topic is gone."""
        return self._actors.get((topic, partition))

    # ------------------------------------------------------------------ calls

    async def init_transactional_producer(self, transactional_id: str) -> TxnProducer:
        """Start a new instance of a transactional producer: returns its producer number
        and epoch; every older instance is fenced, its open transaction aborted."""
        self._check_open()
        return await self.transactions.init_producer(transactional_id)

    def transactional_producer(self, transactional_id: str) -> TxnProducer | None:
        """The producer number and current epoch of a transactional id (None: never
        initialised here)."""
        return self.transactions.producers.get(transactional_id)

    async def begin_transaction(
        self,
        *,
        producer: str = "",
        epoch: int | None = None,
        key: str | None = None,
        timeout_ms: int | None = None,
        owner: str = "",
    ) -> Transaction:
        """Open a transaction (see `TxnCoordinator.begin`)."""
        self._check_open()
        return await self.transactions.begin(
            producer=producer, epoch=epoch, key=key, timeout_ms=timeout_ms, owner=owner
        )

    def transaction(self, txn_id: int, owner: str = "") -> Transaction:
        """An open transaction, or a clear error (unknown, ended, fenced)."""
        return self.transactions.open_for_use(txn_id, owner)

    def submit_in_transaction(
        self,
        txn_id: int,
        topic: str,
        partition: int,
        batches: Sequence[IncomingBatch],
        nbytes: int | None = None,
        owner: str = "",
    ) -> asyncio.Future[list[BatchResult]]:
        """`submit`, the batches belonging to open transaction ``txn_id``: stored at once
        (read-uncommitted readers see them), visible to read-committed readers once it
        commits, never once it aborts. Refused when the transaction is unknown, ending,
        over or fenced."""
        actor = self.actor(topic, partition)
        txn = self.transactions.admit_write(txn_id, owner, actor.topic, partition)
        try:
            fut = self.submit(topic, partition, batches, nbytes, txn=txn_id)
        except BaseException:
            txn.write_done()
            raise
        fut.add_done_callback(lambda _: txn.write_done())
        return fut

    def last_seq_no_in_transaction(
        self, topic: str, partition: int, producer_id: str, txn_id: int
    ) -> int | None:
        """The producer's last seq_no as a writer in ``txn_id`` sees it (its writes there too)."""
        return self.actor(topic, partition).log.last_seq_no(producer_id, txn_id)

    def producer_state_in_transaction(
        self, topic: str, partition: int, producer_id: str, txn_id: int
    ) -> ProducerState | None:
        """The producer's stored state as a writer in ``txn_id`` sees it: its writes in the
        transaction, else what is committed (the newer of the two)."""
        log = self.actor(topic, partition).log
        main = log.producers.get(producer_id)
        mine = log.txns.producer_state(txn_id, producer_id)
        if main is None or (mine is not None and mine.max_seq_no > main.max_seq_no):
            return mine
        return main

    async def add_transaction_offsets(
        self, txn_id: int, offsets: Sequence[TxnOffset], owner: str = ""
    ) -> None:
        """Consumer offsets that move when the transaction commits (never before, never
        if it aborts). All are checked before any is taken: an unknown topic, partition
        or consumer, or an offset past the partition's end changes nothing."""
        self.transactions.open_for_use(txn_id, owner)
        checked = []
        for o in offsets:
            cfg = self.topic(o.topic)
            actor = self.actor(cfg.name, o.partition)
            check_consumer_name(o.consumer)
            if not 0 <= o.offset <= actor.end_offset:
                raise BadRequestError(
                    f"cannot commit offset {o.offset} of consumer {o.consumer!r} on "
                    f"{short_topic(cfg.name)}/{o.partition} in a transaction: end offset is "
                    f"{actor.end_offset}"
                )
            checked.append((cfg.name, o.partition, o.consumer, o.offset))
        for topic, _, consumer, _ in checked:  # all good: register what is new
            if consumer not in self.topic(topic).consumers:
                await self.ensure_consumer(topic, consumer)
        self.transactions.stage_offsets(txn_id, owner, checked)

    def transaction_offset(
        self, txn_id: int, topic: str, partition: int, consumer: str, owner: str = ""
    ) -> int:
        """The offset a transaction will commit for the consumer, else its committed one
        (else the partition's start): where the transaction's next range must begin."""
        txn = self.transactions.open_for_use(txn_id, owner)
        cfg = self.topic(topic)
        staged = txn.offsets.get((cfg.name, partition, consumer))
        if staged is not None:
            return staged
        committed = self.committed_offset(cfg.name, partition, consumer)
        return self.actor(cfg.name, partition).start_offset if committed is None else committed

    def pending_transaction_offsets(self, consumer: str) -> set[tuple[str, int]]:
        """The (topic, partition) pairs on which an open transaction holds an offset of
        ``consumer`` not yet committed (Kafka's OffsetFetch with require_stable waits)."""
        return {
            (topic, partition)
            for txn in self.transactions.open_transactions
            for topic, partition, c in txn.offsets
            if c == consumer
        }

    async def commit_transaction(self, txn_id: int, owner: str = "") -> None:
        """Make every write and offset of the transaction visible at once, durably."""
        await self.transactions.commit(txn_id, owner)

    async def abort_transaction(self, txn_id: int, owner: str = "", reason: str = "") -> None:
        """Discard every write and offset of the transaction."""
        await self.transactions.abort(txn_id, owner, reason)

    def stable_offset(self, topic: str, partition: int) -> int:
        """The last stable offset of a partition: where read-committed readers stop."""
        return self.actor(topic, partition).stable_offset

    def aborted_transactions(
        self, topic: str, partition: int, from_offset: int, to_offset: int
    ) -> list[TxnMarker]:
        """Aborted transactions with batches in ``[from_offset, to_offset)`` (a Kafka Fetch's
        aborted-transaction list)."""
        return self.actor(topic, partition).log.txns.aborted_between(from_offset, to_offset)

    def offset_commit_ops(
        self, topic: str, partition: int, consumer: str, offset: int
    ) -> tuple[list[Op], Callable[[], None]]:
        """See `ConsumerOffsets.prepare_offset_commit` (the coordinator's host call)."""
        return self.prepare_offset_commit(topic, partition, consumer, offset)

"""Kafka transactions on weir's transaction coordinator (`weir.broker.transactions`).

The mapping (docs/kafka.md, "Transactions"):

* ``InitProducerId`` with a ``transactional.id`` is `Broker.init_transactional_producer`:
  the id's epoch grows durably, which fences every older instance and aborts the
  transaction it left open. The Kafka producer id is ``TXN_PID_BASE`` + the id's
  weir producer number (idempotent producers' ids are far below), the Kafka epoch
  is weir's epoch. With the producer id and epoch given (KIP-360, a producer
  recovering from an abortable error) the epoch must be the current one.
* The first ``AddPartitionsToTxn`` or ``AddOffsetsToTxn`` of a transaction begins a
  weir transaction with the producer's ``transaction.timeout.ms``; transactional
  Produce batches are written into it (`Broker.submit_in_transaction`);
  ``TxnOffsetCommit`` stages the group's offsets in it (weir consumer = group);
  ``EndTxn`` commits or aborts it: every partition's marker, and the offsets, in one
  KV transaction.
* A transaction the server ended on its own (its timeout, a restart) leaves the
  producer *doomed*: the client still believes it open, so every later call of it
  but an abort answers INVALID_PRODUCER_ID_MAPPING (an abortable error to the
  clients: they abort, bumping the epoch, and go on), never a fresh transaction that
  would commit only the writes made after the server's abort. A producer first seen
  after a restart is doomed the same way (weir does not know whether it had a
  transaction open then; the restart aborted any).
* Errors: an older epoch PRODUCER_FENCED (Produce: INVALID_PRODUCER_EPOCH, as Kafka),
  an unknown transactional id or producer id INVALID_PRODUCER_ID_MAPPING, EndTxn of
  a transaction that is not open INVALID_TXN_STATE (a retried EndTxn of the outcome
  the last one had is answered NONE).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from weir.broker.transactions.facade import TxnOffset
from weir.broker.transactions.producers import check_transactional_id
from weir.broker.transactions.transaction import TxnState
from weir.errors import (
    BadRequestError,
    ProducerFencedError,
    TransactionCommittedError,
    TransactionEndedError,
    UnknownTransactionError,
    WeirError,
)
from weir.protocols.kafka.codec import Message, RequestHeader
from weir.protocols.kafka.errors import ErrorCode, KafkaError, error_code
from weir.protocols.kafka.group_api import check_group
from weir.protocols.kafka.names import weir_topic
from weir.security.grants import Permission

if TYPE_CHECKING:
    from weir.broker.broker import Broker
    from weir.protocols.kafka.connection import KafkaConnection

log = logging.getLogger("weir.kafka")

TXN_PID_BASE = 1 << 48  # Kafka producer ids of transactional producers start here
MAX_KAFKA_EPOCH = 32766  # Kafka's epoch is an int16 (32767 is reserved for the bump)
MAX_REMEMBERED = 100_000  # transactions whose producer a control batch may still need
RESTARTED = (
    "the server restarted since this producer's last call: any transaction it had open "
    "was aborted; abort it (or initialise the producer again) and retry"
)


def kafka_pid(number: int) -> int:
    return TXN_PID_BASE + number


@dataclass(slots=True)
class TxnClient:
    """What the front knows of one transactional id."""

    tid: str
    pid: int
    epoch: int
    timeout_ms: int | None
    txn_id: int = 0  # the weir transaction open for it, 0 for none
    doomed: str | None = None  # why the transaction the client has open is gone
    last_outcome: bool | None = None  # the outcome its last EndTxn had (True: commit)


class KafkaTransactions:
    """The transactional ids the Kafka front serves, shared by every connection."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._clients: dict[str, TxnClient] = {}
        self._producers: OrderedDict[int, tuple[int, int]] = OrderedDict()

    # ------------------------------------------------------------------ lookups

    def control_producer(self, txn_id: int) -> tuple[int, int]:
        """(Kafka producer id, epoch) for the control batch of ``txn_id`` (-1, -1 when
        the front no longer knows: clients need them only with aborted lists)."""
        return self._producers.get(txn_id, (-1, -1))

    def _remember(self, txn_id: int, client: TxnClient) -> None:
        self._producers[txn_id] = (client.pid, client.epoch)
        while len(self._producers) > MAX_REMEMBERED:
            self._producers.popitem(last=False)

    def check(self, tid: str | None, pid: int, epoch: int, *, produce: bool = False) -> TxnClient:
        """The client ``tid`` if ``pid`` and ``epoch`` are its current ones, else a
        KafkaError (a fenced instance, an unknown id)."""
        if not tid:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, "a transactional call needs a transactional id"
            )
        rec = self.broker.transactional_producer(tid)
        if rec is None or kafka_pid(rec.number) != pid:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"producer id {pid} is not the one of transactional id {tid!r}",
            )
        if epoch != rec.epoch:
            fenced = ErrorCode.INVALID_PRODUCER_EPOCH if produce else ErrorCode.PRODUCER_FENCED
            raise KafkaError(
                fenced if epoch < rec.epoch else ErrorCode.INVALID_PRODUCER_EPOCH,
                f"transactional id {tid!r} is at epoch {rec.epoch}, this producer's is {epoch}: "
                "a newer instance fenced it",
            )
        client = self._clients.get(tid)
        if client is None:
            client = self._clients[tid] = TxnClient(tid, pid, epoch, None, doomed=RESTARTED)
        if client.txn_id:
            try:
                self.broker.transactions.get(client.txn_id)  # open, or ending
            except TransactionCommittedError:
                client.txn_id, client.last_outcome = 0, True  # its EndTxn is answering
            except (TransactionEndedError, UnknownTransactionError, ProducerFencedError) as exc:
                # ended by the server (its timeout): the client still has it open
                client.doomed = exc.message
                client.txn_id = 0
        return client

    def _not_ending(self, txn_id: int) -> None:
        """CONCURRENT_TRANSACTIONS (clients retry) while ``txn_id`` is being ended."""
        if self.broker.transactions.get(txn_id).state is not TxnState.OPEN:
            raise KafkaError(
                ErrorCode.CONCURRENT_TRANSACTIONS, f"transaction {txn_id:#x} is being ended"
            )

    # ------------------------------------------------------------------ calls

    async def init_producer(self, tid: str, timeout_ms: int, pid: int, epoch: int) -> TxnClient:
        try:
            check_transactional_id(tid)
        except BadRequestError as exc:
            raise KafkaError(ErrorCode.INVALID_REQUEST, exc.message) from None
        cfg = self.broker.config
        if not 0 < timeout_ms <= cfg.max_transaction_timeout_ms:
            raise KafkaError(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms is 1 to {cfg.max_transaction_timeout_ms}, not {timeout_ms}",
            )
        if pid >= 0:  # KIP-360: the current instance bumps its epoch (after an abortable error)
            self.check(tid, pid, epoch)
        rec = await self.broker.init_transactional_producer(tid)
        if rec.epoch > MAX_KAFKA_EPOCH:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"transactional id {tid!r} has used every Kafka producer epoch: use another id",
            )
        client = TxnClient(tid, kafka_pid(rec.number), rec.epoch, timeout_ms)
        self._clients[tid] = client
        return client

    async def open_txn(self, client: TxnClient) -> int:
        """The weir transaction of ``client``, begun now if it has none."""
        if client.doomed is not None:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, client.doomed)
        if client.txn_id:
            self._not_ending(client.txn_id)
            return client.txn_id
        rec = self.broker.transactional_producer(client.tid)
        assert rec is not None  # checked
        if rec.open_txn:  # begun by another connection of the same instance meanwhile
            client.txn_id = rec.open_txn
            return rec.open_txn
        txn = await self.broker.begin_transaction(
            producer=client.tid, epoch=rec.epoch, timeout_ms=client.timeout_ms
        )
        client.txn_id = txn.id
        client.last_outcome = None
        self._remember(txn.id, client)
        return txn.id

    def writing_txn(self, client: TxnClient) -> int:
        """The open transaction a transactional Produce writes into (no implicit begin:
        a client adds its partitions first)."""
        if client.doomed is not None:
            # what Kafka clients take as "abort, bump the epoch" on a transactional Produce
            raise KafkaError(ErrorCode.UNKNOWN_PRODUCER_ID, client.doomed)
        if not client.txn_id:
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"transactional id {client.tid!r} has no transaction open: add the partitions first",
            )
        return client.txn_id

    async def end(self, client: TxnClient, commit: bool) -> None:
        if client.txn_id:
            txn_id = client.txn_id
            self._not_ending(txn_id)  # a retried EndTxn while the first is under way
            try:
                if commit:
                    await self.broker.commit_transaction(txn_id)
                else:
                    await self.broker.abort_transaction(
                        txn_id, reason="aborted by its Kafka client"
                    )
            except TransactionCommittedError:
                if not commit:
                    raise KafkaError(
                        ErrorCode.INVALID_TXN_STATE, f"transaction {txn_id:#x} was committed"
                    ) from None
            except (TransactionEndedError, UnknownTransactionError) as exc:
                # the server ended it meanwhile (its timeout): an abort has its outcome
                if commit:
                    if client.txn_id == txn_id:
                        client.txn_id, client.doomed = 0, exc.message
                    raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, exc.message) from None
            if client.txn_id == txn_id:
                client.txn_id = 0
            client.last_outcome = commit
            return
        if client.doomed is not None:
            if commit:
                raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, client.doomed)
            client.doomed = None  # the client agrees: aborted
            client.last_outcome = False
            return
        if client.last_outcome is commit:
            return  # a retry of the EndTxn that ended it
        raise KafkaError(
            ErrorCode.INVALID_TXN_STATE,
            f"transactional id {client.tid!r} has no transaction open to "
            f"{'commit' if commit else 'abort'}",
        )


class TxnHandlers:
    """InitProducerId (transactional), AddPartitionsToTxn, AddOffsetsToTxn,
    TxnOffsetCommit and EndTxn of one connection."""

    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn
        self.broker = conn.broker
        self.txns = conn.front.transactions

    async def handle_init_producer_id(self, body: Message) -> Message:
        try:
            client = await self.txns.init_producer(
                body["transactional_id"],
                body["transaction_timeout_ms"],
                body.get("producer_id", -1),
                body.get("producer_epoch", -1),
            )
        except (KafkaError, WeirError) as exc:
            log.info("InitProducerId refused", extra={"reason": str(exc)})
            return {"error_code": error_code(exc), "producer_id": -1, "producer_epoch": -1}
        return {"error_code": 0, "producer_id": client.pid, "producer_epoch": client.epoch}

    async def handle_add_partitions(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        topics = [(t["name"], list(t["partitions"])) for t in body["topics"]]
        errors: dict[tuple[str, int], ErrorCode] = {}
        try:
            client = self.txns.check(
                body["transactional_id"], body["producer_id"], body["producer_epoch"]
            )
            for name, parts in topics:
                for p in parts:
                    try:
                        topic = weir_topic(name)
                        self.conn.allow(Permission.PRODUCE, topic, "write to")
                        self.broker.actor(self.broker.topic(topic).name, p)
                    except (KafkaError, WeirError) as exc:
                        errors[(name, p)] = error_code(exc)
            if not errors:
                await self.txns.open_txn(client)
        except (KafkaError, WeirError) as exc:
            code = error_code(exc)
            errors = {(name, p): code for name, parts in topics for p in parts}
        if errors:  # Kafka: the others were not attempted
            for name, parts in topics:
                for p in parts:
                    errors.setdefault((name, p), ErrorCode.OPERATION_NOT_ATTEMPTED)
        return {
            "results": [
                {
                    "name": name,
                    "results": [
                        {"partition_index": p, "error_code": errors.get((name, p), 0)}
                        for p in parts
                    ],
                }
                for name, parts in topics
            ]
        }

    async def handle_add_offsets(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        try:
            client = self.txns.check(
                body["transactional_id"], body["producer_id"], body["producer_epoch"]
            )
            check_group(body["group_id"])
            await self.txns.open_txn(client)
        except (KafkaError, WeirError) as exc:
            return {"error_code": error_code(exc, group=True)}
        return {"error_code": 0}

    async def handle_txn_offset_commit(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        group = body["group_id"]
        top: ErrorCode | None = None
        txn_id = 0
        try:
            client = self.txns.check(
                body["transactional_id"], body["producer_id"], body["producer_epoch"]
            )
            check_group(group)
            if body.get("generation_id", -1) >= 0:  # KIP-447: a zombie member is fenced
                self.conn.front.coordinator.check_commit(
                    group, body["generation_id"], body.get("member_id", "")
                )
            txn_id = self.txns.writing_txn(client)
        except (KafkaError, WeirError) as exc:
            top = error_code(exc, group=True)
        out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                code = top if top is not None else await self._stage(txn_id, group, t["name"], p)
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            out.append({"name": t["name"], "partitions": parts})
        return {"topics": out}

    async def _stage(self, txn_id: int, group: str, name: str, p: Message) -> ErrorCode:
        try:
            topic = weir_topic(name)
            self.conn.allow(Permission.CONSUME, topic, "commit an offset of")
            offset = p["committed_offset"]
            if offset < 0:
                return ErrorCode.NONE  # Kafka ignores "no offset" commits
            await self.broker.add_transaction_offsets(
                txn_id, [TxnOffset(topic, p["partition_index"], group, offset)]
            )
        except (KafkaError, WeirError) as exc:
            return error_code(exc)
        return ErrorCode.NONE

    async def handle_end_txn(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        try:
            client = self.txns.check(
                body["transactional_id"], body["producer_id"], body["producer_epoch"]
            )
            await self.txns.end(client, bool(body["committed"]))
        except (KafkaError, WeirError) as exc:
            log.info(
                "EndTxn refused",
                extra={"producer": body["transactional_id"], "reason": str(exc)},
            )
            return {"error_code": error_code(exc)}
        return {"error_code": 0}

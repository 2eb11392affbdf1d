"""Produce and InitProducerId: Kafka record batches into weir partitions.

Each partition's batches are checked (CRC, structure, sizes, the idempotent
producer's sequence), converted to weir batches (`mapping.to_weir`) and queued with
`Broker.submit` before the handler first awaits, so requests are stored in the order
they arrived. The answer waits for the commit (acks 1 and all both mean durable,
as every weir ack); acks=0 gets no answer. Batches marked transactional go into their
producer's open weir transaction (`weir.protocols.kafka.transactions`); InitProducerId
with a transactional id is served there too.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weir.errors import UnknownTopicError, WeirError
from weir.protocols.kafka.codec import Message, RequestHeader
from weir.protocols.kafka.errors import ErrorCode, KafkaError, error_code
from weir.protocols.kafka.idempotence import weir_producer_id
from weir.protocols.kafka.mapping import to_weir
from weir.protocols.kafka.names import weir_topic
from weir.protocols.kafka.records import KafkaBatch, RecordsError, parse_batches
from weir.protocols.kafka.transactions import TxnHandlers
from weir.security.grants import Permission
from weir.storage.batch import parse_header
from weir.storage.incoming import IncomingBatch
from weir.storage.partition import BatchResult

if TYPE_CHECKING:
    from weir.protocols.kafka.connection import KafkaConnection

MAX_EPOCH = 32767
log = logging.getLogger("weir.kafka")


@dataclass(slots=True)
class _Partition:
    index: int
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    base_offset: int = -1
    future: asyncio.Future[list[BatchResult]] | None = None


class ProduceHandlers:
    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn
        self.broker = conn.broker
        self.sequences = conn.front.sequences
        self.txns = conn.front.transactions
        self.txn_handlers = TxnHandlers(conn)

    async def handle_produce(self, header: RequestHeader, body: Message) -> Message | None:
        acks = body["acks"]
        tid = body.get("transactional_id")
        topics = []
        for t in body["topic_data"]:
            parts = [self._submit(t["name"], p, acks, tid) for p in t["partition_data"]]
            topics.append((t["name"], parts))
        # everything is queued; now wait for the commits
        for _, parts in topics:
            for part in parts:
                if part.future is not None:
                    await self._settle(part)
        if acks == 0:
            return None
        return {
            "responses": [
                {
                    "name": name,
                    "partition_responses": [
                        {
                            "index": p.index,
                            "error_code": p.error,
                            "base_offset": p.base_offset,
                            "log_append_time_ms": -1,
                            "log_start_offset": self._start_offset(name, p.index),
                            "error_message": p.message,
                        }
                        for p in parts
                    ],
                }
                for name, parts in topics
            ]
        }

    def _start_offset(self, name: str, partition: int) -> int:
        try:
            return self.broker.actor(weir_topic(name), partition).start_offset
        except WeirError:
            return -1

    def _submit(self, name: str, p: Message, acks: int, tid: str | None) -> _Partition:
        part = _Partition(p["index"])
        try:
            if acks not in (0, 1, -1):
                raise KafkaError(
                    ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, not {acks}"
                )
            topic = weir_topic(name)
            self.conn.allow(Permission.PRODUCE, topic, "write to")
            cfg = self.broker.topic(topic)
            self.broker.actor(cfg.name, part.index)  # range check
            records = p["records"]
            if not records:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "no records")
            limit = self.broker.config.max_batch_bytes
            if len(records) > limit:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE, f"{len(records)} bytes of records, limit {limit}"
                )
            try:
                batches = parse_batches(records, limit)
            except RecordsError as exc:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
            self._submit_batches(cfg.name, part, batches, tid)
        except (KafkaError, WeirError) as exc:
            part.error = error_code(exc)
            part.message = getattr(exc, "message", str(exc))
        return part

    def _submit_batches(
        self, topic: str, part: _Partition, batches: list[KafkaBatch], tid: str | None
    ) -> None:
        msg_limit = self.broker.message_limit(topic)
        incoming: list[IncomingBatch] = []
        tracked: list[Any] = []
        dup_offset: int | None = None
        txn_id = self._transaction_of(batches, tid)
        for b in batches:
            if b.count == 0:
                raise KafkaError(ErrorCode.INVALID_RECORD, "a record batch without records")
            if b.max_record > msg_limit:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"a record is over the limit of {msg_limit} bytes",
                )
            if b.producer_id >= 0:
                key = (topic, part.index, b.producer_id)
                wpid = weir_producer_id(b.producer_id)
                st = (
                    self.broker.producer_state_in_transaction(topic, part.index, wpid, txn_id)
                    if txn_id
                    else self.broker.producer_state(topic, part.index, wpid)
                )
                stored = None if st is None else (st.max_seq_no, st.offset)
                placed = self.sequences.check(
                    key, stored, b.producer_epoch, b.base_sequence, b.count
                )
                if (
                    txn_id
                    and placed.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                    and not self.sequences.knows(key)
                ):
                    # the sequences of an aborted transaction were dropped with it (and the
                    # front forgot them): the producer's next batch continues past them
                    placed = self.sequences.check(
                        key, None, b.producer_epoch, b.base_sequence, b.count
                    )
                if placed.error != ErrorCode.NONE:
                    raise KafkaError(placed.error, f"producer {b.producer_id}: {placed.error.name}")
                if placed.duplicate:
                    log.info(
                        "a resent Kafka batch is a duplicate",
                        extra={"producer": b.producer_id, "sequence": b.base_sequence},
                    )
                    if len(batches) > 1:
                        raise KafkaError(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
                    if placed.duplicate_offset is None:
                        raise KafkaError(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
                    dup_offset = placed.duplicate_offset
                    continue
                buf = to_weir(b, wpid, placed.first_seq)
                tracked.append((key, placed.first_seq, b.count))
            else:
                buf = to_weir(b)
                tracked.append(None)
            incoming.append(IncomingBatch(buf, parse_header(buf)))
        if not incoming:
            part.base_offset = dup_offset if dup_offset is not None else -1
            return
        part.future = (
            self.broker.submit_in_transaction(txn_id, topic, part.index, incoming)
            if txn_id
            else self.broker.submit(topic, part.index, incoming)
        )
        marks = [
            None if t is None else (t[0], self.sequences.submitted(t[0], t[1], t[2], part.future))
            for t in tracked
        ]
        # The sequence bookkeeping follows the write itself, not this request: a client that
        # goes away (its handler cancelled) must not leave a failed write counted as stored.
        part.future.add_done_callback(lambda f: self._done(f, marks))

    def _transaction_of(self, batches: list[KafkaBatch], tid: str | None) -> int:
        """The weir transaction the batches go into (0: none); every batch of a partition's
        records is transactional, or none."""
        flags = {b.transactional for b in batches}
        if any(b.control for b in batches):
            raise KafkaError(ErrorCode.INVALID_RECORD, "a producer may not write control batches")
        if flags != {True}:
            if True in flags:
                raise KafkaError(
                    ErrorCode.INVALID_RECORD, "transactional and other batches in one partition"
                )
            return 0
        b = batches[0]
        if any(
            (x.producer_id, x.producer_epoch) != (b.producer_id, b.producer_epoch) for x in batches
        ):
            raise KafkaError(ErrorCode.INVALID_RECORD, "batches of two producers in one partition")
        client = self.txns.check(tid, b.producer_id, b.producer_epoch, produce=True)
        return self.txns.writing_txn(client)

    def _done(self, fut: asyncio.Future[list[BatchResult]], marks: list[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            for mark in marks:
                if mark is not None:
                    self.sequences.failed(mark[0], mark[1])
            return
        for mark, res in zip(marks, fut.result(), strict=True):
            if mark is not None:
                self.sequences.stored(mark[0], mark[1], res.offset)

    async def _settle(self, part: _Partition) -> None:
        assert part.future is not None
        try:
            results = await asyncio.shield(part.future)
        except WeirError as exc:
            part.error = error_code(exc)
            part.message = exc.message
            return
        first = results[0]
        part.base_offset = first.offset if first.written else -1
        if not first.written:  # storage dropped it as a resend: answered as a duplicate
            part.error = ErrorCode.DUPLICATE_SEQUENCE_NUMBER

    async def handle_init_producer_id(self, header: RequestHeader, body: Message) -> Message:
        self.conn.require_principal()
        if body["transactional_id"] is not None:
            return await self.txn_handlers.handle_init_producer_id(body)
        pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
        if pid >= 0 and 0 <= epoch < MAX_EPOCH:
            # KIP-360: an idempotent producer bumps its epoch to start its sequences afresh
            return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
        try:
            pid = await self.broker.allocate_producer_id()
        except WeirError as exc:
            return {"error_code": error_code(exc), "producer_id": -1, "producer_epoch": -1}
        return {"error_code": 0, "producer_id": pid, "producer_epoch": 0}


__all__ = ["ProduceHandlers", "UnknownTopicError"]

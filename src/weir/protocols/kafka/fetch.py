"""Fetch and ListOffsets: weir partitions read as Kafka record batches.

A fetch reads whole stored batches from each partition's offset (at most
``partition_max_bytes`` each and ``max_bytes`` in all, but always the first batch,
as Kafka does), converts them (`mapping.to_kafka`) and, while less than ``min_bytes``
is ready, waits up to ``max_wait_ms`` for any partition to grow. Fetch sessions are
not kept: every answer carries session id 0, which tells clients to send full fetches.
Transactions (`weir.protocols.kafka.transactions`): every fetch gets the markers as
Kafka control batches (COMMIT / ABORT), so a client moves past them. With
``isolation_level`` read_committed a fetch stops at the last stable offset (the first
offset of the oldest open transaction) and the broker leaves the batches of aborted
transactions out itself, so the aborted-transactions list is always empty;
read_uncommitted reads up to the high watermark, aborted batches included, as Kafka.
ListOffsets' latest offset for read_committed is the last stable offset.

A topic with ``cleanup.policy=compact`` (`admin.is_compacted`) is fetched as Kafka serves
a compacted log: below its compacted view's position the latest message of each key at
its own offset (offsets skipped), then the tail; its log start is the view's start.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from weir.errors import WeirError
from weir.protocols.kafka.admin import is_compacted
from weir.protocols.kafka.codec import Message, RequestHeader
from weir.protocols.kafka.errors import ErrorCode, KafkaError, error_code
from weir.protocols.kafka.mapping import to_kafka
from weir.protocols.kafka.names import weir_topic
from weir.security.grants import Permission

if TYPE_CHECKING:
    from weir.broker.partition_actor import PartitionActor
    from weir.protocols.kafka.connection import KafkaConnection

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1


@dataclass(slots=True)
class _Read:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    actor: PartitionActor | None = None
    compacted: bool = False
    committed: bool = False  # read_committed
    error: ErrorCode = ErrorCode.NONE
    records: list[bytearray | bytes] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(map(len, self.records))


class FetchHandlers:
    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn
        self.broker = conn.broker

    async def handle_fetch(self, header: RequestHeader, body: Message) -> Message:
        if body.get("session_epoch", -1) > 0 or body.get("session_id", 0) != 0:
            return {"error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "responses": []}
        reads: list[_Read] = []
        committed = body.get("isolation_level", 0) == READ_COMMITTED
        for t in body["topics"]:
            for p in t["partitions"]:
                r = _Read(
                    t["topic"],
                    p["partition"],
                    p["fetch_offset"],
                    p["partition_max_bytes"],
                    committed=committed,
                )
                self._open(r)
                reads.append(r)
        max_bytes = max(1, body["max_bytes"])
        min_bytes = body["min_bytes"]
        deadline = time.monotonic() + max(0, body["max_wait_ms"]) / 1000
        while True:
            total = await self._read_all(reads, max_bytes)
            remaining = deadline - time.monotonic()
            if total >= min_bytes or (total > 0 and min_bytes <= 1) or remaining <= 0:
                break
            if any(r.error for r in reads) or self.conn.front.stopping:
                break
            waiting = [r for r in reads if r.actor is not None and not r.records]
            if not waiting:
                break
            await _wait_any(waiting, remaining)
        topics: dict[str, list[Message]] = {}
        for r in reads:
            a = r.actor
            hw = a.end_offset if a is not None else -1
            topics.setdefault(r.topic, []).append(
                {
                    "partition_index": r.partition,
                    "error_code": r.error,
                    "high_watermark": hw,
                    "last_stable_offset": a.stable_offset if a is not None else -1,
                    "log_start_offset": self._log_start(a, r.compacted) if a is not None else -1,
                    "aborted_transactions": [],
                    "records": r.records,  # the batches, joined once with the answer
                }
            )
        return {
            "error_code": 0,
            "session_id": 0,
            "responses": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }

    def _open(self, r: _Read) -> None:
        try:
            topic = weir_topic(r.topic)
            self.conn.allow(Permission.CONSUME, topic, "read")
            r.actor = self.broker.actor(topic, r.partition)
            r.compacted = is_compacted(self.broker.policies_of(topic))
        except (WeirError, KafkaError) as exc:
            r.error = error_code(exc)

    def _log_start(self, a: PartitionActor, compacted: bool) -> int:
        """The first offset a fetch may ask for: a compacted topic's view's start."""
        return self.broker.compacted_start(a.topic, a.partition) if compacted else a.start_offset

    async def _read_all(self, reads: list[_Read], max_bytes: int) -> int:
        total = sum(r.nbytes for r in reads)
        for r in reads:
            a = r.actor
            if a is None or r.error or r.records:
                continue
            if r.offset < self._log_start(a, r.compacted) or r.offset > a.end_offset:
                r.error = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            if r.offset >= (a.stable_offset if r.committed else a.end_offset):
                continue
            budget = min(r.max_bytes, max_bytes - total)
            if budget <= 0 and total > 0:
                break
            try:
                res = await (
                    self.broker.read_compacted(
                        a.topic,
                        a.partition,
                        r.offset,
                        max(1, budget),
                        committed=r.committed,
                        control=True,
                    )
                    if r.compacted
                    else a.read_async(r.offset, max(1, budget), committed=r.committed, control=True)
                )
            except WeirError as exc:  # e.g. the tier's object store is unreachable
                r.error = error_code(exc)
                continue
            if not res.chunks:
                continue
            self.broker.observer.on_read(a.topic, a.partition, res.nbytes)
            r.records = to_kafka(res.chunks, self.conn.front.transactions.control_producer)
            total += r.nbytes
        return total

    async def handle_list_offsets(self, header: RequestHeader, body: Message) -> Message:
        committed = body.get("isolation_level", 0) == READ_COMMITTED
        out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                idx = p["partition_index"]
                entry: Message = {"partition_index": idx, "timestamp": -1, "offset": -1}
                try:
                    topic = weir_topic(t["name"])
                    self.conn.allow(Permission.CONSUME, topic, "look up offsets of")
                    a = self.broker.actor(topic, idx)
                    ts = p["timestamp"]
                    if ts == LATEST:
                        entry["offset"] = a.stable_offset if committed else a.end_offset
                    elif ts == EARLIEST:
                        entry["offset"] = self._log_start(
                            a, is_compacted(self.broker.policies_of(topic))
                        )
                    elif ts == MAX_TIMESTAMP:
                        entry["offset"] = max(a.start_offset, a.end_offset - 1)
                    else:
                        found = a.log.offset_for_time(ts)
                        if found < a.end_offset:
                            entry["offset"], entry["timestamp"] = found, ts
                    entry["leader_epoch"] = 0
                except (WeirError, KafkaError) as exc:
                    entry["error_code"] = error_code(exc)
                parts.append(entry)
            out.append({"name": t["name"], "partitions": parts})
        return {"topics": out}


async def _wait_any(reads: list[_Read], timeout: float) -> None:
    """Until any partition grows past its fetch offset, or the timeout."""
    tasks = [
        asyncio.ensure_future(r.actor.wait_for_data(r.offset, timeout, committed=r.committed))
        for r in reads
        if r.actor is not None
    ]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t

"""Kafka's idempotent producer on weir's producer dedup.

A Kafka producer has a numeric id and an epoch (InitProducerId) and numbers the
records it sends to each partition 0, 1, 2, ... (a 31-bit sequence that wraps).
weir dedups by (producer_id, partition) and a 64-bit seq_no. The mapping:

* weir producer_id ``kafka-<id>``;
* weir seq_no ``epoch << 48 | wraps << 31 | sequence``: dense and increasing within an
  epoch (a wrap of the 31-bit sequence carries into ``wraps``) and a new epoch
  starts above every seq_no of the old one.

So storage itself drops a resent batch (its seq_nos are at or below the stored
maximum), and the stored maximum survives restarts. On top, the front answers as
Kafka does, checking each batch against the last sequence *submitted* (batches in
flight count, so a producer's pipelined requests are checked in order):

* the next sequence: accepted;
* a batch at or below the last one: a duplicate; the same as the last batch is
  answered with its offset, an older one with DUPLICATE_SEQUENCE_NUMBER (the client
  counts both as written);
* a gap: OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch: INVALID_PRODUCER_EPOCH; a new
  epoch must start at sequence 0.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from weir.broker.partition_actor import write_failed
from weir.protocols.kafka.errors import ErrorCode

SEQ_BITS = 31
SEQ_MASK = (1 << SEQ_BITS) - 1
EPOCH_SHIFT = 48
LOW_MASK = (1 << EPOCH_SHIFT) - 1


def weir_producer_id(producer_id: int) -> str:
    return f"kafka-{producer_id}"


@dataclass(slots=True)
class Placed:
    """Where a batch goes: ``error`` NONE and ``first_seq`` (weir) to store it, or a
    duplicate (``duplicate_offset``: the offset to answer, None: DUPLICATE_SEQUENCE_NUMBER),
    or an error."""

    error: ErrorCode = ErrorCode.NONE
    first_seq: int = 0
    duplicate: bool = False
    duplicate_offset: int | None = None


@dataclass(slots=True)
class _Last:
    first_seq: int  # weir seq_no of the batch's first record
    count: int
    offset: int | None  # its first offset once stored


@dataclass(slots=True)
class _Pending:
    last_seq: int  # weir seq_no of the last record submitted
    in_flight: int = 0
    last: _Last | None = None
    recent: list[_Last] = field(default_factory=list)
    # the write of the last batch submitted: failed, it tells `check` that the stored state
    # is the truth again before `failed` is called (see `Sequences.check`)
    future: asyncio.Future[Any] | None = None


def place(
    last_seq: int | None, epoch: int, base_sequence: int, count: int
) -> tuple[ErrorCode, int, bool]:
    """(error, weir first seq_no, duplicate) for a batch after the producer's ``last_seq``
    (weir seq_no; None: nothing known of this producer in this partition)."""
    if base_sequence < 0 or epoch < 0:
        return ErrorCode.INVALID_RECORD, 0, False
    if last_seq is None:
        # nothing stored (a new producer, or its state expired): any sequence starts it
        return ErrorCode.NONE, (epoch << EPOCH_SHIFT) | base_sequence, False
    last_epoch = last_seq >> EPOCH_SHIFT
    if epoch < last_epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH, 0, False
    if epoch > last_epoch:
        if base_sequence != 0:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, 0, False
        return ErrorCode.NONE, epoch << EPOCH_SHIFT, False
    low = last_seq & LOW_MASK
    if base_sequence == ((low & SEQ_MASK) + 1) & SEQ_MASK:
        return ErrorCode.NONE, last_seq + 1, False
    cand = (low & ~SEQ_MASK) | base_sequence  # the batch in the current wrap of the sequence
    if cand > low:
        cand -= 1 << SEQ_BITS
    if cand >= 0 and cand + count - 1 <= low:
        return ErrorCode.NONE, (epoch << EPOCH_SHIFT) | cand, True
    return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, 0, False


class Sequences:
    """The sequence check of every idempotent producer, one per server.

    Only producers with batches in flight (or a last batch to answer duplicates of)
    are held; everything else is read from the partition's stored producer state."""

    MAX_IDLE = 10_000  # producers remembered for duplicate answers, beyond those in flight

    def __init__(self) -> None:
        self._pending: dict[tuple[str, int, int], _Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def check(
        self,
        key: tuple[str, int, int],
        stored: tuple[int, int] | None,
        epoch: int,
        base_sequence: int,
        count: int,
    ) -> Placed:
        """Check one batch of producer ``key`` (topic, partition, producer id); ``stored`` is
        (max seq_no, offset of its record) of the partition's stored producer state."""
        pend = self._pending.get(key)
        if pend is not None and write_failed(pend.future):
            # The partition failed the last write submitted (and every one queued behind
            # it) in its turn; `failed` comes with the write's callback, turns later. A batch
            # placed after it now would be stored after a gap, and the client's retry of the
            # failed one then answered as a duplicate, never stored.
            self._rewind(key, pend)
            pend = self._pending.get(key)
        last_seq = pend.last_seq if pend is not None else None
        if last_seq is None and stored is not None:
            last_seq = stored[0]
        error, first, dup = place(last_seq, epoch, base_sequence, count)
        if error != ErrorCode.NONE:
            return Placed(error)
        if not dup:
            return Placed(first_seq=first)
        end = first + count - 1
        if pend is not None:
            for last in (pend.last, *pend.recent):
                if last is not None and last.first_seq == first and last.count == count:
                    return Placed(first_seq=first, duplicate=True, duplicate_offset=last.offset)
        if stored is not None and end == stored[0]:
            return Placed(first_seq=first, duplicate=True, duplicate_offset=stored[1] - count + 1)
        return Placed(first_seq=first, duplicate=True, duplicate_offset=None)

    def knows(self, key: tuple[str, int, int]) -> bool:
        """Whether batches of producer ``key`` were submitted lately (held in memory)."""
        return key in self._pending

    def submitted(
        self,
        key: tuple[str, int, int],
        first_seq: int,
        count: int,
        future: asyncio.Future[Any] | None = None,
    ) -> _Last:
        """A checked batch was queued for storage (``future``: its write): later batches
        are checked after it."""
        pend = self._pending.get(key)
        if pend is None:
            pend = self._pending[key] = _Pending(first_seq + count - 1)
        pend.last_seq = first_seq + count - 1
        pend.in_flight += 1
        pend.future = future
        last = _Last(first_seq, count, None)
        if pend.last is not None:
            pend.recent.append(pend.last)
            del pend.recent[:-4]  # Kafka remembers five batches per producer
        pend.last = last
        return last

    def stored(self, key: tuple[str, int, int], last: _Last, offset: int) -> None:
        pend = self._pending.get(key)
        last.offset = offset
        if pend is not None:
            pend.in_flight -= 1
            self._trim()

    def failed(self, key: tuple[str, int, int], last: _Last | None = None) -> None:
        """A queued batch (``last``, as `submitted` returned it) was not stored; the
        partition failed every write queued after it too."""
        pend = self._pending.get(key)
        if pend is None:
            return
        if last is None or last is pend.last or any(x is last for x in pend.recent):
            self._rewind(key, pend)  # (else rewound already, by `check` or an earlier one)

    def _rewind(self, key: tuple[str, int, int], pend: _Pending) -> None:
        """Every batch of ``pend`` in flight failed: the next batch must start where the
        first of them did. That is the stored state's next, which a producer with nothing
        stored yet does not have: the first failed batch says it (and ``place`` would take
        any sequence from a producer it knows nothing of, then skip the retry of the
        failed one as a duplicate)."""
        held = [x for x in (*pend.recent, pend.last) if x is not None]
        unstored = [x for x in held if x.offset is None]
        if not unstored:
            del self._pending[key]  # the stored state is the truth
            return
        kept = [x for x in held if x.offset is not None]
        pend.last = kept.pop() if kept else None
        pend.recent = kept
        pend.last_seq = min(x.first_seq for x in unstored) - 1
        pend.in_flight = 0
        pend.future = None

    def _trim(self) -> None:
        if len(self._pending) <= self.MAX_IDLE:
            return
        for k in [k for k, p in self._pending.items() if p.in_flight == 0]:
            del self._pending[k]
            if len(self._pending) <= self.MAX_IDLE // 2:
                break

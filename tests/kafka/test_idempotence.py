"""Kafka sequences onto weir seq_nos: order, duplicates, gaps, epochs, the 31-bit wrap."""

from __future__ import annotations

import asyncio

from weir.protocols.kafka.errors import ErrorCode
from weir.protocols.kafka.idempotence import EPOCH_SHIFT, SEQ_MASK, Sequences, place


def test_first_batch_of_a_producer_starts_anywhere() -> None:
    assert place(None, 0, 0, 5) == (ErrorCode.NONE, 0, False)
    assert place(None, 2, 17, 5) == (ErrorCode.NONE, (2 << EPOCH_SHIFT) | 17, False)


def test_next_duplicate_gap_and_epochs() -> None:
    last = 9  # epoch 0, sequences 0..9 stored
    assert place(last, 0, 10, 3) == (ErrorCode.NONE, 10, False)
    assert place(last, 0, 5, 5) == (ErrorCode.NONE, 5, True)  # a resend of 5..9
    assert place(last, 0, 8, 5)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps the end
    assert place(last, 0, 12, 1)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # a gap
    assert place((1 << EPOCH_SHIFT) | 3, 0, 4, 1)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert place(last, 1, 0, 1) == (ErrorCode.NONE, 1 << EPOCH_SHIFT, False)
    assert place(last, 1, 4, 1)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_the_31_bit_sequence_wraps_into_a_growing_seq_no() -> None:
    last = SEQ_MASK  # sequence 2**31 - 1 stored
    err, first, dup = place(last, 0, 0, 10)
    assert (err, dup) == (ErrorCode.NONE, False) and first == SEQ_MASK + 1
    # and a resend of the batch before the wrap is still a duplicate
    assert place(first + 9, 0, SEQ_MASK - 4, 5) == (ErrorCode.NONE, SEQ_MASK - 4, True)


def test_duplicates_of_recent_batches_get_their_offsets() -> None:
    seqs = Sequences()
    key = ("public/default/t", 0, 7)
    p = seqs.check(key, None, 0, 0, 3)
    last = seqs.submitted(key, p.first_seq, 3)
    seqs.stored(key, last, 100)
    p2 = seqs.check(key, None, 0, 3, 2)
    assert not p2.duplicate
    last2 = seqs.submitted(key, p2.first_seq, 2)  # in flight: the next check follows it
    assert seqs.check(key, None, 0, 5, 1).error == ErrorCode.NONE
    seqs.stored(key, last2, 103)
    again = seqs.check(key, None, 0, 0, 3)
    assert again.duplicate and again.duplicate_offset == 100
    # after a restart only the stored state is known: the last batch still gets its offset
    fresh = Sequences()
    dup = fresh.check(key, (4, 104), 0, 3, 2)
    assert dup.duplicate and dup.duplicate_offset == 103
    older = fresh.check(key, (4, 104), 0, 0, 3)
    assert older.duplicate and older.duplicate_offset is None  # DUPLICATE_SEQUENCE_NUMBER


def test_a_failed_write_forgets_what_was_in_flight() -> None:
    seqs = Sequences()
    key = ("t", 0, 1)
    seqs.submitted(key, 0, 5)
    assert seqs.check(key, None, 0, 5, 1).error == ErrorCode.NONE
    seqs.failed(key)
    # the stored state (nothing) is the truth again: the resend of 0..4 is accepted
    assert seqs.check(key, None, 0, 0, 5).error == ErrorCode.NONE


async def test_a_batch_after_a_failed_write_waits_for_its_retry() -> None:
    """The partition fails a write (and the writes behind it) in its turn; the front hears
    of it with the write's callback, turns later. A batch checked in between, or after,
    must not be placed after the failed ones (it would be stored after a gap, and the
    client's retry of the failed batch then answered as a duplicate, never stored): it is
    out of order until the retry of the first failed batch comes."""
    loop = asyncio.get_running_loop()
    for stored in (None, (4, 104)):  # a new producer, and one with 0..4 stored
        seqs = Sequences()
        key = ("t", 0, 1)
        start = 0 if stored is None else 5
        fut: asyncio.Future[None] = loop.create_future()
        first = seqs.submitted(key, start, 5, fut)
        fut.set_exception(RuntimeError("disk full"))  # failed; its callback not run yet
        assert (
            seqs.check(key, stored, 0, start + 5, 1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        seqs.failed(key, first)  # the callback, late: changes nothing
        assert (
            seqs.check(key, stored, 0, start + 5, 1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        retry = seqs.check(key, stored, 0, start, 5)
        assert retry.error == ErrorCode.NONE and not retry.duplicate and retry.first_seq == start

"""Pulsar message ids as weir offsets, one mapping for everything the front says and hears.

A Pulsar message id is (ledger id, entry id, partition, batch index). weir serves each
stored batch as one Pulsar entry (`weir.protocols.pulsar.records`), so:

* ledger id: always ``LEDGER`` (0): a partition is one log, offsets never restart;
* entry id: the offset of the first message of the stored batch;
* batch index: the message's index in that batch (-1 when the batch holds one message,
  which is then delivered as a plain, non-batched message);
* partition: the weir partition (-1 for a non-partitioned topic, one of one partition).

Ids order exactly as offsets do (entry first, then index) and name the same message
after a restart, since batches are stored as they were written. Whatever id a client
sends back is read as ``offset = entry id + max(batch index, 0)``, the message it names,
even when storage later regroups batches. Pulsar's ``earliest`` is (-1, -1) and its
``latest`` (2^63-1, 2^63-1); both are understood everywhere an id is.
"""

from __future__ import annotations

from weir.protocols.pulsar import pulsar_api_pb2 as pb

LEDGER = 0
_U64 = (1 << 64) - 1
EARLIEST_ENTRY = _U64  # -1 as an unsigned 64-bit field
LATEST_ENTRY = (1 << 63) - 1
EARLIEST = -1  # `offset_of` results for the two special ids
LATEST = -2


def offset_of(mid: pb.MessageIdData) -> int:
    """The offset an id names, or EARLIEST / LATEST."""
    ledger, entry = mid.ledgerId, mid.entryId
    if entry == EARLIEST_ENTRY or ledger == _U64:
        return EARLIEST
    if entry >= LATEST_ENTRY or ledger >= LATEST_ENTRY:
        return LATEST
    return entry + max(mid.batch_index, 0)


def is_whole_entry(mid: pb.MessageIdData) -> bool:
    """An ack of the whole entry (no batch index, no ack set)."""
    return mid.batch_index < 0 and not len(mid.ack_set)


def earliest() -> pb.MessageIdData:
    return pb.MessageIdData(ledgerId=_U64, entryId=_U64)


def acked_all(ack_set: list[int], count: int) -> bool:
    """Whether a batch-index ack set (bits set: still unacknowledged) leaves nothing of a
    batch of ``count`` unacknowledged."""
    for word_index, word in enumerate(ack_set):
        if word == 0:
            continue
        for bit in range(64):
            if word & (1 << bit) and word_index * 64 + bit < count:
                return False
    return True

"""Kafka records <-> weir messages.

A Kafka record's key, value, headers and timestamp become a weir message's key,
data, headers and created time; offsets are weir offsets, one for one.

Messages a YDB writer compressed one by one are decompressed for Kafka readers (a
codec weir does not run, a YDB custom codec, is passed through as it is).

weir has no null key and no null data, so:

* a null key is weir's empty key, and an empty key reads back as null (weir's
  "no key" is what null means to a Kafka client);
* a null value (a tombstone) is stored as empty data with the header
  ``NULL_VALUE_HEADER`` (``pulsar.null_value: true``, the Pulsar front's mark, so a
  tombstone crosses between Kafka and Pulsar clients), which the Kafka front turns back
  into a null value and hides; the native and YDB fronts see empty data and that header;
* header values are bytes in Kafka and str in weir: they cross as utf-8 with
  surrogate escapes (any bytes round-trip); a null header value reads back empty;
  a record's headers are stored as sent: Kafka readers get a repeated key repeated,
  the other fronts see a map (a repeated key keeps its last value).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from weir.protocols.kafka.compiled import build_records
from weir.protocols.kafka.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    NULL_KEY,
    NULL_VALUE_HEADER,
    PAYLOAD_ROOM,
    KafkaBatch,
    build_batch,
    frame_into,
)
from weir.storage.batch import (
    FLAG_CONTROL,
    HEADER_SIZE,
    BatchHeader,
    decode_payload,
    iter_batches,
    parse_header,
)
from weir.storage.batch_encoding import encode_batch, encode_payload, header_into
from weir.storage.codecs import Codec, decompress_message, is_opaque
from weir.storage.txn_state import parse_marker_record

__all__ = ["NULL_VALUE_HEADER", "to_kafka", "to_weir"]

# Kafka compression -> weir storage codec. Kafka producers compress batches of records;
# weir stores what arrived uncompressed unless the producer compressed (then a codec
# weir has: snappy, which weir has not, is stored as LZ4).
_STORE_CODEC = {0: Codec.RAW, 1: Codec.GZIP, 2: Codec.LZ4, 3: Codec.LZ4, 4: Codec.ZSTD}


def to_weir(batch: KafkaBatch, producer_id: str = "", first_seq: int = 0) -> bytes | memoryview:
    """One weir batch holding the records of ``batch`` (seq_nos first_seq.. when a
    producer id is given, for dedup). Uncompressed, it is written around the payload
    the parser laid out (a view of it: the records are not copied again); a batch
    the producer compressed is stored compressed with weir's nearest codec."""
    codec = _STORE_CODEC.get(batch.compression, Codec.RAW)
    if codec == Codec.RAW and len(producer_id.encode()) <= PAYLOAD_ROOM - HEADER_SIZE:
        return header_into(
            batch.payload,
            PAYLOAD_ROOM,
            batch.count,
            flags=batch.flags,
            created_base=batch.created_base,
            producer_id=producer_id,
            first_seq_no=first_seq,
        )
    return encode_payload(
        memoryview(batch.payload)[PAYLOAD_ROOM:],
        batch.count,
        flags=batch.flags,
        created_base=batch.created_base,
        producer_id=producer_id,
        first_seq_no=first_seq,
        codec=codec,
    )


# A control record's key: version 0, type (0 abort, 1 commit); its value: version 0 and
# the coordinator epoch (0: weir has one coordinator).
_CONTROL_KEY = {False: b"\0\0\0\0", True: b"\0\0\0\1"}
_CONTROL_VALUE = b"\0\0\0\0\0\0"

ControlProducer = Callable[[int], tuple[int, int]]


def to_kafka(
    chunks: Sequence[bytes | memoryview], control_producer: ControlProducer | None = None
) -> list[bytearray | bytes]:
    """Kafka record batches (uncompressed) for stored weir batches, one for one, same
    offsets. The records are built by `_records.build_records` from the weir payload;
    a transaction marker becomes a Kafka control batch (``control_producer``: the Kafka
    producer id and epoch of a weir transaction id)."""
    out: list[bytearray | bytes] = []
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            flags = h.flags
            if flags & FLAG_CONTROL:
                out.append(_control_batch(chunk, pos, h, control_producer))
                continue
            raw: bytes | memoryview
            if h.data_codec != Codec.RAW and not is_opaque(h.data_codec):
                raw, flags = _plain_payload(chunk, pos, h)
            elif h.codec == Codec.RAW:
                raw = memoryview(chunk)[pos + h.payload_start : pos + h.length]
            else:
                raw = decode_payload(chunk, pos, h).raw
            batch, base_ts, max_ts = build_records(
                raw, flags, h.record_count, h.created_base, NULL_KEY
            )
            frame_into(batch, h.base_offset, h.record_count, base_ts, max_ts)
            out.append(batch)
    return out


def _control_batch(
    chunk: bytes | memoryview, pos: int, h: BatchHeader, control_producer: ControlProducer | None
) -> bytes:
    """The Kafka control batch (COMMIT or ABORT) of a weir transaction marker."""
    c = decode_payload(chunk, pos, h).columns()
    txn_id, committed = parse_marker_record(bytes(c.data[0]))
    pid, epoch = control_producer(txn_id) if control_producer is not None else (-1, -1)
    return build_batch(
        h.base_offset,
        [c.created_at[0]],
        [_CONTROL_KEY[committed]],
        [_CONTROL_VALUE],
        producer_id=pid,
        producer_epoch=epoch,
        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
    )


def _plain_payload(chunk: bytes | memoryview, pos: int, h: BatchHeader) -> tuple[bytes, int]:
    """The payload of a batch whose messages were compressed one by one (the YDB front),
    with each message decompressed for Kafka readers (the cold path)."""
    c = decode_payload(chunk, pos, h).columns()
    plain = encode_batch(
        [decompress_message(h.data_codec, d) for d in c.data],
        seq_nos=c.seq_nos,
        created_at=c.created_at,
        keys=c.keys,
        headers=c.headers,
    )
    ph = parse_header(plain)
    return plain[ph.payload_start :], ph.flags

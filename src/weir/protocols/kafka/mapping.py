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
  a record's headers are a map in weir, so a repeated key keeps its last value.
"""

from __future__ import annotations

from collections.abc import Sequence

from weir.protocols.kafka.records import NONE, NULL_VALUE_HEADER, Header, KafkaBatch, build_batch
from weir.storage.batch import decode_payload, encode_columns, iter_batches
from weir.storage.codecs import Codec, decompress_message, is_opaque

__all__ = ["NULL_VALUE_HEADER", "to_kafka", "to_weir"]

# Kafka compression -> weir storage codec. Kafka producers compress batches of records;
# weir stores what arrived uncompressed unless the producer compressed (then a codec
# weir has: snappy, which weir has not, is stored as LZ4).
_STORE_CODEC = {0: Codec.RAW, 1: Codec.GZIP, 2: Codec.LZ4, 3: Codec.LZ4, 4: Codec.ZSTD}


def to_weir(batch: KafkaBatch, producer_id: str = "", first_seq: int = 0) -> bytes:
    """One weir batch holding the records of ``batch`` (seq_nos first_seq.. when a
    producer id is given, for dedup)."""
    c = batch.columns
    return encode_columns(
        batch.count,
        created_base=c.created_base,
        created=c.created,
        created64=c.created64,
        key_lens=c.key_lens,
        data_lens=c.data_lens,
        header_lens=c.header_lens,
        keys=c.keys,
        data=c.data,
        headers=c.headers,
        producer_id=producer_id,
        first_seq_no=first_seq,
        codec=_STORE_CODEC.get(batch.compression, Codec.RAW),
    )


def to_kafka(chunks: Sequence[bytes | memoryview], compression: int = NONE) -> list[bytes]:
    """Kafka record batches for stored weir batches (one for one, same offsets)."""
    out = []
    for chunk in chunks:
        for pos, h in iter_batches(chunk, verify=False):
            p = decode_payload(chunk, pos, h)
            c = p.columns()
            values: list[bytes | None] = list(c.data)
            if h.data_codec != Codec.RAW and not is_opaque(h.data_codec):
                # each message compressed on its own (the YDB front): Kafka readers get it plain
                values = [decompress_message(h.data_codec, d) for d in c.data]
            headers: list[list[Header]] | None = None
            if p.header_lens is not None:
                headers = []
                for i, hd in enumerate(c.headers):
                    if NULL_VALUE_HEADER in hd and not values[i]:
                        values[i] = None
                    headers.append(
                        [
                            (k, v.encode("utf-8", "surrogateescape"))
                            for k, v in hd.items()
                            if k != NULL_VALUE_HEADER
                        ]
                    )
            keys: list[bytes | None] = (
                [k or None for k in c.keys] if p.key_lens is not None else [None] * len(values)
            )
            out.append(
                build_batch(
                    h.base_offset, c.created_at, keys, values, headers, compression=compression
                )
            )
    return out

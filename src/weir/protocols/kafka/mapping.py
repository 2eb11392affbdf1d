"""Kafka records <-> weir messages.

A Kafka record's key, value, headers and timestamp become a weir message's key,
data, headers and created time; offsets are weir offsets, one for one.

weir has no null key and no null data, so:

* a null key is weir's empty key, and an empty key reads back as null (weir's
  "no key" is what null means to a Kafka client);
* a null value (a tombstone) is stored as empty data with the header
  ``NULL_VALUE_HEADER`` (value ``"1"``), which the Kafka front turns back into a
  null value and hides; every other front sees empty data and that header;
* header values are bytes in Kafka and str in weir: they cross as utf-8 with
  surrogate escapes (any bytes round-trip); a null header value reads back empty;
  a record's headers are a map in weir, so a repeated key keeps its last value.
"""

from __future__ import annotations

from collections.abc import Sequence

from weir.protocols.kafka.records import NONE, Header, KafkaBatch, build_batch
from weir.storage.batch import decode_payload, encode_batch, iter_batches
from weir.storage.codecs import Codec

NULL_VALUE_HEADER = "weir-kafka-null-value"

# Kafka compression -> weir storage codec (snappy has none in weir: stored as LZ4)
_STORE_CODEC = {0: Codec.RAW, 1: Codec.GZIP, 2: Codec.LZ4, 3: Codec.LZ4, 4: Codec.ZSTD}


def _headers(hs: list[Header], null_value: bool) -> dict[str, str]:
    out = {k: "" if v is None else v.decode("utf-8", "surrogateescape") for k, v in hs}
    if null_value:
        out[NULL_VALUE_HEADER] = "1"
    return out


def to_weir(batch: KafkaBatch, producer_id: str = "", first_seq: int = 0) -> bytes:
    """One weir batch holding the records of ``batch`` (seq_nos first_seq.. when a
    producer id is given, for dedup)."""
    values = batch.values
    if None in values:
        data = [b"" if v is None else v for v in values]
        headers: Sequence[dict[str, str] | None] | None = [
            _headers(h, v is None) for h, v in zip(batch.headers, values, strict=True)
        ]
    else:
        data = values  # type: ignore[assignment]
        headers = [_headers(h, False) for h in batch.headers] if any(batch.headers) else None
    keys = batch.keys
    stored_keys = [b"" if k is None else k for k in keys] if any(keys) else None
    return encode_batch(
        data,
        producer_id=producer_id,
        first_seq_no=first_seq,
        created_at=batch.timestamps,
        keys=stored_keys,
        headers=headers,
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

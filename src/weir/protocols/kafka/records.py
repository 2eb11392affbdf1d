"""Kafka's record batch (magic v2): parse what producers send, build what fetchers read.

A batch is a 61-byte header (base offset, length, leader epoch, magic, CRC32C of
everything after the CRC, attributes, last offset delta, first and max timestamp,
producer id, epoch, base sequence, record count) and records, each a run of
zigzag varints with the key, value and headers in between. Attributes bits 0-2
name the compression of the records section (none, gzip, snappy, lz4, zstd),
bit 3 the timestamp type, bit 4 transactional, bit 5 a control batch.

Pure functions over bytes: nothing here knows weir's storage or the network.
Malformed input raises `RecordsError` (a ValueError), never anything else.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cramjam
import crc32c as _crc32c
import lz4.frame
import zstandard

from weir.protocols.kafka.compiled import parse_records

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61
_CRC_START = 21  # attributes onwards are covered by the CRC
_LENGTH_SKEW = 12  # batch length counts the bytes after the length field

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
COMPRESSION_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
ATTR_COMPRESSION = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
MAX_RECORDS = 1 << 24  # a batch claiming more records than this is refused outright
_XERIAL = b"\x82SNAPPY\x00"
_ZSTD_D = zstandard.ZstdDecompressor()
_ZSTD_C = zstandard.ZstdCompressor(level=3)
crc32c = _crc32c.crc32c

Header = tuple[str, bytes | None]
# weir data cannot be null: a null Kafka value is stored empty with this header set to
# "true", the mark the Pulsar front uses too, so tombstones cross between the two
NULL_VALUE_HEADER = "pulsar.null_value"
NULL_KEY = NULL_VALUE_HEADER.encode()


class RecordsError(ValueError):
    """The bytes are not a valid record batch (Kafka: CORRUPT_MESSAGE / INVALID_RECORD)."""


# Bytes parse_batch leaves free before a batch's weir payload, for the weir batch
# header (72 bytes) and a producer id ("kafka-" and up to 19 digits): the header is
# written in place (`weir.storage.batch_encoding.header_into`), so records are copied once.
PAYLOAD_ROOM = 72 + 64


@dataclass(slots=True)
class KafkaBatch:
    """One parsed record batch: its header, and its records as a weir batch payload
    (``payload[PAYLOAD_ROOM:]``, with ``flags`` and ``created_base``: see
    weir.storage.batch for the layout)."""

    base_offset: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    payload: bytearray
    flags: int
    created_base: int
    max_record: int  # the largest key + value of one record
    size: int  # bytes of the batch in the message set

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    # the records one by one (tests and tools; the produce path uses the payload as it is)

    def _records(self) -> list[Any]:
        from weir.storage.batch import decode_records
        from weir.storage.batch_encoding import header_into

        batch = header_into(
            bytearray(self.payload),
            PAYLOAD_ROOM,
            self.count,
            flags=self.flags,
            created_base=self.created_base,
        )
        return decode_records(bytes(batch))

    @property
    def timestamps(self) -> list[int]:
        return [r.created_at for r in self._records()]

    @property
    def keys(self) -> list[bytes | None]:
        return [r.key or None for r in self._records()]

    @property
    def headers(self) -> list[dict[str, str]]:
        return [r.headers for r in self._records()]

    @property
    def values(self) -> list[bytes | None]:
        return [
            None if NULL_VALUE_HEADER in r.headers and not r.data else r.data
            for r in self._records()
        ]


# ---------------------------------------------------------------------------- compression


def decompress(codec: int, data: bytes | memoryview, limit: int) -> bytes:
    """The records section of a compressed batch, at most ``limit`` bytes."""
    try:
        if codec == GZIP:
            d = zlib.decompressobj(zlib.MAX_WBITS | 16)
            out = d.decompress(data, limit + 1)
        elif codec == SNAPPY:
            out = _snappy_decompress(bytes(data))
        elif codec == LZ4:
            out = lz4.frame.decompress(bytes(data))
        elif codec == ZSTD:
            out = _ZSTD_D.decompressobj().decompress(bytes(data))
        else:
            raise RecordsError(f"unknown compression codec {codec}")
    except RecordsError:
        raise
    except Exception as exc:  # each library has its own error types
        raise RecordsError(
            f"{COMPRESSION_NAMES.get(codec, codec)} data does not decompress: {exc}"
        ) from None
    if len(out) > limit:
        raise RecordsError(f"records decompress to more than {limit} bytes")
    return bytes(out)


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL):
        return bytes(cramjam.snappy.decompress_raw(data))
    # the Java client's framing: 16-byte header, then (int32 length, raw snappy block)s
    pos, parts = 16, []
    while pos < len(data):
        if pos + 4 > len(data):
            raise RecordsError("snappy block length runs past the end")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise RecordsError("snappy block runs past the end")
        parts.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + n])))
        pos += n
    return b"".join(parts)


def compress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        return gzip.compress(data, compresslevel=1)
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(lz4.frame.compress(data))
    if codec == ZSTD:
        return bytes(_ZSTD_C.compress(data))
    return data


# ---------------------------------------------------------------------------- parsing


def parse_batches(buf: bytes | memoryview, max_bytes: int = 1 << 30) -> list[KafkaBatch]:
    """Every batch of a produce request's records field; each fully checked."""
    data = memoryview(buf)
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        batch = parse_batch(data, pos, max_bytes)
        out.append(batch)
        pos += batch.size
    if not out:
        raise RecordsError("no record batch")
    return out


def parse_batch(data: bytes | memoryview, pos: int = 0, max_bytes: int = 1 << 30) -> KafkaBatch:
    if len(data) - pos < HEADER_SIZE:
        raise RecordsError(f"record batch of {len(data) - pos} bytes, its header needs 61")
    (
        base_offset,
        length,
        _leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = HEADER.unpack_from(data, pos)
    if magic != MAGIC:
        raise RecordsError(f"record batch magic {magic}: only magic 2 (Kafka 0.11+) is served")
    size = length + _LENGTH_SKEW
    if length < HEADER_SIZE - _LENGTH_SKEW or pos + size > len(data):
        raise RecordsError(f"record batch length {length} does not fit the {len(data) - pos} bytes")
    end = pos + size
    view = memoryview(data)
    if crc32c(view[pos + _CRC_START : end]) != (crc & 0xFFFFFFFF):
        raise RecordsError("record batch CRC mismatch")
    if count < 0 or count > MAX_RECORDS:
        raise RecordsError(f"record batch claims {count} records")
    codec = attributes & ATTR_COMPRESSION
    start = pos + HEADER_SIZE
    body: bytes | memoryview
    if codec == NONE:
        body, bpos, bend = data, start, end
    else:
        body = decompress(codec, view[start:end], max_bytes)
        bpos, bend = 0, len(body)
    try:
        payload, created_base, flags, max_record, last_delta = parse_records(
            body, bpos, bend, count, base_ts, NULL_KEY, PAYLOAD_ROOM
        )
    except ValueError as exc:
        raise RecordsError(str(exc)) from None
    if count and last_delta != last_offset_delta:
        raise RecordsError(
            f"last offset delta {last_offset_delta} disagrees with the records ({last_delta})"
        )
    return KafkaBatch(
        base_offset,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
        payload,
        flags,
        created_base,
        max_record,
        size,
    )


# ---------------------------------------------------------------------------- building


def _zz(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_ZZ_SMALL = [_zz(i) for i in range(64)]
_ZZ_NEG1 = _zz(-1)


def _vz(n: int) -> bytes:
    return _ZZ_SMALL[n] if 0 <= n < 64 else _zz(n)


def build_batch(
    base_offset: int,
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Header]] | None = None,
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
    compression: int = NONE,
    leader_epoch: int = 0,
) -> bytes:
    """One record batch (offsets base_offset .. base_offset + len(values) - 1)."""
    count = len(values)
    base_ts = min(timestamps) if count else 0
    max_ts = max(timestamps) if count else 0
    parts: list[bytes] = []
    for i in range(count):
        key = keys[i]
        value = values[i]
        rec = [
            b"\x00",
            _vz(timestamps[i] - base_ts),
            _vz(i),
            _ZZ_NEG1 if key is None else _vz(len(key)),
            key or b"",
            _ZZ_NEG1 if value is None else _vz(len(value)),
            value or b"",
        ]
        hs = headers[i] if headers is not None else ()
        rec.append(_vz(len(hs)))
        for hk, hv in hs:
            kb = hk.encode()
            rec.append(_vz(len(kb)))
            rec.append(kb)
            if hv is None:
                rec.append(_ZZ_NEG1)
            else:
                rec.append(_vz(len(hv)))
                rec.append(hv)
        body = b"".join(rec)
        parts.append(_vz(len(body)))
        parts.append(body)
    records = b"".join(parts)
    if compression != NONE:
        records = compress(compression, records)
    attributes = (attributes & ~ATTR_COMPRESSION) | compression
    return _frame(
        base_offset,
        leader_epoch,
        attributes,
        count - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
        records,
    )


def frame_into(batch: bytearray, base_offset: int, count: int, base_ts: int, max_ts: int) -> None:
    """Write the header of an uncompressed record batch of ``count`` records (no producer)
    into the first 61 bytes of ``batch``, whose records follow (`_records.build_records`
    leaves that room)."""
    HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - _LENGTH_SKEW,
        0,
        MAGIC,
        0,
        0,
        count - 1,
        base_ts,
        max_ts,
        NO_PRODUCER_ID,
        -1,
        NO_SEQUENCE,
        count,
    )
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[_CRC_START:]))


def _frame(
    base_offset: int,
    leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_ts: int,
    max_ts: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
    records: bytes,
) -> bytes:
    head = bytearray(
        HEADER.pack(
            base_offset,
            HEADER_SIZE - _LENGTH_SKEW + len(records),
            leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c(records, crc32c(memoryview(head)[_CRC_START:]))
    struct.pack_into(">I", head, 17, crc)
    return bytes(head) + records

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

import cramjam
import crc32c as _crc32c
import lz4.frame
import zstandard

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


class RecordsError(ValueError):
    """The bytes are not a valid record batch (Kafka: CORRUPT_MESSAGE / INVALID_RECORD)."""


@dataclass(slots=True)
class KafkaBatch:
    """One parsed record batch; the records as parallel columns."""

    base_offset: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    timestamps: list[int]
    offset_deltas: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[Header]]
    size: int  # bytes of the batch in the message set

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


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


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint (up to 64 bits) at ``pos``: (value, next position)."""
    value = shift = 0
    while True:
        if pos >= end:
            raise RecordsError("varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise RecordsError("varint longer than 10 bytes")


def parse_batches(buf: bytes | memoryview, max_bytes: int = 1 << 30) -> list[KafkaBatch]:
    """Every batch of a produce request's records field; each fully checked."""
    data = bytes(buf)
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


def parse_batch(data: bytes, pos: int = 0, max_bytes: int = 1 << 30) -> KafkaBatch:
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
    if crc32c(memoryview(data)[pos + _CRC_START : end]) != (crc & 0xFFFFFFFF):
        raise RecordsError("record batch CRC mismatch")
    if count < 0 or count > MAX_RECORDS:
        raise RecordsError(f"record batch claims {count} records")
    codec = attributes & ATTR_COMPRESSION
    start = pos + HEADER_SIZE
    if codec == NONE:
        body, bpos, bend = data, start, end
    else:
        body = decompress(codec, memoryview(data)[start:end], max_bytes)
        bpos, bend = 0, len(body)
    timestamps, deltas, keys, values, headers = _parse_records(body, bpos, bend, count, base_ts)
    if count and deltas[-1] != last_offset_delta:
        raise RecordsError(
            f"last offset delta {last_offset_delta} disagrees with the records ({deltas[-1]})"
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
        timestamps,
        deltas,
        keys,
        values,
        headers,
        size,
    )


def _parse_records(
    buf: bytes, pos: int, end: int, count: int, base_ts: int
) -> tuple[list[int], list[int], list[bytes | None], list[bytes | None], list[list[Header]]]:
    timestamps: list[int] = []
    deltas: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[Header]] = []
    for i in range(count):
        length, pos = _varint(buf, pos, end)
        rend = pos + length
        if length < 6 or rend > end:
            raise RecordsError(f"record {i} length {length} does not fit the batch")
        pos += 1  # attributes: unused in v2
        ts, pos = _varint(buf, pos, rend)
        od, pos = _varint(buf, pos, rend)
        if od != i:
            raise RecordsError(f"record {i} has offset delta {od}")
        kl, pos = _varint(buf, pos, rend)
        if kl < 0:
            key = None
        else:
            if pos + kl > rend:
                raise RecordsError(f"record {i} key runs past the record")
            key = buf[pos : pos + kl]
            pos += kl
        vl, pos = _varint(buf, pos, rend)
        if vl < 0:
            value = None
        else:
            if pos + vl > rend:
                raise RecordsError(f"record {i} value runs past the record")
            value = buf[pos : pos + vl]
            pos += vl
        hn, pos = _varint(buf, pos, rend)
        hs: list[Header] = []
        if hn:
            if hn < 0 or hn > rend - pos:
                raise RecordsError(f"record {i} claims {hn} headers")
            for _ in range(hn):
                hkl, pos = _varint(buf, pos, rend)
                if hkl < 0 or pos + hkl > rend:
                    raise RecordsError(f"record {i} header key runs past the record")
                try:
                    hk = buf[pos : pos + hkl].decode()
                except UnicodeDecodeError:
                    raise RecordsError(f"record {i} header key is not utf-8") from None
                pos += hkl
                hvl, pos = _varint(buf, pos, rend)
                if hvl < 0:
                    hs.append((hk, None))
                    continue
                if pos + hvl > rend:
                    raise RecordsError(f"record {i} header value runs past the record")
                hs.append((hk, buf[pos : pos + hvl]))
                pos += hvl
        if pos != rend:
            raise RecordsError(
                f"record {i} is {length} bytes, its fields take {length - rend + pos}"
            )
        timestamps.append(base_ts + ts)
        deltas.append(od)
        keys.append(key)
        values.append(value)
        headers.append(hs)
    if pos != end:
        raise RecordsError(f"{end - pos} bytes after the last of {count} records")
    return timestamps, deltas, keys, values, headers


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

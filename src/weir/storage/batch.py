"""The batch: weir's unit of storage and of the native wire protocol.

A batch is a self-delimiting byte string::

    fixed header (72 bytes, little-endian)
      0  magic        4s   b"WEIR"
      4  version      u8   1
      5  codec        u8   codec of the payload (Codec: RAW, GZIP, ZSTD, LZ4)
      6  flags        u16  which optional columns the payload has (FLAG_*)
      8  length       u32  total bytes of this batch, header included
     12  header_crc   u32  CRC32C of bytes [0, 12) and [16, header_end): stamped fields included
     16  base_offset  u64  offset of the first record (stamped by the broker)
     24  written_at   i64  ms since epoch when the broker stored it (stamped)
     32  body_crc     u32  CRC32C of the payload bytes [header_end, length)
     36  count        u32  number of records
     40  first_seq    u64  seq_no of the first record
     48  last_seq     u64  seq_no of the last record (dedup needs no decoding)
     56  created_base i64  ms since epoch; records store deltas from it
     64  data_codec   u16  codec each record's data is compressed with (YDB front), else RAW;
                          may be one weir only records (codecs.is_opaque: LZOP, 10000-19999)
     66  pid_len      u16  length of the producer id
     68  raw_len      u32  payload length before compression
    producer id (utf-8, pid_len bytes)
    payload (compressed with `codec` when not RAW)

The payload is columnar, so that encoding and decoding run in C (array, join,
accumulate) rather than a Python loop per record::

    [seq deltas  u32|u64 x count]   if FLAG_SEQ_SPARSE (else seq_no = first_seq + i)
    [created deltas i32|i64 x count] if FLAG_CREATED (else created_at = created_base)
    [key lengths u32 x count]       if FLAG_KEYS
    data lengths u32 x count
    [header lengths u32 x count]    if FLAG_HEADERS
    keys blob, data blob, headers blob

Each record's headers are pairs (u16 key length, key, u32 value length, value),
utf-8. The client fills in everything but base_offset and written_at; the
broker checks both CRCs and the structure, stamps those two fields and
recomputes only header_crc, so a stored batch is exactly the batch the client
sent, plus its position.
"""

from __future__ import annotations

import io
import operator
import struct
import sys
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Literal, NamedTuple, overload

import crc32c as _crc32c

from weir.errors import BadRequestError, BatchFormatError
from weir.storage.codecs import Codec, compress, decompress, decompress_message, is_opaque

MAGIC = b"WEIR"
VERSION = 1
HEADER = struct.Struct("<4sBBHIIQqIIQQqHHI")
HEADER_SIZE = HEADER.size  # 72
assert HEADER_SIZE == 72

FLAG_SEQ_SPARSE = 0x01
FLAG_CREATED = 0x02
FLAG_KEYS = 0x04
FLAG_HEADERS = 0x08
FLAG_SEQ64 = 0x10
FLAG_CREATED64 = 0x20
# A transaction marker written by the broker (weir.storage.txn_state): one record that
# says a transaction committed or aborted. Readers are never sent one, except the Kafka
# front (a control batch); clients may not write one.
FLAG_CONTROL = 0x40
_KNOWN_FLAGS = 0x7F

MAX_BATCH_BYTES = 0xFFFF_FFFF
MAX_PRODUCER_ID = 0xFFFF
_U64 = (1 << 64) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1

_CODEC_IDS = frozenset(int(c) for c in Codec)
_LITTLE = sys.byteorder == "little"
_OFF_CRC = 12
_OFF_STAMP = 16
_STAMP = struct.Struct("<Qq")

crc32c = _crc32c.crc32c


class BatchHeader(NamedTuple):
    """The parsed fixed header of one batch (plus where its payload starts)."""

    codec: int
    flags: int
    length: int
    header_crc: int
    base_offset: int
    written_at: int
    body_crc: int
    record_count: int
    first_seq: int
    last_seq: int
    created_base: int
    data_codec: int
    raw_len: int
    producer_id: str
    payload_start: int  # relative to the batch start

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


@dataclass(slots=True)
class Record:
    """One decoded message."""

    offset: int
    seq_no: int
    created_at: int  # ms since epoch
    key: bytes
    data: bytes
    headers: dict[str, str]


@dataclass(slots=True)
class Columns:
    """The records of a batch as parallel lists (cheap to build, cheap to turn into Arrow)."""

    seq_nos: list[int]
    created_at: list[int]
    keys: list[bytes]
    data: list[bytes]
    headers: list[dict[str, str]]


def _arr(code: str, values: Sequence[int] | Iterator[int]) -> array[int]:
    a = array(code, values)
    if not _LITTLE:  # pragma: no cover - weir runs on little-endian hosts
        a.byteswap()
    return a


def _arr_from(code: str, buf: bytes | memoryview) -> array[int]:
    a = array(code)
    a.frombytes(buf)
    if not _LITTLE:  # pragma: no cover
        a.byteswap()
    return a


def encode_headers(headers: Mapping[str, str] | None) -> bytes:
    if not headers:
        return b""
    parts: list[bytes] = []
    for k, v in headers.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise BadRequestError(
                f"header {k!r}: keys and values must be str, got {type(k).__name__}/{type(v).__name__}"
            )
        kb = k.encode()
        vb = v.encode("utf-8", "surrogateescape")  # lossless for YDB metadata bytes
        if len(kb) > 0xFFFF:
            raise BadRequestError(f"header key longer than 65535 bytes: {k[:40]!r}...")
        parts.append(struct.pack("<H", len(kb)) + kb + struct.pack("<I", len(vb)) + vb)
    return b"".join(parts)


def decode_headers(buf: bytes | memoryview) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    n = len(buf)
    try:
        while pos < n:
            if pos + 2 > n:
                raise BatchFormatError("record header key length runs past its end")
            (kl,) = struct.unpack_from("<H", buf, pos)
            pos += 2
            if pos + kl + 4 > n:
                raise BatchFormatError("record header key runs past its end")
            k = bytes(buf[pos : pos + kl]).decode()
            pos += kl
            (vl,) = struct.unpack_from("<I", buf, pos)
            pos += 4
            if pos + vl > n:
                raise BatchFormatError("record header value runs past its end")
            out[k] = bytes(buf[pos : pos + vl]).decode("utf-8", "surrogateescape")
            pos += vl
    except UnicodeDecodeError as exc:
        raise BatchFormatError(f"record headers are not utf-8: {exc}") from None
    return out


_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from


def check_data_codec(p: Payload) -> None:
    """Raise BatchFormatError unless every record's data decompresses with the batch's
    ``data_codec`` (RAW and opaque codecs: nothing to check). The YDB front encodes its
    own batches; this guards what other clients send, so that no reader meets a message
    it cannot decompress."""
    codec = p.header.data_codec
    if codec == Codec.RAW or is_opaque(codec):
        return
    for i, d in enumerate(p.columns().data):
        try:
            decompress_message(codec, d)
        except BatchFormatError as exc:
            raise BatchFormatError(f"record {i}: {exc}") from None


def check_headers(p: Payload) -> None:
    """Raise BatchFormatError unless every record's headers decode (`decode_headers`).

    What the broker stores every reader must decode; this walks the header pairs once
    without building them, several times faster than decoding every record's dict.
    Values decode with surrogateescape (any bytes), so only keys need to be utf-8.
    """
    if p.header_lens is None:
        return
    hb = bytes(memoryview(p.raw)[p.headers_start :])
    keys: list[bytes] = []
    pos = 0
    for n in p.header_lens:
        end = pos + n
        while pos < end:
            if pos + 2 > end:
                raise BatchFormatError("record header key length runs past its end")
            (kl,) = _U16(hb, pos)
            pos += 2
            if pos + kl + 4 > end:
                raise BatchFormatError("record header key runs past its end")
            keys.append(hb[pos : pos + kl])
            pos += kl
            (vl,) = _U32(hb, pos)
            pos += 4 + vl
            if pos > end:
                raise BatchFormatError("record header value runs past its end")
    try:
        b"\0".join(keys).decode()  # a NUL ends any partial sequence: valid iff each key is
    except UnicodeDecodeError as exc:
        raise BatchFormatError(f"record headers are not utf-8: {exc}") from None


@overload
def encode_batch(
    data: Sequence[bytes | memoryview],
    *,
    producer_id: str = "",
    first_seq_no: int = 0,
    seq_nos: Sequence[int] | None = None,
    created_at: int | Sequence[int] = 0,
    keys: Sequence[bytes] | None = None,
    headers: Sequence[Mapping[str, str] | None] | None = None,
    codec: Codec = Codec.RAW,
    data_codec: int = Codec.RAW,
    view: Literal[False] = False,
) -> bytes: ...


@overload
def encode_batch(
    data: Sequence[bytes | memoryview],
    *,
    producer_id: str = "",
    first_seq_no: int = 0,
    seq_nos: Sequence[int] | None = None,
    created_at: int | Sequence[int] = 0,
    keys: Sequence[bytes] | None = None,
    headers: Sequence[Mapping[str, str] | None] | None = None,
    codec: Codec = Codec.RAW,
    data_codec: int = Codec.RAW,
    view: bool,
) -> bytes | memoryview: ...


def encode_batch(
    data: Sequence[bytes | memoryview],
    *,
    producer_id: str = "",
    first_seq_no: int = 0,
    seq_nos: Sequence[int] | None = None,
    created_at: int | Sequence[int] = 0,
    keys: Sequence[bytes] | None = None,
    headers: Sequence[Mapping[str, str] | None] | None = None,
    codec: Codec = Codec.RAW,
    data_codec: int = Codec.RAW,
    view: bool = False,
) -> bytes | memoryview:
    """Encode records into one batch (base_offset and written_at left zero for the broker).

    ``seq_nos`` must be strictly increasing; without it records are numbered
    ``first_seq_no, first_seq_no + 1, ...``. ``created_at`` is ms since epoch,
    one value for all records or one per record. ``view`` (uncompressed batches): the
    batch as a view of the one buffer its records were copied into, with its header
    written in front (the SDK's writers); the same bytes, without a second copy of the
    whole batch to put the header before the payload.
    """
    count = len(data)
    if count == 0:
        raise BadRequestError("a batch needs at least one record")
    data_codec = int(data_codec)  # a plain int hashes in C, a Codec does not
    if data_codec not in _CODEC_IDS and not is_opaque(data_codec):
        raise BadRequestError(f"unknown data codec {data_codec}")
    flags = 0
    cols: list[bytes | array[int]] = []
    blobs: list[bytes] = []

    if seq_nos is not None:
        if len(seq_nos) != count:
            raise BadRequestError("seq_nos and data differ in length")
        first_seq = seq_nos[0]
        last_seq = seq_nos[-1]
        if first_seq < 0 or last_seq > _U64:
            raise BadRequestError("seq_no out of range 0..2**64-1")
        if count > 1 and not all(map(operator.lt, seq_nos, seq_nos[1:])):
            raise BadRequestError("seq_nos must be strictly increasing within a batch")
        if last_seq - first_seq != count - 1:
            flags |= FLAG_SEQ_SPARSE
            deltas = [s - first_seq for s in seq_nos]
            if deltas[-1] > 0xFFFF_FFFF:
                flags |= FLAG_SEQ64
                cols.append(_arr("Q", deltas))
            else:
                cols.append(_arr("I", deltas))
    else:
        first_seq = first_seq_no
        last_seq = first_seq_no + count - 1
        if first_seq < 0 or last_seq > _U64:
            raise BadRequestError("seq_no out of range 0..2**64-1")

    if isinstance(created_at, int):
        created_base = created_at
    else:
        if len(created_at) != count:
            raise BadRequestError("created_at and data differ in length")
        created_base = created_at[0]
        if created_at.count(created_base) != count:
            flags |= FLAG_CREATED
            cdeltas = [c - created_base for c in created_at]
            if min(cdeltas) < -(1 << 31) or max(cdeltas) >= (1 << 31):
                flags |= FLAG_CREATED64
                cols.append(_arr("q", cdeltas))
            else:
                cols.append(_arr("i", cdeltas))
    if not _I64_MIN <= created_base <= _I64_MAX:
        raise BadRequestError("created_at out of range")

    try:
        if keys is not None and any(keys):
            if len(keys) != count:
                raise BadRequestError("keys and data differ in length")
            flags |= FLAG_KEYS
            kl = [b or b"" for b in keys]
            cols.append(_arr("I", map(len, kl)))
            blobs.append(b"".join(kl))
        cols.append(_arr("I", map(len, data)))
    except TypeError:
        raise BadRequestError("record data and keys must be bytes") from None
    hl: list[bytes] = []
    if headers is not None and any(headers):
        if len(headers) != count:
            raise BadRequestError("headers and data differ in length")
        flags |= FLAG_HEADERS
        hl = [encode_headers(h) for h in headers]
        cols.append(_arr("I", map(len, hl)))
    pieces = [*cols, *blobs, *data, *hl]
    if view and codec == Codec.RAW:
        pid_len = len(producer_id.encode())
        if pid_len > MAX_PRODUCER_ID:
            raise BadRequestError("producer_id longer than 65535 bytes")
        room = HEADER_SIZE + pid_len
        try:
            buf = bytearray().join([bytes(room), *pieces])
        except TypeError:
            raise BadRequestError("record data and keys must be bytes") from None
        return header_into(
            buf,
            room,
            count,
            flags=flags,
            created_base=created_base,
            producer_id=producer_id,
            first_seq_no=first_seq,
            last_seq_no=last_seq,
            data_codec=data_codec,
        )
    try:
        # columns, keys blob (if any), data, headers: one join, one copy of the data
        raw = b"".join(pieces)
    except TypeError:
        raise BadRequestError("record data and keys must be bytes") from None

    return _assemble(
        raw,
        flags,
        count,
        first_seq,
        last_seq,
        created_base,
        producer_id,
        codec,
        data_codec,
    )


def encode_payload(
    raw: bytes | bytearray | memoryview,
    count: int,
    *,
    flags: int,
    created_base: int,
    producer_id: str = "",
    first_seq_no: int = 0,
    codec: Codec = Codec.RAW,
) -> bytes:
    """A batch from a payload already laid out (columns as the module docstring shows:
    little-endian u32 lengths, created deltas from ``created_base``; ``flags`` says
    which columns there are), compressed with ``codec``.

    For fronts whose wire format is parsed straight into a payload (the Kafka front's C
    parser); the caller vouches for the columns' consistency, `validate_incoming`
    checks it. `header_into` is the copy-free twin for uncompressed payloads.
    """
    last_seq = first_seq_no + count - 1
    if count <= 0 or first_seq_no < 0 or last_seq > _U64:
        raise BadRequestError("a batch needs records and seq_nos in 0..2**64-1")
    if not _I64_MIN <= created_base <= _I64_MAX:
        raise BadRequestError("created_at out of range")
    return _assemble(
        bytes(raw),
        flags,
        count,
        first_seq_no,
        last_seq,
        created_base,
        producer_id,
        codec,
        Codec.RAW,
    )


def header_into(
    buf: bytearray,
    payload_start: int,
    count: int,
    *,
    flags: int,
    created_base: int,
    producer_id: str = "",
    first_seq_no: int = 0,
    last_seq_no: int | None = None,
    data_codec: int = Codec.RAW,
) -> memoryview:
    """Write the header of an uncompressed batch right before its payload, which the
    caller laid out in ``buf`` from ``payload_start`` to the end (columns as in
    `encode_columns`), and return the batch: a view of ``buf`` from its header on. A
    front that builds payloads in place (the Kafka front's C parser) so copies the
    records once; the caller vouches for the columns, `validate_incoming` checks them.
    ``last_seq_no``: for sparse seq_nos (default: ``first_seq_no + count - 1``).
    """
    pid = producer_id.encode()
    start = payload_start - HEADER_SIZE - len(pid)
    last_seq = first_seq_no + count - 1 if last_seq_no is None else last_seq_no
    if start < 0:
        raise BadRequestError("no room for the batch header before the payload")
    if count <= 0 or first_seq_no < 0 or last_seq > _U64 or len(pid) > MAX_PRODUCER_ID:
        raise BadRequestError("a batch needs records, seq_nos in 0..2**64-1 and a short id")
    if not _I64_MIN <= created_base <= _I64_MAX:
        raise BadRequestError("created_at out of range")
    raw_len = len(buf) - payload_start
    if HEADER_SIZE + len(pid) + raw_len > MAX_BATCH_BYTES:
        raise BadRequestError("batch larger than 4 GiB")
    view = memoryview(buf)
    HEADER.pack_into(
        buf,
        start,
        MAGIC,
        VERSION,
        int(Codec.RAW),
        flags,
        HEADER_SIZE + len(pid) + raw_len,
        0,
        0,
        0,
        crc32c(view[payload_start:]),
        count,
        first_seq_no,
        last_seq,
        created_base,
        int(data_codec),
        len(pid),
        raw_len,
    )
    buf[start + HEADER_SIZE : payload_start] = pid
    struct.pack_into("<I", buf, start + _OFF_CRC, _header_crc(buf, start, payload_start))
    return view[start:]


def _assemble(
    raw: bytes,
    flags: int,
    count: int,
    first_seq: int,
    last_seq: int,
    created_base: int,
    producer_id: str,
    codec: Codec,
    data_codec: int,
) -> bytes:
    """Header + (compressed) payload."""
    payload = raw if codec == Codec.RAW else compress(codec, raw)
    pid = producer_id.encode()
    if len(pid) > MAX_PRODUCER_ID:
        raise BadRequestError("producer_id longer than 65535 bytes")
    length = HEADER_SIZE + len(pid) + len(payload)
    if length > MAX_BATCH_BYTES:
        raise BadRequestError("batch larger than 4 GiB")
    head = bytearray(
        HEADER.pack(
            MAGIC,
            VERSION,
            int(codec),
            flags,
            length,
            0,
            0,
            0,
            crc32c(payload),
            count,
            first_seq,
            last_seq,
            created_base,
            data_codec,
            len(pid),
            len(raw),
        )
    )
    head += pid
    struct.pack_into("<I", head, _OFF_CRC, _header_crc(head, 0, len(head)))
    return bytes(head) + payload


def with_flags(buf: bytes, flags: int) -> bytes:
    """``buf`` (one batch, not yet stamped) with ``flags`` added to its header."""
    head = bytearray(buf[:HEADER_SIZE])
    (old,) = struct.unpack_from("<H", head, 6)
    struct.pack_into("<H", head, 6, old | flags)
    pid_len = struct.unpack_from("<H", head, 66)[0]
    head += buf[HEADER_SIZE : HEADER_SIZE + pid_len]
    struct.pack_into("<I", head, _OFF_CRC, _header_crc(head, 0, len(head)))
    return bytes(head) + buf[HEADER_SIZE + pid_len :]


def _header_crc(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
    """CRC32C of every header byte except the CRC field itself."""
    mv = memoryview(buf)
    return crc32c(mv[pos + _OFF_STAMP : end], crc32c(mv[pos : pos + _OFF_CRC]))


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse and check the header of the batch starting at ``pos`` (its CRC, magic, lengths).

    The payload is not checked here; see `verify_body`.
    """
    avail = len(buf) - pos
    if avail < HEADER_SIZE:
        raise BatchFormatError(f"truncated batch: {avail} bytes, header needs {HEADER_SIZE}")
    (
        magic,
        version,
        codec,
        flags,
        length,
        header_crc,
        base_offset,
        written_at,
        body_crc,
        count,
        first_seq,
        last_seq,
        created_base,
        data_codec,
        pid_len,
        raw_len,
    ) = HEADER.unpack_from(buf, pos)
    if magic != MAGIC:
        raise BatchFormatError(f"bad batch magic {bytes(magic)!r}")
    if version != VERSION:
        raise BatchFormatError(f"unsupported batch version {version}")
    payload_start = HEADER_SIZE + pid_len
    if length < payload_start:
        raise BatchFormatError(f"batch length {length} shorter than its header")
    if length > avail:
        raise BatchFormatError(f"truncated batch: {avail} bytes, header says {length}")
    mv = memoryview(buf)
    if _header_crc(mv, pos, pos + payload_start) != header_crc:
        raise BatchFormatError("batch header CRC mismatch")
    if flags & ~_KNOWN_FLAGS:
        raise BatchFormatError(f"unknown batch flags {flags:#x}")
    if count == 0:
        raise BatchFormatError("batch has no records")
    if last_seq < first_seq or last_seq - first_seq < count - 1:
        raise BatchFormatError("batch seq_no range smaller than its record count")
    if not flags & FLAG_SEQ_SPARSE and last_seq - first_seq != count - 1:
        raise BatchFormatError("dense batch seq_no range does not match its record count")
    if codec not in _CODEC_IDS or (data_codec not in _CODEC_IDS and not is_opaque(data_codec)):
        raise BatchFormatError(f"unknown codec {codec}/{data_codec}")
    try:
        producer_id = bytes(mv[pos + HEADER_SIZE : pos + payload_start]).decode()
    except UnicodeDecodeError:
        raise BatchFormatError("producer id is not utf-8") from None
    return BatchHeader(
        codec,
        flags,
        length,
        header_crc,
        base_offset,
        written_at,
        body_crc,
        count,
        first_seq,
        last_seq,
        created_base,
        data_codec,
        raw_len,
        producer_id,
        payload_start,
    )


def verify_body(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> None:
    """Check the payload CRC of a batch whose header was parsed at ``pos``."""
    mv = memoryview(buf)
    if crc32c(mv[pos + h.payload_start : pos + h.length]) != h.body_crc:
        raise BatchFormatError("batch payload CRC mismatch")


def stamp_header(
    buf: bytes | bytearray | memoryview, h: BatchHeader, base_offset: int, written_at: int
) -> bytes:
    """The header of ``buf`` (a batch at position 0) with offset and time stamped and a new CRC."""
    head = bytearray(memoryview(buf)[: h.payload_start])
    _STAMP.pack_into(head, _OFF_STAMP, base_offset, written_at)
    struct.pack_into("<I", head, _OFF_CRC, _header_crc(head, 0, len(head)))
    return bytes(head)


def iter_batches(
    buf: bytes | bytearray | memoryview, verify: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Walk a concatenation of batches, yielding (position, header)."""
    pos = 0
    n = len(buf)
    while pos < n:
        h = parse_header(buf, pos)
        if verify:
            verify_body(buf, pos, h)
        yield pos, h
        pos += h.length


@dataclass(slots=True)
class Payload:
    """The decoded columns of a batch, still as arrays and blob views (no per-record objects)."""

    header: BatchHeader
    raw: bytes | memoryview
    seq_deltas: array[int] | None
    created_deltas: array[int] | None
    key_lens: array[int] | None
    data_lens: array[int]
    header_lens: array[int] | None
    keys_start: int
    data_start: int
    headers_start: int

    def data_offsets(self) -> list[int]:
        """Start positions of every record's data in ``raw``, plus the end position."""
        return list(accumulate(self.data_lens, initial=self.data_start))

    def _split(self, start: int, lens: array[int]) -> list[bytes]:
        """Consecutive byte strings of the given lengths from ``start`` (lengths are checked).

        BytesIO.read per length is a C call with no slice object and no offsets list:
        about four times faster than slicing.
        """
        raw = self.raw if isinstance(self.raw, bytes) else bytes(self.raw)
        bio = io.BytesIO(raw)
        bio.seek(start)
        return list(map(bio.read, lens))

    def data_list(self) -> list[bytes]:
        return self._split(self.data_start, self.data_lens)

    def key_list(self) -> list[bytes]:
        if self.key_lens is None:
            return [b""] * self.header.record_count
        return self._split(self.keys_start, self.key_lens)

    def header_list(self) -> list[dict[str, str]]:
        if self.header_lens is None:
            return [{} for _ in range(self.header.record_count)]
        offs = list(accumulate(self.header_lens, initial=self.headers_start))
        mv = memoryview(self.raw)
        return [decode_headers(mv[a:b]) for a, b in pairwise(offs)]

    def seq_list(self) -> list[int]:
        first = self.header.first_seq
        if self.seq_deltas is None:
            return list(range(first, first + self.header.record_count))
        return [first + d for d in self.seq_deltas]

    def created_list(self) -> list[int]:
        base = self.header.created_base
        if self.created_deltas is None:
            return [base] * self.header.record_count
        return [base + d for d in self.created_deltas]

    def columns(self) -> Columns:
        return Columns(
            self.seq_list(),
            self.created_list(),
            self.key_list(),
            self.data_list(),
            self.header_list(),
        )


def decode_payload(
    buf: bytes | bytearray | memoryview, pos: int = 0, h: BatchHeader | None = None
) -> Payload:
    """Decompress and split the payload of the batch at ``pos``; checks every length.

    Raises BatchFormatError on any inconsistency, so a decoded payload is safe to slice.
    """
    if h is None:
        h = parse_header(buf, pos)
        verify_body(buf, pos, h)
    mv = memoryview(buf)[pos + h.payload_start : pos + h.length]
    raw: bytes | memoryview
    if h.codec == Codec.RAW:
        if len(mv) != h.raw_len:
            raise BatchFormatError(f"RAW payload is {len(mv)} bytes, header says {h.raw_len}")
        raw = mv
    else:
        raw = decompress(h.codec, mv, h.raw_len)
    n = h.record_count
    pos2 = 0
    total = len(raw)

    def take(code: str) -> array[int]:
        nonlocal pos2
        width = array(code).itemsize * n
        if pos2 + width > total:
            raise BatchFormatError("batch payload shorter than its columns")
        a = _arr_from(code, raw[pos2 : pos2 + width])
        pos2 += width
        return a

    f = h.flags
    seq_deltas = take("Q" if f & FLAG_SEQ64 else "I") if f & FLAG_SEQ_SPARSE else None
    if seq_deltas is not None:
        if seq_deltas[0] != 0 or seq_deltas[-1] != h.last_seq - h.first_seq:
            raise BatchFormatError("seq_no column disagrees with the header")
        if n > 1 and not all(map(operator.lt, seq_deltas, seq_deltas[1:])):
            raise BatchFormatError("seq_nos not strictly increasing")
    created = take("q" if f & FLAG_CREATED64 else "i") if f & FLAG_CREATED else None
    key_lens = take("I") if f & FLAG_KEYS else None
    data_lens = take("I")
    header_lens = take("I") if f & FLAG_HEADERS else None
    keys_start = pos2
    keys_total = sum(key_lens) if key_lens is not None else 0
    data_start = keys_start + keys_total
    data_total = sum(data_lens)
    headers_start = data_start + data_total
    headers_total = sum(header_lens) if header_lens is not None else 0
    if headers_start + headers_total != total:
        raise BatchFormatError(
            f"batch payload is {total} bytes, its columns describe {headers_start + headers_total}"
        )
    return Payload(
        h,
        raw,
        seq_deltas,
        created,
        key_lens,
        data_lens,
        header_lens,
        keys_start,
        data_start,
        headers_start,
    )


def decode_records(buf: bytes | bytearray | memoryview, pos: int = 0) -> list[Record]:
    """Every record of the batch at ``pos``, with its offset (convenient, not the fast path)."""
    p = decode_payload(buf, pos)
    c = p.columns()
    base = p.header.base_offset
    return [
        Record(base + i, s, t, k, d, hd)
        for i, (s, t, k, d, hd) in enumerate(
            zip(c.seq_nos, c.created_at, c.keys, c.data, c.headers, strict=True)
        )
    ]


def reencode_from(buf: bytes | bytearray | memoryview, h: BatchHeader, skip: int) -> bytes:
    """The batch without its first ``skip`` records (dedup of a partly duplicate batch).

    The cold path: records are decoded and encoded again with the same codecs.
    """
    p = decode_payload(buf, 0, h)
    c = p.columns()
    has_keys = p.key_lens is not None
    has_headers = p.header_lens is not None
    return encode_batch(
        c.data[skip:],
        producer_id=h.producer_id,
        seq_nos=c.seq_nos[skip:],
        created_at=c.created_at[skip:],
        keys=c.keys[skip:] if has_keys else None,
        headers=c.headers[skip:] if has_headers else None,
        codec=Codec(h.codec),
        data_codec=h.data_codec,
    )

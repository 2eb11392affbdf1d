"""Encoding batches: records in, one batch out (the format is `weir.storage.batch`).

The SDK's writers, the fronts that build payloads themselves (the Kafka front's C
parser) and the broker's own markers and re-encodings all come here; parsing, checking
and decoding stay in `weir.storage.batch`, which never needs this module.
"""

from __future__ import annotations

import operator
import struct
from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal, overload

from weir.errors import BadRequestError
from weir.storage.batch import (
    CODEC_IDS,
    FLAG_CREATED,
    FLAG_CREATED64,
    FLAG_HEADERS,
    FLAG_KEYS,
    FLAG_SEQ64,
    FLAG_SEQ_SPARSE,
    HEADER,
    HEADER_SIZE,
    I64_MAX,
    I64_MIN,
    LITTLE_ENDIAN,
    MAGIC,
    MAX_BATCH_BYTES,
    MAX_PRODUCER_ID,
    OFF_HEADER_CRC,
    U64_MAX,
    VERSION,
    BatchHeader,
    crc32c,
    decode_payload,
    header_crc_of,
)
from weir.storage.codecs import Codec, compress, is_opaque


def _arr(code: str, values: Sequence[int] | Iterator[int]) -> array[int]:
    a = array(code, values)
    if not LITTLE_ENDIAN:  # pragma: no cover - weir runs on little-endian hosts
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
    if data_codec not in CODEC_IDS and not is_opaque(data_codec):
        raise BadRequestError(f"unknown data codec {data_codec}")
    flags = 0
    cols: list[bytes | array[int]] = []
    blobs: list[bytes] = []

    if seq_nos is not None:
        if len(seq_nos) != count:
            raise BadRequestError("seq_nos and data differ in length")
        first_seq = seq_nos[0]
        last_seq = seq_nos[-1]
        if first_seq < 0 or last_seq > U64_MAX:
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
        if first_seq < 0 or last_seq > U64_MAX:
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
    if not I64_MIN <= created_base <= I64_MAX:
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

    return assemble(
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
    """A batch from a payload already laid out (columns as the docstring of
    `weir.storage.batch` shows: little-endian u32 lengths, created deltas from ``created_base``; ``flags`` says
    which columns there are), compressed with ``codec``.

    For fronts whose wire format is parsed straight into a payload (the Kafka front's C
    parser); the caller vouches for the columns' consistency, `validate_incoming`
    checks it. `header_into` is the copy-free twin for uncompressed payloads.
    """
    last_seq = first_seq_no + count - 1
    if count <= 0 or first_seq_no < 0 or last_seq > U64_MAX:
        raise BadRequestError("a batch needs records and seq_nos in 0..2**64-1")
    if not I64_MIN <= created_base <= I64_MAX:
        raise BadRequestError("created_at out of range")
    return assemble(
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
    caller laid out in ``buf`` from ``payload_start`` to the end (columns as
    `encode_batch` lays them out), and return the batch: a view of ``buf`` from its header on. A
    front that builds payloads in place (the Kafka front's C parser) so copies the
    records once; the caller vouches for the columns, `validate_incoming` checks them.
    ``last_seq_no``: for sparse seq_nos (default: ``first_seq_no + count - 1``).
    """
    pid = producer_id.encode()
    start = payload_start - HEADER_SIZE - len(pid)
    last_seq = first_seq_no + count - 1 if last_seq_no is None else last_seq_no
    if start < 0:
        raise BadRequestError("no room for the batch header before the payload")
    if count <= 0 or first_seq_no < 0 or last_seq > U64_MAX or len(pid) > MAX_PRODUCER_ID:
        raise BadRequestError("a batch needs records, seq_nos in 0..2**64-1 and a short id")
    if not I64_MIN <= created_base <= I64_MAX:
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
    struct.pack_into("<I", buf, start + OFF_HEADER_CRC, header_crc_of(buf, start, payload_start))
    return view[start:]


def assemble(
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
    struct.pack_into("<I", head, OFF_HEADER_CRC, header_crc_of(head, 0, len(head)))
    return bytes(head) + payload


def with_flags(buf: bytes, flags: int) -> bytes:
    """``buf`` (one batch, not yet stamped) with ``flags`` added to its header."""
    head = bytearray(buf[:HEADER_SIZE])
    (old,) = struct.unpack_from("<H", head, 6)
    struct.pack_into("<H", head, 6, old | flags)
    pid_len = struct.unpack_from("<H", head, 66)[0]
    head += buf[HEADER_SIZE : HEADER_SIZE + pid_len]
    struct.pack_into("<I", head, OFF_HEADER_CRC, header_crc_of(head, 0, len(head)))
    return bytes(head) + buf[HEADER_SIZE + pid_len :]


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

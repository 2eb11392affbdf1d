"""Hand-rolled protobuf wire encoding for the three bulk messages of weir.proto.

`WriteRequest.batches`, `ReadResponse.data` and `ReadRangeResponse` carry nearly
all the bytes weir moves. Building them as protobuf objects copies every batch
twice more (into the message, then into its serialization) and parsing copies
again; here the bytes are joined once on the way out and sliced as memoryviews
on the way in. The encoding is exactly protobuf's (tests compare it with the
generated code byte for byte), so any protobuf client still speaks the protocol;
anything this module does not recognise falls back to the generated parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from weir.protocols.native import weir_pb2 as pb

Buf = bytes | memoryview

# tags: (field number << 3) | wire type (0 varint, 2 length-delimited)
_T_WRITE_BATCHES = 0x12  # WriteRequest.batches = 2
_T_BYTES_1 = 0x0A  # field 1, bytes
_T_READ_DATA = 0x22  # ReadResponse.data = 4
_T_CHUNKS_2 = 0x12  # ReadData.chunks = 2


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 negatives take ten bytes, as protobuf writes them
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(buf: Buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _signed(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


def _len_parts(tag: int, items: Sequence[Buf], parts: list[Buf]) -> int:
    """Append tag+length+item for every item; return the bytes added."""
    size = 0
    for item in items:
        head = bytes((tag,)) + varint(len(item))
        parts.append(head)
        parts.append(item)
        size += len(head) + len(item)
    return size


def _int_field(field: int, value: int) -> bytes:
    return b"" if value == 0 else bytes((field << 3,)) + varint(value)


# ---------------------------------------------------------------- WriteRequest


class RawWriteRequest:
    """A WriteRequest{batches} whose batches stay bytes/memoryviews (no protobuf copy).

    It answers the two questions the write session asks of a request, so the
    session handles it and a parsed protobuf WriteRequest alike.
    """

    __slots__ = ("batches",)

    def __init__(self, batches: list[Buf]) -> None:
        self.batches = batches

    def WhichOneof(self, _: str) -> str:
        return "batches"


def write_request_parts(batches: Sequence[Buf]) -> tuple[int, list[Buf]]:
    """A WriteRequest{batches} as the pieces to send in order, each batch itself among
    them (not copied), and its length: a writer that sends them gathered makes no copy
    of a large request."""
    parts: list[Buf] = []
    inner = _len_parts(_T_BYTES_1, batches, parts)
    head = bytes((_T_WRITE_BATCHES,)) + varint(inner)
    return len(head) + inner, [head, *parts]


def encode_write_request(req: pb.WriteRequest | RawWriteRequest) -> bytes:
    if isinstance(req, RawWriteRequest):
        return b"".join(write_request_parts(req.batches)[1])
    return req.SerializeToString()


def decode_write_request(data: bytes | bytearray) -> Any:
    """A RawWriteRequest for a batches message, else the generated parser's WriteRequest."""
    try:
        if data[:1] == bytes((_T_WRITE_BATCHES,)):
            mv = memoryview(data)
            inner, pos = _read_varint(mv, 1)
            end = pos + inner
            if end == len(data):
                batches: list[Buf] = []
                while pos < end:
                    if mv[pos] != _T_BYTES_1:
                        break
                    n, pos = _read_varint(mv, pos + 1)
                    if pos + n > end:
                        break
                    batches.append(mv[pos : pos + n])
                    pos += n
                else:
                    return RawWriteRequest(batches)
    except (IndexError, ValueError):
        pass
    return pb.WriteRequest.FromString(bytes(data))


# ---------------------------------------------------------------- ReadResponse.data


@dataclass(slots=True)
class RawReadData:
    """ReadResponse{data: ReadData}: chunks stay as they are until serialized once."""

    assignment_id: int
    chunks: list[Buf]
    next_offset: int
    end_offset: int
    bytes: int

    def WhichOneof(self, _: str) -> str:
        return "data"

    @property
    def data(self) -> RawReadData:
        return self


def encode_read_response(resp: pb.ReadResponse | RawReadData) -> bytes:
    if isinstance(resp, RawReadData):
        parts: list[Buf] = [_int_field(1, resp.assignment_id)]
        size = len(parts[0])
        size += _len_parts(_T_CHUNKS_2, resp.chunks, parts)
        tail = (
            _int_field(3, resp.next_offset)
            + _int_field(4, resp.end_offset)
            + _int_field(5, resp.bytes)
        )
        parts.append(tail)
        size += len(tail)
        return b"".join([bytes((_T_READ_DATA,)), varint(size), *parts])
    return resp.SerializeToString()


def decode_read_response(data: bytes | bytearray) -> Any:
    """A RawReadData for a data message (chunks as memoryviews), else the generated parser's.

    (The native TCP port's client hands big frames over as the bytearray they were received
    into: the chunks point into it.)"""
    try:
        if data[:1] == bytes((_T_READ_DATA,)):
            mv = memoryview(data)
            size, pos = _read_varint(mv, 1)
            if pos + size == len(data):
                fields = _parse_fields(mv, pos, len(data), {2})
                if fields is not None:
                    ints, chunks = fields
                    return RawReadData(
                        ints.get(1, 0),
                        chunks,
                        _signed(ints.get(3, 0)),
                        _signed(ints.get(4, 0)),
                        _signed(ints.get(5, 0)),
                    )
    except (IndexError, ValueError):
        pass
    return pb.ReadResponse.FromString(bytes(data))


# ---------------------------------------------------------------- ReadRangeResponse


@dataclass(slots=True)
class RawRangeResponse:
    """ReadRangeResponse with its chunks as bytes/memoryviews."""

    chunks: list[Buf]
    first_offset: int
    next_offset: int
    start_offset: int
    end_offset: int


def encode_range_response(resp: pb.ReadRangeResponse | RawRangeResponse) -> bytes:
    if isinstance(resp, RawRangeResponse):
        parts: list[Buf] = []
        _len_parts(_T_BYTES_1, resp.chunks, parts)
        parts.append(
            _int_field(2, resp.first_offset)
            + _int_field(3, resp.next_offset)
            + _int_field(4, resp.start_offset)
            + _int_field(5, resp.end_offset)
        )
        return b"".join(parts)
    return resp.SerializeToString()


def decode_range_response(data: bytes) -> RawRangeResponse:
    mv = memoryview(data)
    try:
        fields = _parse_fields(mv, 0, len(data), {1})
    except (IndexError, ValueError):
        fields = None
    if fields is None:
        r = pb.ReadRangeResponse.FromString(data)
        return RawRangeResponse(
            list(r.chunks), r.first_offset, r.next_offset, r.start_offset, r.end_offset
        )
    ints, chunks = fields
    return RawRangeResponse(
        chunks,
        _signed(ints.get(2, 0)),
        _signed(ints.get(3, 0)),
        _signed(ints.get(4, 0)),
        _signed(ints.get(5, 0)),
    )


def _parse_fields(
    mv: memoryview, pos: int, end: int, bytes_fields: set[int]
) -> tuple[dict[int, int], list[Buf]] | None:
    """Varint fields and one repeated bytes field of a flat message; None if anything else appears."""
    ints: dict[int, int] = {}
    chunks: list[Buf] = []
    while pos < end:
        tag, pos = _read_varint(mv, pos)
        field, wire = tag >> 3, tag & 7
        if not 0 < field < 1 << 29:
            return None  # no field has this number: protobuf's parser refuses it
        if wire == 0:
            ints[field], pos = _read_varint(mv, pos)
        elif wire == 2 and field in bytes_fields:
            n, pos = _read_varint(mv, pos)
            if pos + n > end:
                return None
            chunks.append(mv[pos : pos + n])
            pos += n
        else:
            return None
    return ints, chunks

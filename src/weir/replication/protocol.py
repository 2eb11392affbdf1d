"""The bookie wire protocol: pure encode / decode of requests and responses (no I/O).

One TCP connection carries many requests at once (pipelined); each frame is
``u32 length`` + body, each body starts ``u8 op, u64 request_id`` and a response
echoes both, so answers can come back in any order. Integers are big-endian.

Requests::

    ADD       ledger u64, entry u64, lac i64, flags u8, payload (the rest)
    READ      ledger u64, entry u64, flags u8
    READ_LAC  ledger u64, flags u8 [, previous i64, timeout_ms u32 with FLAG_LONG_POLL]

Responses add ``status u8`` after the request id; a status other than OK is
followed by a UTF-8 message and nothing else. OK responses::

    ADD       ledger u64, entry u64
    READ      ledger u64, entry u64, lac i64, payload (the rest)
    READ_LAC  ledger u64, lac i64

``FLAG_FENCE`` on READ / READ_LAC fences the ledger first (recovery);
``FLAG_RECOVERY`` on ADD lets a recoverer re-replicate into a fenced ledger;
``FLAG_LONG_POLL`` on READ_LAC waits (up to ``timeout_ms``) until the LAC passes
``previous``, so a tailing reader learns of new entries without polling.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from weir.errors import BadRequestError

MAX_FRAME = 32 << 20  # an entry's payload is limited to MAX_ENTRY below
MAX_ENTRY = 16 << 20

FLAG_FENCE = 0x01
FLAG_RECOVERY = 0x02
FLAG_LONG_POLL = 0x04

_LEN = struct.Struct(">I")
_HEAD = struct.Struct(">BQ")
_RHEAD = struct.Struct(">BQB")
_ADD = struct.Struct(">QQqB")
_READ = struct.Struct(">QQB")
_READ_LAC = struct.Struct(">QB")
_LONG_POLL = struct.Struct(">qI")
_ADD_OK = struct.Struct(">QQ")
_READ_OK = struct.Struct(">QQq")
_LAC_OK = struct.Struct(">Qq")


class Op(IntEnum):
    ADD = 1
    READ = 2
    READ_LAC = 3


class Status(IntEnum):
    OK = 0
    NO_ENTRY = 1
    NO_LEDGER = 2
    FENCED = 3
    BAD_REQUEST = 4
    OVERLOADED = 5
    READ_ONLY = 6
    STORAGE_ERROR = 7


class ProtocolError(BadRequestError):
    """A frame that does not decode: wrong length, unknown op or status, short fields."""

    code = "BAD_FRAME"


@dataclass(frozen=True, slots=True)
class AddRequest:
    request_id: int
    ledger: int
    entry: int
    lac: int
    flags: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class ReadRequest:
    request_id: int
    ledger: int
    entry: int
    flags: int


@dataclass(frozen=True, slots=True)
class ReadLacRequest:
    request_id: int
    ledger: int
    flags: int
    previous: int = -1  # long poll: answer once the LAC is above this
    timeout_ms: int = 0  # long poll: or after this long, with the LAC as it is


Request = AddRequest | ReadRequest | ReadLacRequest


@dataclass(frozen=True, slots=True)
class AddResponse:
    request_id: int
    ledger: int
    entry: int


@dataclass(frozen=True, slots=True)
class ReadResponse:
    request_id: int
    ledger: int
    entry: int
    lac: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    request_id: int
    ledger: int
    lac: int


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    op: Op
    request_id: int
    status: Status
    message: str


Response = AddResponse | ReadResponse | ReadLacResponse | ErrorResponse


def frame(body: bytes) -> bytes:
    return _LEN.pack(len(body)) + body


def frame_length(prefix: bytes) -> int:
    """The body length a 4-byte prefix announces; refuses frames above MAX_FRAME."""
    (n,) = _LEN.unpack(prefix)
    if n > MAX_FRAME or n < _HEAD.size:
        raise ProtocolError(f"frame of {n} bytes (allowed {_HEAD.size}..{MAX_FRAME})")
    return int(n)


def encode_request(req: Request) -> bytes:
    if isinstance(req, AddRequest):
        if len(req.payload) > MAX_ENTRY:
            raise ProtocolError(f"entry of {len(req.payload)} bytes is over {MAX_ENTRY}")
        head = _HEAD.pack(Op.ADD, req.request_id)
        return frame(
            head + _ADD.pack(req.ledger, req.entry, req.lac, req.flags) + bytes(req.payload)
        )
    if isinstance(req, ReadRequest):
        head = _HEAD.pack(Op.READ, req.request_id)
        return frame(head + _READ.pack(req.ledger, req.entry, req.flags))
    head = _HEAD.pack(Op.READ_LAC, req.request_id)
    body = head + _READ_LAC.pack(req.ledger, req.flags)
    if req.flags & FLAG_LONG_POLL:
        body += _LONG_POLL.pack(req.previous, req.timeout_ms)
    return frame(body)


def request_head(body: bytes) -> tuple[int, int]:
    """(op, request_id) of a body, for answering a request that fails to decode."""
    if len(body) < _HEAD.size:
        raise ProtocolError("request shorter than its header")
    op, rid = _HEAD.unpack_from(body)
    return int(op), int(rid)


def decode_request(body: bytes) -> Request:
    op, rid = request_head(body)
    rest = memoryview(body)[_HEAD.size :]
    try:
        if op == Op.ADD:
            if len(rest) < _ADD.size:
                raise ProtocolError("ADD request too short")
            ledger, entry, lac, flags = _ADD.unpack_from(rest)
            payload = bytes(rest[_ADD.size :])
            if len(payload) > MAX_ENTRY:
                raise ProtocolError(f"entry of {len(payload)} bytes is over {MAX_ENTRY}")
            return AddRequest(rid, ledger, entry, lac, flags, payload)
        if op == Op.READ:
            if len(rest) != _READ.size:
                raise ProtocolError("READ request of the wrong length")
            return ReadRequest(rid, *_READ.unpack_from(rest))
        if op == Op.READ_LAC:
            if len(rest) < _READ_LAC.size:
                raise ProtocolError("READ_LAC request too short")
            ledger, flags = _READ_LAC.unpack_from(rest)
            want = _READ_LAC.size + (_LONG_POLL.size if flags & FLAG_LONG_POLL else 0)
            if len(rest) != want:
                raise ProtocolError("READ_LAC request of the wrong length")
            if flags & FLAG_LONG_POLL:
                previous, timeout_ms = _LONG_POLL.unpack_from(rest, _READ_LAC.size)
                return ReadLacRequest(rid, ledger, flags, previous, timeout_ms)
            return ReadLacRequest(rid, ledger, flags)
    except struct.error as exc:
        raise ProtocolError(str(exc)) from None
    raise ProtocolError(f"unknown op {op}")


def encode_response(resp: Response) -> bytes:
    if isinstance(resp, ErrorResponse):
        head = _RHEAD.pack(resp.op, resp.request_id, resp.status)
        return frame(head + resp.message.encode()[:4096])
    if isinstance(resp, AddResponse):
        head = _RHEAD.pack(Op.ADD, resp.request_id, Status.OK)
        return frame(head + _ADD_OK.pack(resp.ledger, resp.entry))
    if isinstance(resp, ReadResponse):
        head = _RHEAD.pack(Op.READ, resp.request_id, Status.OK)
        return frame(head + _READ_OK.pack(resp.ledger, resp.entry, resp.lac) + resp.payload)
    head = _RHEAD.pack(Op.READ_LAC, resp.request_id, Status.OK)
    return frame(head + _LAC_OK.pack(resp.ledger, resp.lac))


def decode_response(body: bytes) -> Response:
    if len(body) < _RHEAD.size:
        raise ProtocolError("response shorter than its header")
    op_n, rid, status_n = _RHEAD.unpack_from(body)
    try:
        op, status = Op(op_n), Status(status_n)
    except ValueError:
        raise ProtocolError(f"unknown op {op_n} or status {status_n}") from None
    rest = memoryview(body)[_RHEAD.size :]
    if status != Status.OK:
        return ErrorResponse(op, rid, status, bytes(rest).decode(errors="replace"))
    try:
        if op == Op.ADD:
            return AddResponse(rid, *_ADD_OK.unpack(rest))
        if op == Op.READ:
            ledger, entry, lac = _READ_OK.unpack_from(rest)
            return ReadResponse(rid, ledger, entry, lac, bytes(rest[_READ_OK.size :]))
        return ReadLacResponse(rid, *_LAC_OK.unpack(rest))
    except struct.error as exc:
        raise ProtocolError(f"{op.name} response: {exc}") from None

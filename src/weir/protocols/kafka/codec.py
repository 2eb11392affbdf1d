"""The Kafka wire codec: bytes <-> messages, pure (no asyncio, no broker).

Every message is declared once (`weir.protocols.kafka.messages`) in a small text
schema, one field a line, indented under the array it belongs to::

    name type [versions] [null=versions] [tag=N] [def=N]

``type`` is int8, int16, int32, int64, uint16, float64, bool, uuid, string,
bytes, records, ``[]int32`` / ``[]int64`` / ``[]string``, or ``[]`` for an array
of the structs declared on the indented lines below it. ``versions`` is
``0+``, ``3+``, ``2-7`` or ``5`` (default ``0+``). The schema of one version is
compiled once into reader and writer closures. A decoded message is a plain
dict keyed by field name; an encoded one may leave out any field (its default:
0, "", [], false, or None when nullable), so a handler writes one dict for
every version and the writer keeps only the fields the version has.

Flexible versions (KIP-482) use compact lengths (unsigned varint + 1) and end
every struct with tagged fields: unknown tags are skipped on read, declared ones
are read into the dict, and written when the dict holds a non-None value.

Malformed input raises `KafkaCodecError`, never anything else (the fuzzer checks).
"""

from __future__ import annotations

import struct
import uuid as _uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


class KafkaCodecError(ValueError):
    """The bytes do not decode as the message they claim to be."""


class UnsupportedVersionError(KafkaCodecError):
    """A request for an API key or version this server does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"API {api_key} version {api_version} is not served")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


# ---------------------------------------------------------------------------- primitives

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_HEADER = struct.Struct(">hhi")
NULL_UUID = bytes(16)


class Reader:
    """A cursor over one message's bytes; every read checks the bounds."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise KafkaCodecError(f"{n} bytes wanted at {self.pos}, message has {self.end}")
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def view(self, n: int) -> memoryview:
        """The next ``n`` bytes as a view of the message's buffer (no copy)."""
        if n < 0 or self.pos + n > self.end:
            raise KafkaCodecError(f"{n} bytes wanted at {self.pos}, message has {self.end}")
        out = memoryview(self.buf)[self.pos : self.pos + n]
        self.pos += n
        return out

    def fixed(self, s: struct.Struct) -> Any:
        if self.pos + s.size > self.end:
            raise KafkaCodecError(f"message ends at {self.end}, a field runs past it")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def uvarint(self) -> int:
        value = shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        while True:
            if pos >= end:
                raise KafkaCodecError("varint runs past the end of the message")
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 28:
                raise KafkaCodecError("unsigned varint longer than 5 bytes")
        self.pos = pos
        return value

    def length(self, compact: bool, wide: bool) -> int:
        """A length prefix: -1 for null."""
        if compact:
            return self.uvarint() - 1
        return int(self.fixed(_I32 if wide else _I16))


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_UVARINT = [uvarint(i) for i in range(256)]


def _uv(n: int) -> bytes:
    return _SMALL_UVARINT[n] if n < 256 else uvarint(n)


# ---------------------------------------------------------------------------- schema


@dataclass(frozen=True, slots=True)
class Versions:
    low: int
    high: int  # inclusive; 1 << 15 for "N+"

    @staticmethod
    def parse(text: str) -> Versions:
        if text == "none":
            return Versions(1, 0)
        if text.endswith("+"):
            return Versions(int(text[:-1]), 1 << 15)
        low, _, high = text.partition("-")
        return Versions(int(low), int(high or low))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high


@dataclass(slots=True)
class Field:
    name: str
    type: str
    versions: Versions
    nullable: Versions
    tag: int | None = None
    default: int | None = None
    fields: list[Field] = field(default_factory=list)


def parse_schema(text: str) -> list[Field]:
    """Fields from the indented text form (see the module docstring)."""
    root: list[Field] = []
    stack: list[tuple[int, list[Field]]] = [(-1, root)]
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        parts = line.split()
        name, kind = parts[0], parts[1]
        versions, nullable, tag, default = Versions(0, 1 << 15), Versions(1, 0), None, None
        for p in parts[2:]:
            if p.startswith("def="):
                default = int(p[4:])
            elif p.startswith("null="):
                nullable = Versions.parse(p[5:])
            elif p.startswith("tag="):
                tag = int(p[4:])
            else:
                versions = Versions.parse(p)
        while stack[-1][0] >= indent:
            stack.pop()
        f = Field(name, kind, versions, nullable, tag, default)
        stack[-1][1].append(f)
        if kind == "[]":
            stack.append((indent, f.fields))
    return root


Decoder = Callable[[Reader], Any]
Encoder = Callable[[Any, list[bytes]], None]


def _default(f: Field, version: int) -> Any:
    if version in f.nullable:
        return None
    if f.default is not None:
        return f.default
    t = f.type
    if t.startswith("[]"):
        return []
    if t == "string":
        return ""
    if t in ("bytes", "records"):
        return b""
    if t == "bool":
        return False
    if t == "uuid":
        return NULL_UUID
    return 0


_FIXED = {
    "int8": _I8,
    "int16": _I16,
    "uint16": _U16,
    "int32": _I32,
    "int64": _I64,
    "float64": _F64,
}


def _scalar_decoder(kind: str, flexible: bool, nullable: bool) -> Decoder:
    if kind in _FIXED:
        s = _FIXED[kind]
        return lambda r: r.fixed(s)
    if kind == "bool":
        return lambda r: r.fixed(_I8) != 0
    if kind == "uuid":
        return lambda r: r.take(16)
    if kind == "string":

        def read_string(r: Reader) -> str | None:
            n = r.length(flexible, False)
            if n < 0:
                if nullable:
                    return None
                raise KafkaCodecError("null string in a non-nullable field")
            try:
                return r.take(n).decode()
            except UnicodeDecodeError:
                raise KafkaCodecError("string is not utf-8") from None

        return read_string
    if kind in ("bytes", "records"):
        # records (a produce request's record batches, up to megabytes) are a view of
        # the request's buffer, not a copy
        take = Reader.view if kind == "records" else Reader.take

        def read_bytes(r: Reader) -> bytes | memoryview | None:
            n = r.length(flexible, True)
            if n < 0:
                if nullable:
                    return None
                raise KafkaCodecError("null bytes in a non-nullable field")
            return take(r, n)

        return read_bytes
    raise KeyError(kind)  # pragma: no cover - schemas are checked at import


def _array_decoder(item: Decoder, flexible: bool, nullable: bool) -> Decoder:
    def read_array(r: Reader) -> list[Any] | None:
        n = r.length(flexible, True)
        if n < 0:
            if nullable:
                return None
            raise KafkaCodecError("null array in a non-nullable field")
        if n > r.end - r.pos:  # every element takes at least one byte
            raise KafkaCodecError(f"array of {n} elements in {r.end - r.pos} bytes")
        return [item(r) for _ in range(n)]

    return read_array


def skip_tagged(r: Reader, known: dict[int, tuple[str, Decoder]] | None, out: Message) -> None:
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        size = r.uvarint()
        spec = known.get(tag) if known else None
        if spec is None:
            r.take(size)
            continue
        sub = Reader(r.take(size))
        out[spec[0]] = spec[1](sub)


def _struct_decoder(fields: list[Field], version: int, flexible: bool) -> Decoder:
    plan: list[tuple[str, Decoder]] = []
    tagged: dict[int, tuple[str, Decoder]] = {}
    defaults: dict[str, Any] = {}
    for f in fields:
        if version not in f.versions:
            defaults[f.name] = _default(f, version)
            continue
        dec = _field_decoder(f, version, flexible)
        if f.tag is not None:
            if flexible:
                tagged[f.tag] = (f.name, dec)
            defaults[f.name] = _default(f, version)
        else:
            plan.append((f.name, dec))

    def read_struct(r: Reader) -> Message:
        out: Message = dict(defaults)
        for name, dec in plan:
            out[name] = dec(r)
        if flexible:
            skip_tagged(r, tagged, out)
        return out

    return read_struct


def _field_decoder(f: Field, version: int, flexible: bool) -> Decoder:
    nullable = version in f.nullable
    if f.type == "[]":
        return _array_decoder(_struct_decoder(f.fields, version, flexible), flexible, nullable)
    if f.type.startswith("[]"):
        return _array_decoder(_scalar_decoder(f.type[2:], flexible, False), flexible, nullable)
    return _scalar_decoder(f.type, flexible, nullable)


# ---------------------------------------------------------------------------- encoders


def _len_prefix(n: int, flexible: bool, wide: bool) -> bytes:
    if flexible:
        return _uv(n + 1)
    return (_I32 if wide else _I16).pack(n)


def _scalar_encoder(kind: str, flexible: bool, nullable: bool, name: str) -> Encoder:
    if kind in _FIXED:
        pack = _FIXED[kind].pack
        return lambda v, out: out.append(pack(v))
    if kind == "bool":
        return lambda v, out: out.append(b"\x01" if v else b"\x00")
    if kind == "uuid":

        def write_uuid(v: Any, out: list[bytes]) -> None:
            b = v.bytes if isinstance(v, _uuid.UUID) else bytes(v)
            if len(b) != 16:
                raise KafkaCodecError(f"{name}: a uuid is 16 bytes")
            out.append(b)

        return write_uuid
    wide = kind != "string"
    pieces = kind == "records"  # records may be given as a list of batches: not joined here

    def write_var(v: Any, out: list[bytes]) -> None:
        if v is None:
            if not nullable:
                raise KafkaCodecError(f"{name} may not be null in this version")
            out.append(b"\x00" if flexible else (_I32 if wide else _I16).pack(-1))
            return
        if pieces and isinstance(v, list):
            out.append(_len_prefix(sum(map(len, v)), flexible, wide))
            out.extend(v)
            return
        b = v.encode() if isinstance(v, str) else v
        out.append(_len_prefix(len(b), flexible, wide))
        out.append(b)

    return write_var


def _array_encoder(item: Encoder, flexible: bool, nullable: bool, name: str) -> Encoder:
    def write_array(v: Any, out: list[bytes]) -> None:
        if v is None:
            if not nullable:
                raise KafkaCodecError(f"{name} may not be null in this version")
            out.append(b"\x00" if flexible else _I32.pack(-1))
            return
        out.append(_len_prefix(len(v), flexible, True))
        for x in v:
            item(x, out)

    return write_array


def _struct_encoder(fields: list[Field], version: int, flexible: bool) -> Encoder:
    plan: list[tuple[str, Encoder, Any]] = []
    tagged: list[tuple[int, str, Encoder]] = []
    for f in fields:
        if version not in f.versions:
            continue
        enc = _field_encoder(f, version, flexible)
        if f.tag is not None:
            if flexible:
                tagged.append((f.tag, f.name, enc))
            continue
        plan.append((f.name, enc, _default(f, version)))
    tagged.sort()

    def write_struct(v: Message, out: list[bytes]) -> None:
        get = v.get
        for name, enc, default in plan:
            value = get(name, default)
            enc(default if value is None and default is not None else value, out)
        if flexible:
            present = [(t, n, e) for t, n, e in tagged if get(n) is not None]
            out.append(_uv(len(present)))
            for tag, name, enc in present:
                sub: list[bytes] = []
                enc(v[name], sub)
                body = b"".join(sub)
                out.append(_uv(tag))
                out.append(_uv(len(body)))
                out.append(body)

    return write_struct


def _field_encoder(f: Field, version: int, flexible: bool) -> Encoder:
    nullable = version in f.nullable
    if f.type == "[]":
        return _array_encoder(
            _struct_encoder(f.fields, version, flexible), flexible, nullable, f.name
        )
    if f.type.startswith("[]"):
        return _array_encoder(
            _scalar_encoder(f.type[2:], flexible, False, f.name), flexible, nullable, f.name
        )
    return _scalar_encoder(f.type, flexible, nullable, f.name)


# ---------------------------------------------------------------------------- APIs


class Api:
    """One Kafka API: its key, the versions served, and both schemas."""

    def __init__(
        self,
        key: int,
        name: str,
        versions: str,
        flexible: int | None,
        request: str,
        response: str,
    ) -> None:
        self.key = key
        self.name = name
        v = Versions.parse(versions)
        self.min_version, self.max_version = v.low, v.high
        self.flexible_from = flexible if flexible is not None else 1 << 15
        self.request_fields = parse_schema(request)
        self.response_fields = parse_schema(response)
        self._decoders: dict[int, Decoder] = {}
        self._encoders: dict[int, Encoder] = {}
        for version in range(self.min_version, self.max_version + 1):
            flex = self.flexible(version)
            self._decoders[version] = _struct_decoder(self.request_fields, version, flex)
            self._encoders[version] = _struct_encoder(self.response_fields, version, flex)

    def flexible(self, version: int) -> bool:
        return version >= self.flexible_from

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def decode_request(self, version: int, r: Reader) -> Message:
        return self._decoders[version](r)  # type: ignore[no-any-return]

    def encode_response(self, version: int, body: Message, out: list[bytes]) -> None:
        self._encoders[version](body, out)

    # client side (tests and golden bytes): the same schemas the other way round
    def encode_request(self, version: int, body: Message) -> bytes:
        out: list[bytes] = []
        _struct_encoder(self.request_fields, version, self.flexible(version))(body, out)
        return b"".join(out)

    def decode_response(self, version: int, buf: bytes) -> Message:
        r = Reader(buf)
        msg = _struct_decoder(self.response_fields, version, self.flexible(version))(r)
        return msg  # type: ignore[no-any-return]


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


API_VERSIONS_KEY = 18


def decode_request(
    apis: dict[int, Api], frame: bytes | memoryview
) -> tuple[RequestHeader, Api, Message]:
    """One request frame (without its size prefix) into header, API and body.

    Raises UnsupportedVersionError for an unknown API key or version (the caller answers
    ApiVersions requests of any version with UNSUPPORTED_VERSION, closes otherwise)."""
    r = Reader(frame)
    if len(frame) < _HEADER.size + 2:
        raise KafkaCodecError(f"request of {len(frame)} bytes is shorter than its header")
    api_key, api_version, correlation_id = _HEADER.unpack_from(frame, 0)
    r.pos = _HEADER.size
    n = r.fixed(_I16)
    client_id = None if n < 0 else r.take(n).decode("utf-8", "replace")
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    api = apis.get(api_key)
    if api is None or not api.serves(api_version):
        raise UnsupportedVersionError(api_key, api_version, correlation_id)
    flexible = api.flexible(api_version)
    if flexible:
        skip_tagged(r, None, {})
    body = api.decode_request(api_version, r)
    # Bytes after the message are ignored, as Kafka's broker does: librdkafka's Metadata
    # request for all topics (v9+) leaves three bytes of a length placeholder behind.
    return header, api, body


def encode_response(api: Api, version: int, correlation_id: int, body: Message) -> bytes:
    """A response frame, size prefix included."""
    out: list[bytes] = [b"", _I32.pack(correlation_id)]
    # response header v1 (tagged fields) for flexible versions, except ApiVersions (always v0)
    if api.flexible(version) and api.key != API_VERSIONS_KEY:
        out.append(b"\x00")
    api.encode_response(version, body, out)
    size = sum(map(len, out))
    out[0] = _I32.pack(size)
    return b"".join(out)


def encode_request_frame(
    api: Api, version: int, correlation_id: int, body: Message, client_id: str | None = "t"
) -> bytes:
    """A request frame, size prefix included (tests, golden bytes, the fuzzer's seeds)."""
    head = [_HEADER.pack(api.key, version, correlation_id)]
    if client_id is None:
        head.append(_I16.pack(-1))
    else:
        cid = client_id.encode()
        head.append(_I16.pack(len(cid)) + cid)
    if api.flexible(version):
        head.append(b"\x00")
    payload = b"".join(head) + api.encode_request(version, body)
    return _I32.pack(len(payload)) + payload


def decode_response_frame(api: Api, version: int, frame: bytes) -> tuple[int, Message]:
    """(correlation id, body) of a response frame without its size prefix."""
    r = Reader(frame)
    correlation_id = r.fixed(_I32)
    if api.flexible(version) and api.key != API_VERSIONS_KEY:
        skip_tagged(r, None, {})
    body = _struct_decoder(api.response_fields, version, api.flexible(version))(r)
    return correlation_id, body

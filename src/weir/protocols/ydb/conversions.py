"""Small translations between YDB message fields and weir's: times, codecs, metadata, paths.

YDB message metadata values are bytes while weir record headers are str -> str;
values cross as utf-8 with ``surrogateescape``, so any byte string comes back
exactly as it was written (and utf-8 text reads as text in the weir SDK). A write
session's meta is stored as headers under the reserved prefix ``ydb.session.``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import grpc

from weir.errors import BadRequestError
from weir.protocols.ydb.protos import ydb_topic_pb2
from weir.storage.codecs import CUSTOM_CODECS, Codec, is_opaque

DATABASE_HEADER = "x-ydb-database"
MIB = 1 << 20
# Header prefix of a YDB write session's meta (InitRequest.write_session_meta): stored with
# every message of the session, served back as the batch's write_session_meta.
SESSION_META = "ydb.session."

_RAW = ydb_topic_pb2.CODEC_RAW
_DECODED = frozenset({_RAW, ydb_topic_pb2.CODEC_GZIP, ydb_topic_pb2.CODEC_ZSTD})  # weir runs these
_CODEC_HELP = (
    "use RAW (1), GZIP (2), LZOP (3), ZSTD (4) or a custom codec id from "
    f"{CUSTOM_CODECS.start} to {CUSTOM_CODECS.stop - 1}"
)


def _api_codec(codec: int) -> int:
    """``codec`` if it is a codec of the YDB Topic API; BadRequestError for reserved ids."""
    if codec in _DECODED or is_opaque(codec):
        return int(codec)
    raise BadRequestError(f"codec {codec} is not a codec of the YDB Topic API: {_CODEC_HELP}")


def storage_codec(ydb_codec: int) -> int:
    """The data codec to record for a WriteRequest's codec. RAW, GZIP and ZSTD data is
    decoded by weir's readers; LZOP and custom codecs are stored as written and served
    with their id for the ydb SDK's own decoder."""
    if ydb_codec == ydb_topic_pb2.CODEC_UNSPECIFIED:
        return int(Codec.RAW)
    return _api_codec(ydb_codec)


def topic_codecs(codecs: Iterable[int]) -> list[int]:
    """A topic's (or consumer's) codecs as given by a YDB client; BadRequestError for ids
    outside the API."""
    return [_api_codec(c) for c in codecs]


def ydb_codecs(codecs: Iterable[int]) -> list[int]:
    """A topic's codecs as YDB clients see them. LZ4 is no codec of the API: weir compresses
    whole batches with it and serves them RAW, and a topic always takes RAW."""
    out: list[int] = []
    for c in codecs:
        c = _RAW if c == Codec.LZ4 else c
        if c not in out:
            out.append(c)
    return out


def ts_ms(ts: Any) -> int:
    """A google.protobuf.Timestamp as ms since the epoch."""
    return int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000


def set_ts(ts: Any, ms: int) -> None:
    """Set a google.protobuf.Timestamp to ``ms`` since the epoch."""
    seconds, rest = divmod(ms, 1000)
    ts.seconds = seconds
    ts.nanos = rest * 1_000_000


def duration_ms(d: Any) -> int:
    """A google.protobuf.Duration in ms."""
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def set_duration(d: Any, ms: int) -> None:
    seconds, rest = divmod(ms, 1000)
    d.seconds = seconds
    d.nanos = rest * 1_000_000


def headers_from_metadata(items: Iterable[Any]) -> dict[str, str]:
    """MetadataItems (key str, value bytes) as weir headers, losslessly."""
    return {i.key: i.value.decode("utf-8", "surrogateescape") for i in items}


def check_metadata_keys(headers: list[dict[str, str]]) -> None:
    """BadRequestError if a message's own metadata poses as the write session's meta."""
    for key in set().union(*headers):  # the few distinct keys of a request, gathered in C
        if key.startswith(SESSION_META):
            raise BadRequestError(
                f"metadata key {key!r}: keys starting with {SESSION_META!r} are reserved for the "
                "write session's meta"
            )


def session_meta_headers(meta: Mapping[str, str]) -> dict[str, str]:
    """A write session's meta as the headers every message it writes carries."""
    return {SESSION_META + k: v for k, v in meta.items()}


def split_session_meta(headers: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the write session's meta, the message's own headers) of a stored message."""
    meta: dict[str, str] = {}
    own: dict[str, str] = {}
    for k, v in headers.items():
        if k.startswith(SESSION_META) and (v.isascii() or _is_utf8(v)):
            meta[k[len(SESSION_META) :]] = v
        else:
            own[k] = v
    return meta, own


def _is_utf8(text: str) -> bool:
    """False for text holding bytes that were not utf-8 (surrogate escapes): a protobuf
    string cannot carry them."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def metadata_items(headers: Mapping[str, str]) -> list[Any]:
    """weir headers as MetadataItems, the exact bytes a YDB writer sent."""
    item = ydb_topic_pb2.MetadataItem
    return [item(key=k, value=v.encode("utf-8", "surrogateescape")) for k, v in headers.items()]


def database_of(context: grpc.aio.ServicerContext) -> str:
    """The database the SDK named (``x-ydb-database``); topic paths are relative to it."""
    for key, value in context.invocation_metadata() or ():
        if key == DATABASE_HEADER:
            return value if isinstance(value, str) else value.decode()
    return ""


def names_database(path: str, database: str) -> bool:
    """True for a path that names the database (or the root) itself: it cannot be a topic."""
    p = path.strip().rstrip("/")
    return not p or p == database.strip().rstrip("/")

"""Small translations between YDB message fields and weir's: times, codecs, metadata, paths.

YDB message metadata values are bytes while weir record headers are str -> str;
values cross as utf-8 with ``surrogateescape``, so any byte string comes back
exactly as it was written (and utf-8 text reads as text in the weir SDK).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import grpc

from weir.errors import BadRequestError
from weir.protocols.ydb.protos import ydb_topic_pb2
from weir.storage.codecs import Codec

DATABASE_HEADER = "x-ydb-database"
MIB = 1 << 20

# Ydb.Topic.Codec ids that weir stores (the numbering is shared, see storage/codecs.py).
_CODECS: dict[int, Codec] = {
    ydb_topic_pb2.CODEC_UNSPECIFIED: Codec.RAW,
    ydb_topic_pb2.CODEC_RAW: Codec.RAW,
    ydb_topic_pb2.CODEC_GZIP: Codec.GZIP,
    ydb_topic_pb2.CODEC_ZSTD: Codec.ZSTD,
}


def storage_codec(ydb_codec: int) -> Codec:
    """The weir codec of a WriteRequest's codec; BadRequestError for ones weir cannot store."""
    codec = _CODECS.get(ydb_codec)
    if codec is None:
        raise BadRequestError(
            f"codec {ydb_codec} is not supported; use RAW (1), GZIP (2) or ZSTD (4)"
        )
    return codec


def topic_codecs(codecs: Iterable[int]) -> list[int]:
    """A topic's accepted codecs as YDB ids; BadRequestError for unknown ones."""
    out = []
    for c in codecs:
        if c not in _CODECS or c == ydb_topic_pb2.CODEC_UNSPECIFIED:
            raise BadRequestError(f"codec {c} is not supported; use RAW (1), GZIP (2) or ZSTD (4)")
        out.append(int(c))
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

"""Key layout of the storage tables.

Keys are big-endian so that byte order is numeric order: a cursor walks a
partition's blobs by offset. A partition is named by a 64-bit ``log_id`` chosen
by the layer above (storage knows nothing of topics).

    blobs       (log_id u64, first_offset u64, count u32, part u16) -> blob bytes
    blob_index  (log_id u64, first_offset u64, count u32)           -> BlobInfo
    partitions  (log_id u64)                                        -> PartitionMeta
    producers   (log_id u64, producer_id utf-8)                     -> ProducerState
"""

from __future__ import annotations

import struct

BLOBS = "blobs"
BLOB_INDEX = "blob_index"
PARTITIONS = "partitions"
PRODUCERS = "producers"
STORAGE_TABLES = (BLOBS, BLOB_INDEX, PARTITIONS, PRODUCERS)

_LOG = struct.Struct(">Q")
_BLOB = struct.Struct(">QQIH")
_INDEX = struct.Struct(">QQI")


def log_prefix(log_id: int) -> bytes:
    return _LOG.pack(log_id)


def log_id_of(key: bytes) -> int:
    return int(_LOG.unpack_from(key)[0])


def blob_key(log_id: int, first_offset: int, count: int, part: int = 0) -> bytes:
    return _BLOB.pack(log_id, first_offset, count, part)


def index_key(log_id: int, first_offset: int, count: int) -> bytes:
    return _INDEX.pack(log_id, first_offset, count)


def parse_index_key(key: bytes) -> tuple[int, int, int]:
    log_id, first, count = _INDEX.unpack(key)
    return int(log_id), int(first), int(count)


def producer_key(log_id: int, producer_id: str) -> bytes:
    return _LOG.pack(log_id) + producer_id.encode()

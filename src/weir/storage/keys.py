"""Key layout of the storage tables.

Keys are big-endian so that byte order is numeric order: a cursor walks a
partition's blobs by offset. A partition is named by a 64-bit ``log_id`` chosen
by the layer above (storage knows nothing of topics).

    blobs       (log_id u64, first_offset u64, count u32, part u16) -> blob bytes
    blob_index  (log_id u64, first_offset u64, count u32)           -> BlobInfo
    partitions  (log_id u64)                                        -> PartitionMeta
    producers   (log_id u64, producer_id utf-8)                     -> ProducerState
    txn_open    (log_id u64, txn_id u64, kind u8, ...)              -> an open transaction's
                batches (kind 0, first offset u64 -> count) and producer states (kind 1, id)
    txn_markers (log_id u64, marker offset u64)                     -> TxnMarker
"""

from __future__ import annotations

import struct

BLOBS = "blobs"
BLOB_INDEX = "blob_index"
PARTITIONS = "partitions"
PRODUCERS = "producers"
TXN_OPEN = "txn_open"
TXN_MARKERS = "txn_markers"
STORAGE_TABLES = (BLOBS, BLOB_INDEX, PARTITIONS, PRODUCERS, TXN_OPEN, TXN_MARKERS)

_LOG = struct.Struct(">Q")
_BLOB = struct.Struct(">QQIH")
_INDEX = struct.Struct(">QQI")
_TXN = struct.Struct(">QQB")
_TXN_BATCH = struct.Struct(">QQBQ")
_MARKER = struct.Struct(">QQ")
TXN_BATCH = 0
TXN_PRODUCER = 1


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


def txn_prefix(log_id: int, txn_id: int) -> bytes:
    """Every key of one open transaction in one partition (a range delete ends it)."""
    return _LOG.pack(log_id) + _LOG.pack(txn_id)


def txn_batch_key(log_id: int, txn_id: int, first_offset: int) -> bytes:
    return _TXN_BATCH.pack(log_id, txn_id, TXN_BATCH, first_offset)


def txn_producer_key(log_id: int, txn_id: int, producer_id: str) -> bytes:
    return _TXN.pack(log_id, txn_id, TXN_PRODUCER) + producer_id.encode()


def parse_txn_key(key: bytes) -> tuple[int, int, int, bytes]:
    """(log_id, txn_id, kind, rest) of a txn_open key."""
    log_id, txn_id, kind = _TXN.unpack_from(key)
    return int(log_id), int(txn_id), int(kind), key[_TXN.size :]


def marker_key(log_id: int, offset: int) -> bytes:
    return _MARKER.pack(log_id, offset)


def parse_marker_key(key: bytes) -> tuple[int, int]:
    log_id, offset = _MARKER.unpack(key)
    return int(log_id), int(offset)

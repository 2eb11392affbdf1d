"""An offloaded segment: one sealed blob, or several consecutive ones, as a Parquet file.

The file has the columns of a weir topic as a table (the Spark source's schema:
topic, partition, offset, key, value, headers, created_at, written_at,
producer_id, seq_no), so Spark and any Parquet reader can read offloaded data
straight from the object store, and one more column, ``weir_batch``: the stored
batch exactly as the broker stored it (header, CRCs, codec) on the first row of
each batch, null on the others. The broker serves readers from that column, so an
offloaded offset reads back byte for byte as it was written (batch boundaries,
and so Pulsar message ids, unchanged); analytics readers never read it (Parquet
reads only the columns asked for).

The file's key-value metadata names the blob (``weir.first_offset``,
``weir.count``, ``weir.log_id``), and the whole file's CRC32C is kept in the
tier's metadata record, so a damaged or truncated object is caught before any
of it is parsed, and each batch's own CRCs are checked again after. Every page
also carries its CRC32 (Parquet's page checksum), for readers that get the file
without the record (Spark's own Parquet scan, `weir.spark.read`).

A packed object (`encode_packed`, ``[tier] object_bytes``) holds several consecutive
blobs, one row group each, and names them in ``weir.blobs``; its record per blob
keeps the byte range and CRC32C of the blob's ``weir_batch`` column chunk and of
the file's footer, so the broker reads one blob back with one ranged request (and
the footer once per object), never the whole object.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c as _crc32c
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from weir.errors import CorruptDataError, InternalError
from weir.storage.arrow_rows import ARROW_SCHEMA, stored_to_arrow
from weir.storage.batch import iter_batches

FORMAT_VERSION = "1"
BATCH_COLUMN = "weir_batch"
SEGMENT_SCHEMA = ARROW_SCHEMA.append(pa.field(BATCH_COLUMN, pa.binary()))


def checksum(data: bytes | memoryview) -> int:
    """CRC32C of a whole object, as recorded in the segment's metadata."""
    return int(_crc32c.crc32c(data))


def _blob_table(
    blob: bytes | memoryview,
    topic: str,
    partition: int,
    first: int,
    count: int,
    rows: bytes | None,
) -> pa.Table:
    """The rows of one blob: the Spark columns, and ``weir_batch`` (each stored batch on
    its first row)."""
    counts: list[int] = []
    sizes: list[int] = []
    for _, h in iter_batches(blob, verify=False):
        counts.append(h.record_count)
        sizes.append(h.length)
    table_batch = stored_to_arrow(
        topic, partition, [bytes(blob) if rows is None else rows], first, first + count
    )
    if table_batch is None or table_batch.num_rows != count:
        raise CorruptDataError(
            f"blob holds {0 if table_batch is None else table_batch.num_rows} records, "
            f"index says {count}",
            partition=f"{topic}/{partition}",
            offset=first,
        )
    # weir_batch: the batch's bytes on its first row, empty and null on the others
    lens = np.zeros(count, dtype=np.int64)
    firsts = np.cumsum([0, *counts[:-1]], dtype=np.int64)
    lens[firsts] = sizes
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    valid = np.zeros(count, dtype=bool)
    valid[firsts] = True
    batch_col = pa.Array.from_buffers(
        pa.large_binary(),
        count,
        [
            pa.py_buffer(np.packbits(valid, bitorder="little")),
            pa.py_buffer(offsets),
            pa.py_buffer(blob),
        ],
        null_count=count - len(counts),
    ).cast(pa.binary())
    return pa.Table.from_batches([table_batch]).append_column(
        pa.field(BATCH_COLUMN, pa.binary()), batch_col
    )


# The leaf columns Spark's scan reads (the headers map is two), and the ones that may hold
# compressible bytes: those two get a codec only where it pays (`write_options`).
_SCAN_LEAVES = (
    "topic",
    "partition",
    "offset",
    "key",
    "value",
    "headers.key_value.key",
    "headers.key_value.value",
    "created_at",
    "written_at",
    "producer_id",
    "seq_no",
)
_PAYLOAD_COLUMNS = ("key", "value")
# a payload column is compressed when zstd makes a sample of it at most this fraction of
# its size (random, encrypted or already-compressed payloads: no codec)
COMPRESS_RATIO = 0.8
_SAMPLE_BYTES = 256 << 10
_CODEC = "zstd"

_BASE_OPTIONS: dict[str, Any] = {
    "use_dictionary": ["topic", "producer_id"],
    "write_statistics": ["offset", "written_at", "created_at"],
    "write_page_checksum": True,  # Spark's own scan of the file checks them (tier_files.py)
}


def _compresses(column: Any) -> bool:
    """Whether zstd saves at least a fifth of a sample (up to 256 KiB) of a binary column."""
    sample = bytearray()
    for chunk in column.chunks:
        data = chunk.buffers()[2]
        if data is not None:
            sample += memoryview(data)[: _SAMPLE_BYTES - len(sample)]
        if len(sample) >= _SAMPLE_BYTES:
            break
    if not sample:
        return False
    packed = pa.compress(bytes(sample), codec=_CODEC, asbytes=True)
    return len(packed) <= COMPRESS_RATIO * len(sample)


def write_options(sample: pa.Table) -> dict[str, Any]:
    """Parquet writer options for a segment whose (first) rows are ``sample``.

    A codec costs every reader of the column its decoding: Spark's scan of segment
    objects spent about a third less CPU per 500 B row with the columns it reads stored
    plain (measured, bench/tier_bench.py; zstd decodes at about 1 GB/s here). So the
    columns Spark reads have no codec, except the payloads (key, value) when zstd
    shrinks a sample of them by a fifth or more (text, JSON: bytes worth keeping small);
    ``weir_batch``, read by the broker alone, stays zstd. Any codec reads back: objects
    written with zstd everywhere (before this choice) read as before."""
    compression = {c: "none" for c in _SCAN_LEAVES}
    for c in _PAYLOAD_COLUMNS:
        if _compresses(sample.column(c)):
            compression[c] = _CODEC
    compression[BATCH_COLUMN] = _CODEC
    return {**_BASE_OPTIONS, "compression": compression}


def encode_segment(
    blob: bytes | memoryview,
    topic: str,
    partition: int,
    log_id: int,
    first: int,
    count: int,
    rows: bytes | None = None,
) -> bytes:
    """The Parquet file of one blob (concatenated stored batches, already checked).
    ``rows``: the same batches with large payloads filled in, for the table's columns
    (``weir_batch`` keeps the blob as stored)."""
    table = _blob_table(blob, topic, partition, first, count, rows)
    meta: dict[bytes | str, bytes | str] = {
        "weir.format": FORMAT_VERSION,
        "weir.log_id": str(log_id),
        "weir.first_offset": str(first),
        "weir.count": str(count),
    }
    table = table.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=max(1, count), **write_options(table))
    return bytes(sink.getvalue())


@dataclass(frozen=True, slots=True)
class PackedPlace:
    """Where one blob of a packed object is: its row group and the byte range of its
    ``weir_batch`` column chunk (what the broker reads back, in one ranged request)."""

    row_group: int
    chunk_start: int
    chunk_end: int
    chunk_crc: int


@dataclass(frozen=True, slots=True)
class PackedObject:
    data: bytes
    places: list[PackedPlace]
    footer_start: int  # the footer: Thrift metadata, its length, the magic
    footer_crc: int


@dataclass(frozen=True, slots=True)
class BlobRows:
    """One blob to pack: its stored batches (and, with large payloads, the rows' batches
    with the payloads filled in)."""

    blob: bytes
    first: int
    count: int
    rows: bytes | None = None


def encode_packed(
    blobs: Iterable[BlobRows],
    topic: str,
    partition: int,
    log_id: int,
    spans: Sequence[tuple[int, int]],
) -> PackedObject:
    """One Parquet file of several consecutive blobs, one row group each: fewer, larger
    objects for analytics readers (each file opened costs them milliseconds), while the
    broker still reads back one blob by its column chunk's byte range. ``spans`` are the
    blobs' (first offset, count), ``blobs`` their bytes, taken one at a time (only one
    blob's bytes and rows are in memory beside the file being written)."""
    if not spans or any(a[0] + a[1] != b[0] for a, b in itertools.pairwise(spans)):
        raise InternalError("a packed object holds consecutive blobs only")
    first, end = spans[0][0], spans[-1][0] + spans[-1][1]
    meta: dict[bytes | str, bytes | str] = {
        "weir.format": FORMAT_VERSION,
        "weir.log_id": str(log_id),
        "weir.first_offset": str(first),
        "weir.count": str(end - first),
        "weir.blobs": json.dumps([list(sp) for sp in spans]),
    }
    sink = pa.BufferOutputStream()
    w: pq.ParquetWriter | None = None
    try:
        for b, (bfirst, bcount) in zip(blobs, spans, strict=True):
            if (b.first, b.count) != (bfirst, bcount):
                raise InternalError("a packed object's blobs are not the ones named")
            table = _blob_table(b.blob, topic, partition, b.first, b.count, b.rows)
            if w is None:  # the codecs are chosen on the first blob's rows
                opts = write_options(table)
                w = pq.ParquetWriter(sink, SEGMENT_SCHEMA.with_metadata(meta), **opts)
            w.write_table(table.cast(SEGMENT_SCHEMA), row_group_size=max(1, b.count))
            del table, b
    finally:
        if w is not None:
            w.close()
    data = bytes(sink.getvalue())
    md = pq.ParquetFile(pa.BufferReader(data)).metadata
    if md.num_row_groups != len(spans) or any(
        md.row_group(i).num_rows != count for i, (_, count) in enumerate(spans)
    ):
        raise InternalError("packed object: not one row group per blob (a blob of over 1 Mi rows)")
    # (the physical column: the headers map is two leaf columns)
    rg0 = md.row_group(0)
    col = next(j for j in range(rg0.num_columns) if rg0.column(j).path_in_schema == BATCH_COLUMN)
    places = []
    for i in range(len(spans)):
        c = md.row_group(i).column(col)
        start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
        end_ = start + c.total_compressed_size
        places.append(PackedPlace(i, start, end_, checksum(data[start:end_])))
    footer_start = len(data) - md.serialized_size - 8
    return PackedObject(data, places, footer_start, checksum(data[footer_start:]))


class _Ranges(io.RawIOBase):
    """A file of ``size`` bytes of which only some ranges were fetched: what pyarrow reads
    of a packed object given its footer (it reads one column chunk and nothing else)."""

    def __init__(self, size: int, pieces: Sequence[tuple[int, bytes]]) -> None:
        self._size = size
        self._pieces = pieces
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else self._pos + pos if whence == 1 else self._size + pos
        return self._pos

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), self._size - self._pos))
        for start, data in self._pieces:
            if start <= self._pos and self._pos + n <= start + len(data):
                b[:n] = data[self._pos - start : self._pos - start + n]
                self._pos += n
                return n
        raise OSError(f"read of bytes [{self._pos}, {self._pos + n}) not fetched")


def packed_footer(footer: bytes, label: str, offset: int) -> pq.FileMetaData:
    """The parsed footer of a packed object (its bytes already checked by CRC)."""
    try:
        return pq.read_metadata(pa.BufferReader(footer))
    except Exception as exc:
        raise CorruptDataError(
            f"packed segment's footer does not parse: {exc}", partition=label, offset=offset
        ) from None


def decode_packed_chunk(
    md: pq.FileMetaData,
    size: int,
    chunk: bytes,
    row_group: int,
    chunk_start: int,
    first: int,
    count: int,
    label: str,
) -> bytes:
    """The stored batches of one blob of a packed object, from its ``weir_batch`` column
    chunk alone (bytes ``[chunk_start, ...)``) and the object's footer."""
    try:
        blobs = json.loads((md.metadata or {}).get(b"weir.blobs", b"[]"))
        if row_group >= len(blobs) or blobs[row_group] != [first, count]:
            raise CorruptDataError(
                "packed segment names other offsets than its metadata record",
                partition=label,
                offset=first,
            )
        f = pq.ParquetFile(
            pa.PythonFile(_Ranges(size, [(chunk_start, chunk)]), mode="r"), metadata=md
        )
        col: Any = f.read_row_group(row_group, columns=[BATCH_COLUMN]).column(BATCH_COLUMN)
    except CorruptDataError:
        raise
    except Exception as exc:
        raise CorruptDataError(
            f"packed segment does not parse: {exc}", partition=label, offset=first
        ) from None
    return b"".join(v for v in col.to_pylist() if v is not None)


def decode_segment(data: bytes | memoryview, first: int, count: int, label: str) -> bytes:
    """The stored batches of an offloaded segment (the ``weir_batch`` column), checked to be
    the blob ``[first, first + count)``; damage is a CorruptDataError."""
    try:
        f = pq.ParquetFile(pa.BufferReader(data))
        md = f.schema_arrow.metadata or {}
        if (
            md.get(b"weir.first_offset") != str(first).encode()
            or md.get(b"weir.count") != str(count).encode()
        ):
            raise CorruptDataError(
                "offloaded segment names other offsets than its metadata record",
                partition=label,
                offset=first,
            )
        col: Any = f.read(columns=[BATCH_COLUMN]).column(BATCH_COLUMN)
    except CorruptDataError:
        raise
    except Exception as exc:  # pyarrow raises its own errors for damaged files
        raise CorruptDataError(
            f"offloaded segment does not parse: {exc}", partition=label, offset=first
        ) from None
    return b"".join(v for v in col.to_pylist() if v is not None)


def read_rows(data: bytes | memoryview, lo: int, hi: int) -> pa.Table:
    """The table rows (Spark's columns) with offsets in ``[lo, hi)`` of a segment file
    (offsets are dense from the file's first offset, so this is a slice, not a filter)."""
    f = pq.ParquetFile(pa.BufferReader(data))
    md = f.schema_arrow.metadata or {}
    first = int(md.get(b"weir.first_offset", b"0"))
    table = f.read(columns=ARROW_SCHEMA.names)
    start = max(0, lo - first)
    return table.slice(start, max(0, min(hi - first, table.num_rows) - start))

"""An offloaded segment: one sealed blob as a Parquet file.

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
"""

from __future__ import annotations

from typing import Any

import crc32c as _crc32c
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from weir.errors import CorruptDataError
from weir.storage.arrow_rows import ARROW_SCHEMA, stored_to_arrow
from weir.storage.batch import iter_batches

FORMAT_VERSION = "1"
BATCH_COLUMN = "weir_batch"
SEGMENT_SCHEMA = ARROW_SCHEMA.append(pa.field(BATCH_COLUMN, pa.binary()))


def checksum(data: bytes | memoryview) -> int:
    """CRC32C of a whole object, as recorded in the segment's metadata."""
    return int(_crc32c.crc32c(data))


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
    table = pa.Table.from_batches([table_batch]).append_column(
        pa.field(BATCH_COLUMN, pa.binary()), batch_col
    )
    meta: dict[bytes | str, bytes | str] = {
        "weir.format": FORMAT_VERSION,
        "weir.log_id": str(log_id),
        "weir.first_offset": str(first),
        "weir.count": str(count),
    }
    table = table.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        row_group_size=max(1, count),
        use_dictionary=["topic", "producer_id"],
        write_statistics=["offset", "written_at", "created_at"],
        write_page_checksum=True,  # Spark's own scan of the file checks them (tier_files.py)
    )
    return bytes(sink.getvalue())


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

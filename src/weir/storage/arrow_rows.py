"""Stored weir batches to Arrow record batches, column by column, with the columns a
weir topic has as a table (the Spark source's schema; the tier's Parquet files too).

Spark takes a Python source's rows fastest as Arrow record batches, and a
weir batch is already columnar: the lengths of every record's data and key
are arrays, the data and keys are contiguous blobs. So each column is built
with numpy over those arrays and one copy of each blob; Python runs once per
stored batch (thousands of records), never once per record. Only headers,
which are rare, are decoded per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from weir.errors import BatchFormatError
from weir.storage.batch import Payload, decode_headers, decode_payload, iter_batches
from weir.storage.codecs import Codec, decompress_message

HEADERS_TYPE = pa.map_(pa.string(), pa.string())
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
        pa.field("created_at", TIMESTAMP_TYPE),
        pa.field("written_at", TIMESTAMP_TYPE),
        pa.field("producer_id", pa.string()),
        pa.field("seq_no", pa.int64()),
    ]
)

_MAX_BINARY_BYTES = (1 << 31) - 1  # Arrow `binary` uses int32 offsets


def _np(values: Any, dtype: Any) -> np.ndarray[Any, Any]:
    """A numpy view of an `array.array` (no copy)."""
    return np.frombuffer(values, dtype=dtype)


def _seq_dtype(values: Any) -> Any:
    return np.uint64 if values.itemsize == 8 else np.uint32


@dataclass
class _Columns:
    """Column pieces gathered from consecutive stored batches of one partition."""

    offsets: list[np.ndarray[Any, Any]] = field(default_factory=list)
    seqs: list[np.ndarray[Any, Any]] = field(default_factory=list)
    created: list[np.ndarray[Any, Any]] = field(default_factory=list)
    written: list[np.ndarray[Any, Any]] = field(default_factory=list)
    key_lens: list[np.ndarray[Any, Any]] = field(default_factory=list)
    key_parts: list[bytes | memoryview] = field(default_factory=list)
    data_lens: list[np.ndarray[Any, Any]] = field(default_factory=list)
    data_parts: list[bytes | memoryview] = field(default_factory=list)
    header_counts: list[np.ndarray[Any, Any]] = field(default_factory=list)
    header_keys: list[str] = field(default_factory=list)
    header_values: list[str] = field(default_factory=list)
    pid_index: list[np.ndarray[Any, Any]] = field(default_factory=list)
    pids: list[str] = field(default_factory=list)
    rows: int = 0
    any_keys: bool = False
    any_headers: bool = False

    def add(self, p: Payload, skip: int, stop: int) -> None:
        """Append records ``[skip, stop)`` of one decoded stored batch."""
        h = p.header
        n = stop - skip
        base = h.base_offset
        self.offsets.append(np.arange(base + skip, base + stop, dtype=np.int64))
        if p.seq_deltas is None:
            seq = np.arange(skip, stop, dtype=np.uint64)
        else:
            seq = _np(p.seq_deltas, _seq_dtype(p.seq_deltas))[skip:stop].astype(np.uint64)
        seq += np.uint64(h.first_seq)
        self.seqs.append(seq.view(np.int64))
        if p.created_deltas is None:
            created = np.full(n, h.created_base, dtype=np.int64)
        else:
            dt = np.int64 if p.created_deltas.itemsize == 8 else np.int32
            created = _np(p.created_deltas, dt)[skip:stop].astype(np.int64)
            created += h.created_base
        self.created.append(created)
        self.written.append(np.full(n, h.written_at, dtype=np.int64))
        raw = memoryview(p.raw)

        if p.key_lens is None:
            self.key_lens.append(np.zeros(n, dtype=np.uint32))
        else:
            self.any_keys = True
            klens = _np(p.key_lens, np.uint32)
            a = p.keys_start + int(klens[:skip].sum())
            b = a + int(klens[skip:stop].sum())
            self.key_lens.append(klens[skip:stop])
            self.key_parts.append(raw[a:b])

        dlens = _np(p.data_lens, np.uint32)
        a = p.data_start + int(dlens[:skip].sum())
        b = a + int(dlens[skip:stop].sum())
        if h.data_codec == Codec.RAW:
            self.data_lens.append(dlens[skip:stop])
            self.data_parts.append(raw[a:b])
        else:  # written through the YDB front with a per-message codec
            ends = np.cumsum(dlens[skip:stop], dtype=np.int64) + a
            starts = ends - dlens[skip:stop]
            values = [
                decompress_message(h.data_codec, bytes(raw[s:e]))
                for s, e in zip(starts.tolist(), ends.tolist(), strict=True)
            ]
            self.data_lens.append(np.fromiter(map(len, values), dtype=np.uint32, count=n))
            self.data_parts.append(b"".join(values))

        if p.header_lens is None:
            self.header_counts.append(np.zeros(n, dtype=np.int32))
        else:
            self.any_headers = True
            hlens = _np(p.header_lens, np.uint32)
            ends = np.cumsum(hlens, dtype=np.int64) + p.headers_start
            starts = ends - hlens
            counts = np.empty(n, dtype=np.int32)
            for i, (s, e) in enumerate(
                zip(starts[skip:stop].tolist(), ends[skip:stop].tolist(), strict=True)
            ):
                d = decode_headers(raw[s:e]) if e > s else {}
                counts[i] = len(d)
                self.header_keys.extend(d.keys())
                self.header_values.extend(d.values())
            self.header_counts.append(counts)

        if not self.pids or self.pids[-1] != h.producer_id:
            self.pids.append(h.producer_id)
        self.pid_index.append(np.full(n, len(self.pids) - 1, dtype=np.int32))
        self.rows += n

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        n = self.rows
        return pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(topic, pa.string()), n),
                pa.repeat(pa.scalar(partition, pa.int32()), n),
                _int64(np.concatenate(self.offsets)),
                self._keys(),
                _binary(np.concatenate(self.data_lens), self.data_parts, None),
                self._headers(),
                _timestamps(np.concatenate(self.created)),
                _timestamps(np.concatenate(self.written)),
                self._producer_ids(),
                _int64(np.concatenate(self.seqs)),
            ],
            schema=ARROW_SCHEMA,
        )

    def _keys(self) -> pa.Array:
        if not self.any_keys:
            return pa.nulls(self.rows, pa.binary())
        lens = np.concatenate(self.key_lens)
        present = lens > 0  # weir has no null key; an empty key reads as null, like Kafka's
        return _binary(lens, self.key_parts, present)

    def _headers(self) -> pa.Array:
        offsets = np.zeros(self.rows + 1, dtype=np.int32)
        if self.any_headers:
            np.cumsum(np.concatenate(self.header_counts), out=offsets[1:])
        return pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()),
            pa.array(self.header_keys, pa.string()),
            pa.array(self.header_values, pa.string()),
            type=HEADERS_TYPE,
        )

    def _producer_ids(self) -> pa.Array:
        if len(self.pids) == 1:
            return pa.repeat(pa.scalar(self.pids[0], pa.string()), self.rows)
        index = pa.array(np.concatenate(self.pid_index), pa.int32())
        return pa.array(self.pids, pa.string()).take(index)


def _int64(values: np.ndarray[Any, Any]) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _timestamps(ms: np.ndarray[Any, Any]) -> pa.Array:
    us = ms * 1000
    return pa.Array.from_buffers(TIMESTAMP_TYPE, len(us), [None, pa.py_buffer(us)])


def _binary(
    lens: np.ndarray[Any, Any],
    parts: Sequence[bytes | memoryview],
    present: np.ndarray[Any, Any] | None,
) -> pa.Array:
    """A `binary` array over one joined blob; ``present`` marks the non-null slots."""
    n = len(lens)
    ends = np.cumsum(lens, dtype=np.int64)
    total = int(ends[-1]) if n else 0
    if total > _MAX_BINARY_BYTES:
        raise BatchFormatError(
            f"{total} bytes do not fit one Arrow binary column; lower maxBytesPerFetch"
        )
    offsets = np.zeros(n + 1, dtype=np.int32)
    offsets[1:] = ends
    validity = None
    nulls = 0
    if present is not None:
        nulls = n - int(np.count_nonzero(present))
        if nulls:
            validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    blob = b"".join(parts)
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(blob)], null_count=nulls
    )


def stored_to_arrow(
    topic: str, partition: int, chunks: Sequence[bytes], lo: int, hi: int
) -> pa.RecordBatch | None:
    """The records with offsets in ``[lo, hi)`` from concatenated stored batches (CRCs checked).

    Returns None when no record falls in the range.
    """
    cols = _Columns()
    for chunk in chunks:
        for pos, h in iter_batches(chunk):
            if h.next_offset <= lo or h.base_offset >= hi:
                continue
            skip = max(0, lo - h.base_offset)
            stop = min(h.record_count, hi - h.base_offset)
            cols.add(decode_payload(chunk, pos, h), skip, stop)
    if cols.rows == 0:
        return None
    return cols.to_batch(topic, partition)

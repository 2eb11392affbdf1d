"""Stored batches to Arrow: every column equals what the storage decoder reads, in every layout."""

from __future__ import annotations

import gzip

import pyarrow as pa
import pytest

from weir.spark.arrow import stored_to_arrow
from weir.spark.schema import ARROW_SCHEMA
from weir.storage.batch import decode_records, parse_header, stamp_header
from weir.storage.batch_encoding import encode_batch
from weir.storage.codecs import Codec


def _stored(raw: bytes, base_offset: int, written_at: int) -> bytes:
    """A client batch as the broker stores it: offset and write time stamped."""
    h = parse_header(raw)
    return stamp_header(raw, h, base_offset, written_at) + raw[h.payload_start :]


def _chunk() -> tuple[bytes, list[tuple[int, int]]]:
    """Four consecutive stored batches with different optional columns and codecs."""
    batches = [
        encode_batch([b"a", b"bb", b"ccc"], producer_id="p1", first_seq_no=7, created_at=1000),
        encode_batch(
            [b"d", b"", b"f"],
            producer_id="p2",
            seq_nos=[3, 10, 1 << 40],
            created_at=[5, 2000, 3_000_000_000_000],
            keys=[b"k1", b"", b"k3"],
            headers=[{"x": "1", "y": "2"}, None, {"z": ""}],
            codec=Codec.ZSTD,
        ),
        encode_batch([b"g" * 300], producer_id="p2", first_seq_no=(1 << 40) + 1, codec=Codec.LZ4),
        encode_batch(  # written through the YDB front: each message compressed on its own
            [gzip.compress(b"hello"), gzip.compress(b"world")],
            producer_id="",
            first_seq_no=1,
            created_at=9,
            data_codec=Codec.GZIP,
        ),
    ]
    out, base, spans = b"", 100, []
    for i, raw in enumerate(batches):
        stored = _stored(raw, base, 50_000 + i)
        out += stored
        n = parse_header(stored).record_count
        spans.append((base, n))
        base += n
    return out, spans


@pytest.mark.parametrize(("lo", "hi"), [(100, 109), (101, 108), (103, 104), (105, 200), (0, 102)])
def test_every_column_matches_the_storage_decoder(lo: int, hi: int) -> None:
    chunk, spans = _chunk()
    expected = []
    pos = 0
    for _ in spans:
        h = parse_header(chunk, pos)
        for r in decode_records(chunk, pos):
            if lo <= r.offset < hi:
                data = gzip.decompress(r.data) if h.data_codec == Codec.GZIP else r.data
                expected.append(
                    {
                        "topic": "t",
                        "partition": 3,
                        "offset": r.offset,
                        "key": r.key or None,
                        "value": data,
                        "headers": list(r.headers.items()),
                        "created_us": r.created_at * 1000,
                        "written_us": h.written_at * 1000,
                        "producer_id": h.producer_id,
                        "seq_no": r.seq_no,
                    }
                )
        pos += h.length
    batch = stored_to_arrow("t", 3, [chunk], lo, hi)
    if not expected:
        assert batch is None
        return
    assert batch is not None and batch.schema.equals(ARROW_SCHEMA)
    t = pa.Table.from_batches([batch])
    got = t.to_pylist()
    created = t.column("created_at").cast(pa.int64()).to_pylist()
    written = t.column("written_at").cast(pa.int64()).to_pylist()
    for row, c, w in zip(got, created, written, strict=True):
        row["created_us"], row["written_us"] = c, w
        del row["created_at"], row["written_at"]
    assert got == expected


def test_nothing_in_range_gives_no_batch() -> None:
    chunk, _ = _chunk()
    assert stored_to_arrow("t", 0, [chunk], 500, 600) is None

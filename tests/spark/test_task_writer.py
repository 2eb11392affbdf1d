"""The sink's task writer without Spark: many Arrow batches of one task, gathered per
target partition before they go to the SDK as Arrow columns (issue 26), land every row
once, in its key's or column's partition, in row order, with its seq_no, key, headers
and created_at; a second attempt of the task writes nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from weir.hashing import KeyHash
from weir.spark.writer import Layout, TaskWriter

PARTS = 3
ROWS = 6_000
BATCH = 700  # batches that do not divide the rows: the last one is short


def _rows() -> dict[str, list[Any]]:
    t0 = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    return {
        "value": [b"v%05d" % i for i in range(ROWS)],
        "key": [None if i % 11 == 0 else "" if i % 13 == 0 else f"k{i % 37}" for i in range(ROWS)],
        "partition": [i % PARTS if i % 5 == 0 else None for i in range(ROWS)],
        "headers": [[("h", str(i))] if i % 3 == 0 else None for i in range(ROWS)],
        "created_at": [
            None if i % 7 == 0 else t0 + dt.timedelta(milliseconds=i) for i in range(ROWS)
        ],
    }


SCHEMA = StructType(
    [
        StructField("value", BinaryType()),
        StructField("key", StringType()),
        StructField("partition", IntegerType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("created_at", TimestampType()),
    ]
)
ARROW = pa.schema(
    [
        ("value", pa.binary()),
        ("key", pa.string()),
        ("partition", pa.int32()),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("created_at", pa.timestamp("us", tz="UTC")),
    ]
)


@pytest.mark.parametrize("gather", [1 << 20, 1500, 0])  # at the end; every few batches; each
def test_many_batches_of_one_task_land_once_in_their_partitions(
    weir_server: Any, client: Any, gather: int
) -> None:
    topic = f"task-writer-gather-{gather}"
    client.create_topic(topic, partitions=PARTS)
    cols = _rows()
    table = pa.table(cols, schema=ARROW)
    for _attempt in range(2):  # the retry of the task: every row a duplicate
        tw = TaskWriter(
            client, topic, PARTS, Layout.of(SCHEMA), "spark-gather-0", 0, gather_bytes=gather
        )
        for b in table.to_batches(max_chunksize=BATCH):
            tw.add(b)
        tw.finish()
        assert tw.rows == ROWS
    got: dict[int, list[Any]] = {}
    for p in range(PARTS):
        got[p] = [m for c in client.read_range(topic, p, 0) for m in c.messages()]
    assert sum(map(len, got.values())) == ROWS  # each row once
    seen = {}
    for p, msgs in got.items():
        by_producer: dict[str, list[int]] = {}
        for m in msgs:
            i = int(m.data[1:])
            seen[i] = (p, m)
            by_producer.setdefault(m.producer_id, []).append(m.seq_no)
        for seqs in by_producer.values():
            assert seqs == sorted(seqs)  # row order within each producer
    for i in range(ROWS):
        p, m = seen[i]
        key = cols["key"][i]
        want_p = cols["partition"][i]
        if want_p is None and key:
            want_p = KeyHash.MURMUR3.partition(key.encode(), PARTS)
        if want_p is not None:
            assert p == want_p, i
        assert m.seq_no == i  # batch 0: seq_no = the row's position in the task
        assert (m.key or None) == (key.encode() if key else None)
        assert m.headers == dict(cols["headers"][i] or [])
        c = cols["created_at"][i]
        if c is not None:
            assert m.created_at_ms == int(c.timestamp() * 1000)

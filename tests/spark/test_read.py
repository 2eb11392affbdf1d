"""`spark.read.format("weir")`: what Spark reads is what was written, in the ranges asked for."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

import weir
from tests.conftest import ServerProcess
from tests.spark.topics import Rec, produce, read_topic
from weir.spark import ARROW_SCHEMA, SCHEMA

PARTITIONS = 4
T0 = 1_700_000_000_000  # ms


def _records(p: int, n: int) -> list[Rec]:
    return [
        Rec(
            value=f"order-{p}-{i}".encode() * (1 + i % 3),
            key=f"customer-{i % 5}".encode() if i % 4 else None,
            headers={"source": "test", "i": str(i)} if i % 3 == 0 else {},
            created_at_ms=T0 + i,
        )
        for i in range(n)
    ]


@pytest.fixture
def orders(client: weir.Client, topic_name: str) -> str:
    """A 4-partition topic with 40..70 records per partition, keys, headers and times."""
    client.create_topic(topic_name, partitions=PARTITIONS)
    produce(client, topic_name, {p: _records(p, 40 + 10 * p) for p in range(PARTITIONS)})
    return topic_name


def _load(spark: Any, server: ServerProcess, topic: str, **options: str) -> Any:
    r = spark.read.format("weir").option("endpoint", server.endpoint).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _keyset(df: Any) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


def test_arrow_schema_is_what_spark_expects() -> None:
    assert to_arrow_schema(SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_batch_read_of_a_4_partition_topic_matches_what_was_written(
    spark: Any, weir_server: ServerProcess, client: weir.Client, orders: str
) -> None:
    df = _load(spark, weir_server, orders)
    assert df.schema == SCHEMA
    rows = df.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "headers",
        F.unix_millis("created_at").alias("created_ms"),
        F.unix_millis("written_at").alias("written_ms"),
        "producer_id",
        "seq_no",
    ).collect()
    got = {(r.partition, r.offset): tuple(r) for r in rows}
    expected = {
        (m.partition, m.offset): (
            orders,
            m.partition,
            m.offset,
            m.key or None,
            m.data,
            dict(m.headers),
            m.created_at_ms,
            m.written_at_ms,
            m.producer_id,
            m.seq_no,
        )
        for msgs in read_topic(client, orders).values()
        for m in msgs
    }
    assert len(rows) == len(got) == sum(40 + 10 * p for p in range(PARTITIONS))
    assert got == expected  # timestamps included, as UTC instants
    for p in range(PARTITIONS):  # and that is what the test wrote, in order
        written = _records(p, 40 + 10 * p)
        assert [got[(p, o)][4] for o in range(len(written))] == [r.value for r in written]
        assert [got[(p, o)][6] for o in range(len(written))] == [r.created_at_ms for r in written]


def test_starting_and_ending_offsets_as_json(
    spark: Any, weir_server: ServerProcess, orders: str
) -> None:
    start = json.dumps({orders: {"0": 5, "1": -2, "2": -1}})
    end = json.dumps({orders: {"0": 8, "3": 2}})
    df = _load(spark, weir_server, orders, startingOffsets=start, endingOffsets=end)
    want = (
        [(0, o) for o in range(5, 8)]
        + [(1, o) for o in range(0, 50)]
        + [(3, o) for o in range(0, 2)]
    )
    assert _keyset(df) == want


def test_starting_timestamp_reads_what_was_written_since(
    spark: Any, weir_server: ServerProcess, client: weir.Client, orders: str
) -> None:
    cut = max(p.last_write_ms for p in client.describe_topic(orders).partition_info) + 1
    produce(client, orders, {2: [Rec(b"late-1"), Rec(b"late-2")]})
    df = _load(spark, weir_server, orders, startingTimestamp=str(cut))
    assert sorted(r.value for r in df.collect()) == [b"late-1", b"late-2"]


def test_several_topics_in_one_read(
    spark: Any, weir_server: ServerProcess, client: weir.Client, orders: str, topic_name: str
) -> None:
    other = topic_name + "_other"
    client.create_topic(other, partitions=1)
    produce(client, other, {0: [Rec(b"x"), Rec(b"y")]})
    df = _load(spark, weir_server, f"{orders},{other}")
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {orders: 40 + 50 + 60 + 70, other: 2}


def test_min_partitions_splits_ranges_into_more_tasks(
    spark: Any, weir_server: ServerProcess, orders: str
) -> None:
    df = _load(spark, weir_server, orders, minPartitions="10")
    assert df.rdd.getNumPartitions() >= 10
    assert _keyset(df) == _keyset(_load(spark, weir_server, orders))


def test_filter_pushdown_reads_only_the_ranges_asked_for(
    spark: Any, weir_server: ServerProcess, client: weir.Client, orders: str
) -> None:
    def q(where: Any) -> Any:
        return _load(spark, weir_server, orders, pushFilters="true").where(where)

    one = q("partition = 2 and offset >= 10 and offset < 14")
    assert one.rdd.getNumPartitions() == 1  # one task over offsets 10..13 of partition 2
    assert _keyset(one) == [(2, o) for o in range(10, 14)]

    some = q("partition in (1, 3) and offset <= 1")
    assert some.rdd.getNumPartitions() == 2
    assert _keyset(some) == [(1, 0), (1, 1), (3, 0), (3, 1)]

    not_two = q("partition <> 2 and offset = 0")
    assert _keyset(not_two) == [(0, 0), (1, 0), (3, 0)]

    # written_at narrows through the broker's time index; Spark checks it again
    cut = dt.datetime.fromtimestamp(
        (max(p.last_write_ms for p in client.describe_topic(orders).partition_info) + 1) / 1000,
        dt.UTC,
    )
    produce(client, orders, {0: [Rec(b"new")]})
    later = q(F.col("written_at") >= F.lit(cut))
    assert later.rdd.getNumPartitions() == 1
    assert [r.value for r in later.collect()] == [b"new"]

    # the same filters without pushdown give the same answers, reading everything
    plain = _load(spark, weir_server, orders).where(
        "partition = 2 and offset >= 10 and offset < 14"
    )
    assert plain.rdd.getNumPartitions() == PARTITIONS
    assert _keyset(plain) == [(2, o) for o in range(10, 14)]


def test_empty_ranges_read_as_an_empty_dataframe(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=2)
    assert _load(spark, weir_server, topic_name).count() == 0


def test_arrow_batches_come_straight_from_the_reader(
    weir_server: ServerProcess, client: weir.Client, orders: str
) -> None:
    from weir.spark.scan import ScanSettings, TopicRange, read_range

    settings = ScanSettings(weir_server.endpoint, True, 4 << 20)
    batches = list(read_range(settings, TopicRange(orders, 3, 5, 65)))
    assert all(isinstance(b, pa.RecordBatch) and b.schema.equals(ARROW_SCHEMA) for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == list(range(5, 65))


def test_a_range_retention_removed_fails_the_read_unless_told_to_skip(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=1, retention_bytes=2000)
    produce(client, topic_name, {0: [Rec(b"old-%d" % i) for i in range(20)]})
    produce(client, topic_name, {0: [Rec(b"n" * 90) for _ in range(30)]})
    deadline = time.monotonic() + 30
    while (start := client.describe_topic(topic_name).partition_info[0].start_offset) < 20:
        assert time.monotonic() < deadline, "retention did not run"
        time.sleep(0.05)
    from_zero = json.dumps({topic_name: {"0": 0}})  # the query asks for what is gone
    with pytest.raises(PySparkException, match=f"offsets 0..{start - 1} of topic"):
        _load(spark, weir_server, topic_name, startingOffsets=from_zero).count()
    df = _load(spark, weir_server, topic_name, startingOffsets=from_zero, failOnDataLoss="false")
    assert [r.offset for r in df.select("offset").collect()] == list(range(start, 50))


def test_assemble_chunks_gives_one_row_per_chunked_message(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    """assembleChunks: a message the writer chunked is one row, whole, at its last chunk's
    offset, in the task range holding that chunk (ranges split anywhere give it once);
    without the option the chunks are rows of their own."""
    from weir.spark.scan import ScanSettings, TopicRange, read_range

    payload = bytes(range(256)) * 20  # 5120 bytes: 6 chunks of up to 997
    client.create_topic(topic_name, partitions=1)
    with client.writer(topic_name, chunking=True, max_message_bytes=1000) as w:
        w.write_many([b"before", payload, b"after"], keys=[None, "blob", None])
    end = client.describe_topic(topic_name).partition_info[0].end_offset
    df = _load(spark, weir_server, topic_name, assembleChunks="true")
    rows = [(r.offset, r.value, dict(r.headers or {})) for r in df.orderBy("offset").collect()]
    assert rows == [(0, b"before", {}), (end - 2, payload, {}), (end - 1, b"after", {})]
    assert _load(spark, weir_server, topic_name).count() == end
    settings = ScanSettings(weir_server.endpoint, True, 1500, assemble_chunks=True)
    for split in range(end + 1):
        values = [
            v
            for lo, hi in ((0, split), (split, end))
            for b in read_range(settings, TopicRange(topic_name, 0, lo, hi))
            for v in b.column("value").to_pylist()
        ]
        assert values == [b"before", payload, b"after"], f"split at {split}"


def test_read_compacted_gives_the_latest_of_each_key_then_the_tail(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    """readCompacted: below each partition's compacted view the latest row of each key at
    its own offset (the offsets it skipped are no data loss), then every later row."""
    client.create_topic(topic_name, partitions=2)
    produce(
        client,
        topic_name,
        {
            p: [Rec(b"v%d-%d" % (r, k), key=b"k%d" % k) for r in range(3) for k in range(5)]
            for p in range(2)
        },
    )
    produce(client, topic_name, {0: [Rec(b"", key=b"k0")]})  # a tombstone of k0
    assert client.compact(topic_name, wait=True).keys == 9
    produce(client, topic_name, {1: [Rec(b"tail", key=b"k1")]})
    df = _load(spark, weir_server, topic_name, readCompacted="true")
    rows = sorted(
        (r.partition, r.offset, r.key, r.value)
        for r in df.select("partition", "offset", "key", "value").collect()
    )
    latest = [(p, 10 + k, b"k%d" % k, b"v2-%d" % k) for p in range(2) for k in range(5)]
    expected = sorted(
        [row for row in latest if row[:3] != (0, 10, b"k0")]
        + [(0, 15, b"k0", b""), (1, 15, b"k1", b"tail")]
    )
    assert rows == expected
    assert _load(spark, weir_server, topic_name).count() == 32  # the whole log without it


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "{oops"}, "startingOffsets"),
        ({"startingOffsets": '{"nosuch": {"0": 1}}'}, "is not one of the topics"),
        ({"endingOffsets": "earliest"}, "earliest is not a valid end"),
        ({"minPartitions": "zero"}, "minPartitions"),
        ({"maxOffsetsPerTrigger": "5"}, "streaming"),
    ],
)
def test_bad_options_fail_with_a_message_naming_them(
    spark: Any, weir_server: ServerProcess, orders: str, options: dict[str, str], message: str
) -> None:
    with pytest.raises(PySparkException, match=message):
        _load(spark, weir_server, orders, **options).count()

"""`df.write.format("weir")`: rows land where they say, with what they carry, once per write id."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

import weir
from tests.conftest import ROOT, ServerProcess
from tests.spark.topics import read_topic
from weir.hashing import pulsar_partition


def _write(df: Any, server: ServerProcess, topic: str, **options: str) -> None:
    w = df.write.format("weir").mode("append").option("endpoint", server.endpoint)
    w = w.option("topic", topic)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def test_rows_go_to_the_partition_of_their_key_or_column_with_headers_and_times(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=4)
    created = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.UTC)
    rows = (
        [(f"k{i}", f"keyed-{i}", None, {"n": str(i)}) for i in range(20)]
        + [(None, f"placed-{i}", i % 4, None) for i in range(8)]
        + [(f"k{i}", f"keyed-placed-{i}", 3, None) for i in range(4)]
    )
    df = spark.createDataFrame(
        rows, "key string, value string, partition int, headers map<string,string>"
    ).withColumn("created_at", F.lit(created))
    _write(df.repartition(2), weir_server, topic_name)

    stored = read_topic(client, topic_name)
    where = {m.data.decode(): (p, m) for p, msgs in stored.items() for m in msgs}
    assert len(where) == len(rows) == sum(len(v) for v in stored.values())
    # a key lands where weir's SDK writer puts it (murmur3, as Pulsar's client)
    with client.writer(topic_name, producer_id="sdk-probe") as w:
        sdk = {i: w.write_with_result(b"probe", key=f"k{i}").partition for i in range(20)}
    for i in range(20):
        p, m = where[f"keyed-{i}"]
        assert p == sdk[i] == pulsar_partition(f"k{i}".encode(), 4)  # same key, same partition
        assert m.key == f"k{i}".encode() and dict(m.headers) == {"n": str(i)}
        assert m.created_at_ms == int(created.timestamp() * 1000)
    for i in range(8):
        assert where[f"placed-{i}"][0] == i % 4
    for i in range(4):  # an explicit partition wins over the key
        assert where[f"keyed-placed-{i}"][0] == 3


def test_writing_the_same_rows_again_with_the_same_write_id_adds_nothing(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=2)
    df = spark.range(0, 500, numPartitions=3).select(F.col("id").cast("string").alias("value"))
    _write(df, weir_server, topic_name, writeId="nightly-2024-05-06")
    _write(df, weir_server, topic_name, writeId="nightly-2024-05-06")  # a rerun of the job
    assert client.describe_topic(topic_name).messages == 500
    values = sorted(int(m.data) for msgs in read_topic(client, topic_name).values() for m in msgs)
    assert values == list(range(500))
    # without a write id every job is a new producer: a rerun writes the rows again
    _write(df, weir_server, topic_name)
    assert client.describe_topic(topic_name).messages == 1000


def _kill_first_attempt(marker: str, endpoint: str, sink: str) -> Any:
    """A mapInArrow step that, in the first attempt of Spark partition 0, hands 80 rows on,
    waits until the sink has stored some of them, then kills its own Python worker (SIGKILL):
    the task fails mid-write and Spark runs it again."""

    def hook(batches: Any) -> Any:
        import os
        import signal
        import time

        from pyspark import TaskContext

        import weir

        tc = TaskContext.get()
        first = tc is not None and tc.partitionId() == 0 and tc.attemptNumber() == 0
        handed_on = 0
        for b in batches:
            yield b
            handed_on += b.num_rows
            # enough 40 KB batches to pass the 64 KB buffers between Spark's processes
            if first and handed_on >= 80:
                with weir.Client(endpoint) as c:
                    deadline = time.monotonic() + 60
                    while (stored := c.describe_topic(sink).messages) == 0:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.02)
                with open(marker, "w") as f:
                    f.write(str(stored))
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def test_a_task_killed_mid_write_is_retried_and_writes_every_row_once(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str, tmp_path: Any
) -> None:
    client.create_topic(topic_name, partitions=2)
    marker = tmp_path / "killed"
    df = spark.range(0, 200, numPartitions=1).select(  # one task: what the sink has is its
        F.concat(F.col("id").cast("string"), F.lit(":" + "x" * 4000)).alias("value")
    )
    hook = _kill_first_attempt(str(marker), weir_server.endpoint, topic_name)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        _write(df.mapInArrow(hook, df.schema), weir_server, topic_name, writeId="retried")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    stored_before_kill = int(marker.read_text())
    assert 0 < stored_before_kill < 200, "the kill did not land mid-task"
    values = [
        int(m.data.split(b":")[0]) for msgs in read_topic(client, topic_name).values() for m in msgs
    ]
    assert sorted(values) == list(range(200))  # the retry wrote the rest, nothing twice


def test_streaming_read_of_what_a_batch_write_produced(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str, tmp_path: Any
) -> None:
    client.create_topic(topic_name, partitions=2)
    df = spark.range(0, 100, numPartitions=2).select(
        (F.col("id") % 7).cast("string").alias("key"), F.col("id").cast("string").alias("value")
    )
    _write(df, weir_server, topic_name)
    out = tmp_path / "parquet"
    q = (
        spark.readStream.format("weir")
        .option("endpoint", weir_server.endpoint)
        .option("topic", topic_name)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.col("key").cast("string"), F.col("value").cast("string"))
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(180)
    got = spark.read.parquet(str(out))
    assert sorted(int(r.value) for r in got.collect()) == list(range(100))


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ("key string", "needs a 'value' column"),
        ("value int", "'value' must be binary or string"),
        ("value string, partition string", "'partition' must be an integer"),
        ("value string, headers map<string,int>", "'headers' must be map<string,string>"),
    ],
)
def test_a_bad_dataframe_is_refused_before_any_row_is_written(
    spark: Any,
    weir_server: ServerProcess,
    client: weir.Client,
    topic_name: str,
    columns: str,
    message: str,
) -> None:
    client.create_topic(topic_name, partitions=1)
    df = spark.createDataFrame([], columns)
    with pytest.raises(PySparkException, match=message):
        _write(df, weir_server, topic_name)


@pytest.mark.parametrize("bad", [2, -1])
def test_a_row_naming_a_partition_the_topic_lacks_fails_the_task_writing_nothing(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str, bad: int
) -> None:
    client.create_topic(topic_name, partitions=2)
    rows = [("k", "a", None), ("k", "b", 1), (None, "c", bad), ("k", "d", 0)]
    df = spark.createDataFrame(rows, "key string, value string, partition int").coalesce(1)
    with pytest.raises(PySparkException, match=f"row 2: partition {bad} is not one of 0..1"):
        _write(df, weir_server, topic_name)
    assert not any(read_topic(client, topic_name).values())  # the batch failed whole


def test_overwrite_and_unknown_topics_are_refused(
    spark: Any, weir_server: ServerProcess, topic_name: str
) -> None:
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(PySparkException, match="does not exist"):
        _write(df, weir_server, topic_name + "_missing")
    with pytest.raises(PySparkException, match="appended"):
        df.write.format("weir").mode("overwrite").option("endpoint", weir_server.endpoint).option(
            "topic", topic_name
        ).save()


def test_save_without_mode_append_is_refused_by_spark_as_the_docs_explain(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    """Spark 4.3 lets a Python data source be written in Append or Overwrite mode only, and
    refuses its default ErrorIfExists before weir sees the write (Spark's Kafka sink, a JVM
    source, takes it as append). docs/spark.md quotes the error and the fix."""
    client.create_topic(topic_name, partitions=1)
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(PySparkException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE") as err:
        df.write.format("weir").option("endpoint", weir_server.endpoint).option(
            "topic", topic_name
        ).save()
    assert "ErrorIfExists" in str(err.value)
    assert client.describe_topic(topic_name).messages == 0
    docs = (ROOT / "docs" / "spark.md").read_text()
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in docs and 'mode("append")' in docs


def test_every_batch_write_in_the_docs_and_examples_says_mode_append() -> None:
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*")]
    for page in pages:
        if page.suffix not in (".md", ".py"):
            continue
        text = page.read_text()
        for m in re.finditer(r"\.write\s*\.\s*format\(\s*[\"']weir[\"']\s*\)", text):
            chain = text[m.end() : text.find(".save(", m.end())]
            assert '.mode("append")' in chain, f"{page.name}: {text[m.start() : m.end() + 80]!r}"

"""Pulsar -> Spark: what the real pulsar-client produced is what `spark.read.format("weir")`
reads: values, keys, properties as headers, event times, producer name and sequence ids,
at the partition and offset the producer's message ids name."""

from __future__ import annotations

from typing import Any

import pulsar
from pyspark.sql import functions as F

import weir
from tests.conftest import ServerProcess

T0 = 1_700_000_000_000  # ms


def test_pulsar_client_messages_read_by_spark(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=2)
    pc = pulsar.Client(
        weir_server.pulsar_url,
        operation_timeout_seconds=5,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        producer = pc.create_producer(
            topic_name,
            producer_name="pulsar-to-spark",
            batching_enabled=True,
            batching_max_publish_delay_ms=5,
        )
        ids: dict[int, Any] = {}
        for i in range(20):
            producer.send_async(
                b"event-%d" % i,
                lambda res, mid, i=i: ids.__setitem__(i, mid),
                partition_key=f"user-{i % 4}",
                properties={"i": str(i)},
                event_timestamp=T0 + i,
                sequence_id=i,
            )
        producer.flush()
        producer.close()
    finally:
        pc.close()
    assert len(ids) == 20
    rows = (
        spark.read.format("weir")
        .option("endpoint", weir_server.endpoint)
        .option("topic", topic_name)
        .load()
        .select(
            "partition",
            "offset",
            "key",
            "value",
            "headers",
            F.unix_millis("created_at").alias("created_ms"),
            "producer_id",
            "seq_no",
        )
        .collect()
    )
    got = {r.value: r for r in rows}
    assert len(rows) == 20
    for i, mid in ids.items():
        r = got[b"event-%d" % i]
        assert (r.partition, r.offset) == (
            mid.partition(),
            mid.entry_id() + max(mid.batch_index(), 0),
        )
        assert r.key == f"user-{i % 4}".encode()
        assert dict(r.headers) == {"i": str(i)}
        assert r.created_ms == T0 + i
        assert (r.producer_id, r.seq_no) == ("pulsar-to-spark", i)

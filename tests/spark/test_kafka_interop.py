"""Spark and Kafka clients on one topic: what a Kafka producer writes Spark reads (key,
value, headers, timestamp), and what Spark writes a Kafka consumer reads."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

import weir
from tests.conftest import ServerProcess

T0 = 1_767_000_000_000


def test_kafka_producer_to_spark_and_spark_to_kafka_consumer(
    spark: Any, weir_server: ServerProcess, client: weir.Client, topic_name: str
) -> None:
    client.create_topic(topic_name, partitions=1)
    p = Producer({"bootstrap.servers": weir_server.kafka, "enable.idempotence": True})
    for i in range(30):
        p.produce(
            topic_name,
            key=b"k%d" % i,
            value=b"v%d" % i,
            headers=[("h", b"%d" % i)],
            timestamp=T0 + i,
        )
    assert p.flush(20) == 0
    df = (
        spark.read.format("weir")
        .option("endpoint", weir_server.endpoint)
        .option("topic", topic_name)
        .load()
    )
    rows = sorted(df.select("offset", "key", "value", "headers", "created_at").collect())
    assert [(r.offset, bytes(r.key), bytes(r.value)) for r in rows] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(30)
    ]
    assert rows[7].headers == {"h": "7"}
    assert round(rows[7].created_at.timestamp() * 1000) == T0 + 7  # naive local time
    out = f"{topic_name}-out"
    client.create_topic(out, partitions=1)
    (
        df.select("key", "value", "headers")
        .write.format("weir")
        .mode("append")
        .option("endpoint", weir_server.endpoint)
        .option("topic", out)
        .save()
    )
    c = Consumer({"bootstrap.servers": weir_server.kafka, "group.id": "spark-out"})
    c.assign([TopicPartition(out, 0, 0)])
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < 30 and time.monotonic() < deadline:
        got.extend(m for m in c.consume(100, timeout=0.5) if m.error() is None)
    c.close()
    assert sorted((m.key(), m.value(), tuple(m.headers())) for m in got) == sorted(
        (b"k%d" % i, b"v%d" % i, (("h", b"%d" % i),)) for i in range(30)
    )

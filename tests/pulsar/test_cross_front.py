"""One broker, every front: a message keeps its key, properties / headers and time whichever
way it travels between pulsar-client, the native SDK and the ydb SDK."""

from __future__ import annotations

import datetime as dt

import pulsar
import ydb

import weir
from tests.conftest import ServerProcess

EVENT_MS = 1_750_000_000_123


def test_pulsar_to_native_sdk_and_ydb_sdk(
    pulsar_server: ServerProcess, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=5)
    for i in range(5):
        producer.send_async(
            b"p%d" % i,
            None,
            partition_key=f"key{i}",
            properties={"n": str(i)},
            event_timestamp=EVENT_MS + i,
        )
    producer.flush()
    native = weir.Client(pulsar_server.endpoint)
    try:
        msgs = [m for chunk in native.read_range(topic, 0, 0, 5) for m in chunk.messages()]
    finally:
        native.close()
    assert [m.data for m in msgs] == [b"p%d" % i for i in range(5)]
    assert [m.key for m in msgs] == [b"key%d" % i for i in range(5)]
    assert [dict(m.headers) for m in msgs] == [{"n": str(i)} for i in range(5)]
    assert [m.created_at_ms for m in msgs] == [EVENT_MS + i for i in range(5)]

    driver = ydb.Driver(endpoint=f"grpc://{pulsar_server.endpoint}", database="/local")
    driver.wait(timeout=10)
    try:
        tc = driver.topic_client
        tc.alter_topic(f"/local/{topic}", add_consumers=["y"])
        reader = tc.reader(f"/local/{topic}", consumer="y")
        got = [reader.receive_message(timeout=10) for _ in range(5)]
        reader.close()
    finally:
        driver.stop()
    assert [m.data for m in got] == [b"p%d" % i for i in range(5)]
    assert [m.metadata_items for m in got] == [{"n": str(i).encode()} for i in range(5)]
    assert got[0].created_at == dt.datetime.fromtimestamp(EVENT_MS / 1000, dt.UTC).replace(
        tzinfo=None
    )
    producer.close()


def test_native_sdk_and_ydb_sdk_to_a_pulsar_consumer(
    pulsar_server: ServerProcess, client: pulsar.Client, topic: str
) -> None:
    native = weir.Client(pulsar_server.endpoint)
    try:
        native.create_topic(topic, partitions=1)
        with native.writer(topic, producer_id="nat") as w:
            for i in range(3):
                w.write(b"n%d" % i, key=b"k%d" % i, headers={"h": str(i)}, created_at=EVENT_MS + i)
    finally:
        native.close()
    driver = ydb.Driver(endpoint=f"grpc://{pulsar_server.endpoint}", database="/local")
    driver.wait(timeout=10)
    try:
        created = dt.datetime(2025, 6, 7, 8, 9, 10, 123000)
        with driver.topic_client.writer(
            f"/local/{topic}", producer_id="ydb", auto_created_at=False, codec=ydb.TopicCodec.RAW
        ) as w:
            w.write(ydb.TopicWriterMessage(b"y0", created_at=created, metadata_items={"m": "v"}))
    finally:
        driver.stop()
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = []
    for _ in range(4):
        m = consumer.receive(5000)
        consumer.acknowledge(m)
        got.append(m)
    assert [m.data() for m in got] == [b"n0", b"n1", b"n2", b"y0"]
    assert [m.partition_key() for m in got[:3]] == ["k0", "k1", "k2"]
    assert [m.properties() for m in got] == [{"h": "0"}, {"h": "1"}, {"h": "2"}, {"m": "v"}]
    assert [m.event_timestamp() for m in got[:3]] == [EVENT_MS + i for i in range(3)]
    assert got[3].event_timestamp() == int(created.replace(tzinfo=dt.UTC).timestamp() * 1000)
    consumer.close()

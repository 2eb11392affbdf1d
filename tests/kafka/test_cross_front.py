"""One topic, every front: what a Kafka producer writes the native SDK and the ydb SDK read
(key, data, headers, created time, offsets), and what they write a Kafka consumer reads."""

from __future__ import annotations

import datetime as dt
import time

import ydb
from confluent_kafka import Consumer, Producer, TopicPartition

import weir
from tests.conftest import ServerProcess
from tests.ydb.conftest import connect, path, receive

T0 = 1_767_000_000_000  # ms: a created time chosen by the producer


def _ms(d: dt.datetime) -> int:
    return round((d if d.tzinfo else d.replace(tzinfo=dt.UTC)).timestamp() * 1000)


def _kafka_write(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(n):
        p.produce(
            topic,
            key=b"key-%d" % (i % 3),
            value=b"kafka %d" % i,
            headers=[("trace", b"t-%d" % i), ("raw", b"\xff\xfe")],
            timestamp=T0 + i,
        )
    p.produce(topic, key=b"tomb", value=None, timestamp=T0 + n)  # a tombstone
    assert p.flush(20) == 0


def _kafka_read(bootstrap: str, topic: str, n: int) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"x-{topic}"})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list = []
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        for m in c.consume(100, timeout=0.5):
            assert m.error() is None
            out.append(m)
    c.close()
    return out


def test_kafka_producer_to_native_and_ydb_readers(kafka_server: ServerProcess) -> None:
    topic = "xf-k2w"
    with weir.Client(kafka_server.endpoint) as client:
        client.create_topic(topic, partitions=1)
        _kafka_write(kafka_server.kafka, topic, 20)
        msgs = [m for chunk in client.read_range(topic, 0, 0, 21) for m in chunk.messages()]
    assert [m.offset for m in msgs] == list(range(21))
    assert [m.data for m in msgs[:20]] == [b"kafka %d" % i for i in range(20)]
    assert msgs[4].key == b"key-1"
    assert msgs[4].headers["trace"] == "t-4"
    assert msgs[4].headers["raw"].encode("utf-8", "surrogateescape") == b"\xff\xfe"
    assert msgs[4].created_at == dt.datetime.fromtimestamp((T0 + 4) / 1000, dt.UTC)
    assert msgs[20].data == b"" and msgs[20].headers == {"pulsar.null_value": "true"}
    driver = connect(kafka_server)
    try:
        reader = driver.topic_client.reader(path(topic), consumer="ydb-side")
        got = receive(reader, 21, commit=True)
        reader.close()
    finally:
        driver.stop(timeout=5)
    assert [m.data for m in got[:20]] == [b"kafka %d" % i for i in range(20)]
    assert got[4].metadata_items["trace"] == b"t-4" and got[4].metadata_items["raw"] == b"\xff\xfe"
    assert got[4].message_group_id == "key-1"
    assert _ms(got[4].created_at) == T0 + 4


def test_native_and_ydb_writers_to_a_kafka_consumer(kafka_server: ServerProcess) -> None:
    topic = "xf-w2k"
    created = dt.datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=dt.UTC)
    with weir.Client(kafka_server.endpoint) as client:
        client.create_topic(topic, partitions=1)
        with client.writer(topic, producer_id="native", codec="zstd") as w:
            for i in range(10):
                w.write(b"native %d" % i, key=f"k{i}", headers={"n": str(i)}, created_at=created)
    driver = connect(kafka_server)
    try:
        with driver.topic_client.writer(
            path(topic), producer_id="ydb-side", codec=ydb.TopicCodec.GZIP
        ) as w:
            w.write(
                [
                    ydb.TopicWriterMessage(b"ydb %d" % i, metadata_items={"y": b"\x00\x01"})
                    for i in range(10)
                ]
            )
    finally:
        driver.stop(timeout=5)
    got = _kafka_read(kafka_server.kafka, topic, 20)
    assert [m.value() for m in got] == [b"native %d" % i for i in range(10)] + [
        b"ydb %d" % i for i in range(10)
    ]
    assert [m.offset() for m in got] == list(range(20))
    assert got[3].key() == b"k3" and got[3].headers() == [("n", b"3")]
    assert got[3].timestamp()[1] == int(created.timestamp() * 1000)
    assert got[12].key() is None and got[12].headers() == [("y", b"\x00\x01")]


def test_kafka_and_pulsar_clients_on_one_topic(kafka_server: ServerProcess) -> None:
    """Kafka records read by a Pulsar consumer (a tombstone as Pulsar's null value), and a
    Pulsar producer's messages (a null value too) read by a Kafka consumer."""
    import pulsar

    topic = "xf-kp"
    with weir.Client(kafka_server.endpoint) as client:
        client.create_topic(topic, partitions=1)
    p = Producer({"bootstrap.servers": kafka_server.kafka, "enable.idempotence": True})
    for i in range(5):
        p.produce(
            topic,
            key=b"key-%d" % i,
            value=b"kafka %d" % i,
            headers=[("trace", b"t-%d" % i), ("raw", b"r\xff%d" % i)],  # not UTF-8
            timestamp=T0 + i,
        )
    p.produce(topic, key=b"tomb", value=None, timestamp=T0 + 5)
    assert p.flush(20) == 0
    pc = pulsar.Client(kafka_server.pulsar_url, operation_timeout_seconds=10)
    try:
        consumer = pc.subscribe(
            topic, "from-kafka", initial_position=pulsar.InitialPosition.Earliest
        )
        got = [consumer.receive(timeout_millis=10_000) for _ in range(6)]
        assert [m.data() for m in got[:5]] == [b"kafka %d" % i for i in range(5)]
        assert got[2].partition_key() == "key-2"
        assert got[2].properties()["trace"] == "t-2"
        # Pulsar properties are strings: bytes that are not UTF-8 arrive as U+FFFD
        assert got[2].properties()["raw"] == "r\ufffd2"
        assert got[2].event_timestamp() == T0 + 2
        assert got[5].data() in (b"", None) and got[5].partition_key() == "tomb"
        consumer.close()
        producer = pc.create_producer(topic)
        producer.send(b"from pulsar", partition_key="pk", properties={"p": "1"}, event_timestamp=T0)
        producer.close()
    finally:
        pc.close()
    got_k = _kafka_read(kafka_server.kafka, topic, 7)
    assert got_k[5].value() is None and got_k[5].key() == b"tomb"  # the tombstone, still one
    assert (got_k[6].key(), got_k[6].value(), got_k[6].headers()) == (
        b"pk",
        b"from pulsar",
        [("p", b"1")],
    )
    assert got_k[6].timestamp()[1] == T0

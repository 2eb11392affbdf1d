"""readCompacted through the Pulsar front with the real pulsar-client: a Reader reads a
topic's compacted view (weir compaction), then its tail; a durable subscription asking
for it is refused, saying so."""

from __future__ import annotations

import pulsar
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

import weir
from tests.conftest import ServerProcess


def _read_all(reader: pulsar.Reader) -> list[tuple[str, bytes]]:
    out = []
    while reader.has_message_available():
        m = reader.read_next(5000)
        out.append((m.partition_key(), m.data()))
    return out


def test_a_compacted_reader_gets_the_latest_of_each_key_then_the_tail(
    pulsar_server: ServerProcess, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=60_000
    )
    # three entries: all five keys; the same keys again (k3, k4 first); k0..k2 once more.
    # The second entry keeps only its first two messages: the view's batch starts where
    # the stored entry does, with fewer messages (a cache keyed by its start would mix them)
    rounds = [
        ["k0", "k1", "k2", "k3", "k4"],
        ["k3", "k4", "k0", "k1", "k2"],
        ["k0", "k1", "k2"],
    ]
    for r, keys in enumerate(rounds):
        for k in keys:
            producer.send_async(f"{k}=r{r}".encode(), None, partition_key=k)
        producer.flush()
    everything = client.create_reader(topic, pulsar.MessageId.earliest)
    assert len(_read_all(everything)) == 13  # the log, read once (its entries encoded)
    with weir.Client(pulsar_server.endpoint) as native:
        native.compact(topic, wait=True)

    compacted = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert _read_all(compacted) == [
        ("k3", b"k3=r1"),
        ("k4", b"k4=r1"),
        ("k0", b"k0=r2"),
        ("k1", b"k1=r2"),
        ("k2", b"k2=r2"),
    ]
    assert len(_read_all(client.create_reader(topic, pulsar.MessageId.earliest))) == 13
    producer.send_async(b"k3=r3", None, partition_key="k3")  # the tail, past the view
    producer.flush()
    m = compacted.read_next(5000)
    assert (m.partition_key(), m.data()) == ("k3", b"k3=r3")
    # the id of a message read compacted names it: a reader from it reads on after it
    again = client.create_reader(topic, m.message_id(), is_read_compacted=True)
    assert not again.has_message_available()
    # a tombstone (a key with empty data) deletes its key: the next run's view has the
    # delete in place of k1's last value (kept while compaction_delete_retention_ms runs,
    # so a reader behind sees it)
    producer.send_async(b"", None, partition_key="k1")
    producer.flush()
    with weir.Client(pulsar_server.endpoint) as native:
        native.compact(topic, wait=True)
    view = _read_all(client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True))
    assert ("k1", b"") in view and ("k1", b"k1=r2") not in view
    assert [k for k, _ in view].count("k1") == 1
    for r in (everything, compacted, again):
        r.close()
    producer.close()


def test_a_trim_deletes_from_the_compacted_view(
    pulsar_server: ServerProcess, client: pulsar.Client, topic: str
) -> None:
    """Records a trim (Kafka's DeleteRecords, through the same server's Kafka listener)
    deleted are gone from a compacted reader too, even inside one entry of the view."""
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=60_000
    )
    for r in range(2):  # two entries of five keys: offsets 5..9 are the latest
        for k in ("k0", "k1", "k2", "k3", "k4"):
            producer.send_async(f"{k}=r{r}".encode(), None, partition_key=k)
        producer.flush()
    with weir.Client(pulsar_server.endpoint) as native:
        native.compact(topic, wait=True)
    admin = AdminClient({"bootstrap.servers": pulsar_server.kafka})
    (fut,) = admin.delete_records([TopicPartition(topic, 0, 7)]).values()
    assert fut.result(10).low_watermark == 7
    compacted = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert _read_all(compacted) == [("k2", b"k2=r1"), ("k3", b"k3=r1"), ("k4", b"k4=r1")]
    compacted.close()
    producer.close()


def test_a_durable_subscription_reading_compacted_is_refused(
    client: pulsar.Client, topic: str
) -> None:
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "s", is_read_compacted=True)
    consumer = client.subscribe(topic, "s")  # the topic and the name are fine without it
    consumer.close()

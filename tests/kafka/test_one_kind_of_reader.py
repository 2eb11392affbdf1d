"""A consumer's committed offsets serve one kind of reader at a time: while weir
subscription consumers are attached to consumer ``G``'s subscription, a Kafka group ``G``
(kafka-python) is refused at JoinGroup, a Kafka commit or offset delete of ``G`` from
outside a group, a native commit and a YDB read session naming its partitions (ydb SDK) are refused; while
a Kafka group member or such a YDB reader is live, subscribing to ``G`` is refused. Each
refusal changes no committed offset, and once the holder leaves the other kind reads on
from where it stopped."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import ydb
from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.errors import (
    CommitFailedError,
    GroupSubscribedToTopicError,
    InconsistentGroupProtocolError,
)

import weir
from tests.conftest import ServerProcess
from tests.ydb.conftest import connect, path, receive
from weir.errors import ConsumerBusyError


@pytest.fixture
def client(kafka_server: ServerProcess) -> Iterator[weir.Client]:
    c = weir.Client(kafka_server.endpoint)
    yield c
    c.close()


def _fill(client: weir.Client, topic: str, n: int) -> None:
    client.create_topic(topic, partitions=1)
    with client.writer(topic, producer_id="w") as w:
        for i in range(n):
            w.write(b"%d" % i)


def _take(c: weir.SubscriptionConsumer, n: int) -> list[weir.ReceivedMessage]:
    out: list[weir.ReceivedMessage] = []
    deadline = time.monotonic() + 20
    while len(out) < n and time.monotonic() < deadline:
        out.extend(c.receive_batch(n - len(out), timeout=0.5))
    assert len(out) == n
    return out


def _committed(client: weir.Client, topic: str, consumer: str) -> int:
    return client.describe_consumer(topic, consumer).partitions[0].committed_offset


def _kafka_poll(consumer: KafkaConsumer, n: int) -> list[int]:
    got: list[int] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(int(r.value) for r in records)
    return got


def test_a_kafka_group_and_commits_are_refused_while_subscription_consumers_hold_it(
    client: weir.Client, bootstrap: str
) -> None:
    topic = "one-reader-a"
    _fill(client, topic, 6)
    client.commit_offset(topic, 0, "grp", 1)  # consumer "grp" exists: committed 1
    sub = client.subscribe(topic, "grp", type="failover").wait_connected()
    got = _take(sub, 2)
    sub.acknowledge_cumulative(got[-1])
    assert [int(m.data) for m in got] == [1, 2] and _committed(client, topic, "grp") == 3

    group = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="grp")
    with pytest.raises(InconsistentGroupProtocolError):
        group.poll(timeout_ms=10_000)
    group.close(autocommit=False)
    simple = KafkaConsumer(bootstrap_servers=bootstrap, group_id="grp", enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    simple.assign([tp])
    with pytest.raises(CommitFailedError):
        simple.commit({tp: OffsetAndMetadata(5, "", -1)})
    simple.close(autocommit=False)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    assert admin.delete_group_offsets("grp", [tp]) == {tp: GroupSubscribedToTopicError}
    admin.close()
    with pytest.raises(ConsumerBusyError, match="subscription consumer"):
        client.commit_offset(topic, 0, "grp", 0, allow_backwards=True)
    assert _committed(client, topic, "grp") == 3  # none of them moved it

    sub.close()  # the subscription lets go: the Kafka group reads on from its ack
    group = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id="grp", enable_auto_commit=False
    )
    assert _kafka_poll(group, 3) == [3, 4, 5]
    group.close(autocommit=False)


def test_subscribing_is_refused_while_a_kafka_group_member_reads(
    client: weir.Client, bootstrap: str
) -> None:
    topic = "one-reader-b"
    _fill(client, topic, 4)
    group = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id="kgrp",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    assert _kafka_poll(group, 2)[:2] == [0, 1]
    group.commit({TopicPartition(topic, 0): OffsetAndMetadata(2, "", -1)})
    with pytest.raises(ConsumerBusyError, match="1 Kafka group member"):
        client.subscribe(topic, "kgrp", type="failover").wait_connected()
    group.close(autocommit=False)  # LeaveGroup: the group is empty
    sub = client.subscribe(topic, "kgrp", type="exclusive").wait_connected()
    assert [int(m.data) for m in _take(sub, 2)] == [2, 3]
    sub.close()


def test_a_ydb_reader_naming_its_partitions_and_a_subscription_exclude_each_other(
    client: weir.Client, kafka_server: ServerProcess
) -> None:
    topic = "one-reader-c"
    _fill(client, topic, 4)
    client.commit_offset(topic, 0, "ydbc", 0)
    driver = connect(kafka_server)
    try:
        selector = ydb.TopicReaderSelector(path(topic), partitions=[0])
        reader = driver.topic_client.reader(selector, consumer="ydbc")
        got = receive(reader, 1)
        assert got[0].data == b"0"
        reader.commit_with_ack(got[0])  # committed: 1
        with pytest.raises(ConsumerBusyError, match="1 partition read session"):
            client.subscribe(topic, "ydbc", type="failover").wait_connected()
        reader.close()
        deadline = time.monotonic() + 20  # the server sees the stream end a little later
        while True:
            try:
                sub = client.subscribe(topic, "ydbc", type="failover").wait_connected()
                break
            except ConsumerBusyError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        first = _take(sub, 1)[0]
        assert first.data == b"1"  # from the reader's commit on
        for either in (selector, path(topic)):  # naming its partitions, or in the group
            reader = driver.topic_client.reader(either, consumer="ydbc")
            with pytest.raises(ydb.issues.PreconditionFailed, match="subscription consumer"):
                reader.receive_batch(timeout=10)
            reader.close()
        sub.close()
    finally:
        driver.stop(timeout=5)

"""kafka-python 3.0 and aiokafka 0.14 against a real weir server: produce, consume,
consumer groups (offsets are weir consumer offsets), admin."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NoError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafka.structs import OffsetAndMetadata

from tests.conftest import ServerProcess


def _consume(consumer: KafkaConsumer, n: int, timeout: float = 20) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            out.extend(records)
    return out


def test_produce_and_consume_with_keys_headers_and_nulls(bootstrap: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    sent = [
        ("kp", b"k1", b"v1", [("h", b"x")]),
        ("kp", None, b"no key", []),
        ("kp", b"tomb", None, [("why", b"deleted")]),
        ("kp", b"", b"", []),
    ]
    metas = [
        producer.send(t, key=k, value=v, headers=h, timestamp_ms=1_700_000_000_000 + i)
        for i, (t, k, v, h) in enumerate(sent)
    ]
    producer.flush()
    offsets = [f.get(10).offset for f in metas]
    assert offsets == [0, 1, 2, 3]
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition("kp", 0)])
    got = _consume(consumer, 4)
    consumer.close()
    assert [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in got] == [
        (0, b"k1", b"v1", [("h", b"x")], 1_700_000_000_000),
        (1, None, b"no key", [], 1_700_000_000_001),
        (2, b"tomb", None, [("why", b"deleted")], 1_700_000_000_002),
        (3, None, b"", [], 1_700_000_000_003),  # weir has no empty key: it reads back as null
    ]


def test_group_commits_are_weir_consumer_offsets(
    bootstrap: str, kafka_server: ServerProcess
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kpg", 2, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(20):
        producer.send("kpg", value=b"%d" % i, partition=i % 2)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(
        "kpg",
        bootstrap_servers=bootstrap,
        group_id="kpgroup",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    got = _consume(consumer, 20)
    assert sorted(int(r.value) for r in got) == list(range(20))
    consumer.commit()
    assert consumer.committed(TopicPartition("kpg", 0)) == 10
    consumer.close()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "weir.cli",
            "consumer",
            "describe",
            "kpg",
            "kpgroup",
            "--endpoint",
            kafka_server.endpoint,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "total" in out and " 10 " in out
    # the admin API sees the group and its offsets
    assert {"group_id": "kpgroup", "protocol_type": "consumer", "group_state": "Empty"} in (
        admin.list_groups()
    )
    offsets = admin.list_group_offsets({"kpgroup": None})["kpgroup"]
    assert offsets[TopicPartition("kpg", 1)].offset == 10
    admin.close()


def test_delete_records_and_offsets(bootstrap: str) -> None:
    """DeleteRecords moves the low watermark (readers below it are out of range and a
    reset lands on it); OffsetDelete goes per partition and keeps the offsets of topics
    the group's live members subscribe to."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    admin.create_topics([NewTopic("kdr", 2, 1), NewTopic("kdr2", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(20):
        producer.send("kdr", value=b"%d" % i, partition=i % 2)
        producer.send("kdr2", value=b"%d" % i)
    producer.flush()
    producer.close()
    tp0, tp1, other = TopicPartition("kdr", 0), TopicPartition("kdr", 1), TopicPartition("kdr2", 0)
    res = admin.delete_records({tp0: 4, tp1: 0})
    assert (res[tp0]["low_watermark"], res[tp1]["low_watermark"]) == (4, 0)
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({tp1: 11})
    assert admin.delete_records({other: -1})[other]["low_watermark"] == 20
    # a reader below the low watermark is reset to it (auto_offset_reset=earliest)
    reader = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    reader.assign([tp0])
    reader.seek(tp0, 1)
    assert [r.offset for r in _consume(reader, 6)] == [4, 5, 6, 7, 8, 9]
    assert reader.beginning_offsets([tp0])[tp0] == 4
    reader.close()

    group = KafkaConsumer(
        "kdr",
        bootstrap_servers=bootstrap,
        group_id="kdrg",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    assert len(_consume(group, 16)) == 16  # 6 of partition 0 (from 4), 10 of 1
    group.commit({tp0: OffsetAndMetadata(5, "", -1), tp1: OffsetAndMetadata(3, "", -1)})
    group.commit({other: OffsetAndMetadata(20, "", -1)})
    # while a member subscribes to kdr, its offsets stay; kdr2's may go
    assert admin.delete_group_offsets("kdrg", [tp0, other]) == {
        tp0: GroupSubscribedToTopicError,
        other: NoError,
    }
    group.close()
    assert admin.delete_group_offsets("kdrg", [tp0]) == {tp0: NoError}
    offsets = admin.list_group_offsets({"kdrg": None})["kdrg"]
    assert {tp: o.offset for tp, o in offsets.items()} == {tp1: 3}
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_group_offsets("nobody", [tp0])
    admin.close()


def test_admin_topics_partitions_configs(bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kadm", 1, 1, topic_configs={"retention.ms": "3600000"})])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("kadm", 1, 1)])
    admin.create_partitions({"kadm": 3})
    desc = admin.describe_topics(["kadm"])
    assert len(desc[0]["partitions"]) == 3
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "kadm", configs={"retention.ms": "7200000"})]
    )
    res = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "kadm")], config_filter="all"
    )
    configs = res["topic"]["kadm"]
    assert configs["retention.ms"]["value"] == "7200000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    admin.delete_topics(["kadm"])
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["kadm"])
    admin.close()


async def test_aiokafka_produce_consume_group_admin(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([AioNewTopic("aio", 2, 1)])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
    await producer.start()
    for i in range(30):
        await producer.send(
            "aio", key=b"k%d" % (i % 3), value=b"m%d" % i, headers=[("i", b"%d" % i)]
        )
    await producer.flush()
    await producer.stop()
    consumer = AIOKafkaConsumer(
        "aio",
        bootstrap_servers=bootstrap,
        group_id="aiog",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    got = []
    async with asyncio.timeout(30):
        while len(got) < 30:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                got.extend(records)
    await consumer.commit()
    await consumer.stop()
    assert sorted(r.value for r in got) == sorted(b"m%d" % i for i in range(30))
    assert all(dict(r.headers)["i"] == r.value[1:] for r in got)
    offsets = await admin.list_consumer_group_offsets("aiog")
    assert sum(o.offset for o in offsets.values()) == 30
    await admin.close()

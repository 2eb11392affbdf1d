"""Topic and consumer administration through the ydb SDK's topic client."""

from __future__ import annotations

import datetime as dt

import pytest
import ydb

from tests.ydb.conftest import path, receive


def test_create_describe_alter_and_drop(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    read_from = dt.datetime(2026, 1, 1, 12, 0, 0)
    tc.create_topic(
        topic,
        min_active_partitions=3,
        retention_period=dt.timedelta(hours=5),
        retention_storage_mb=64,
        supported_codecs=[ydb.TopicCodec.RAW, ydb.TopicCodec.GZIP],
        consumers=[ydb.TopicConsumer("audit", important=True, read_from=read_from), "plain"],
    )
    d = tc.describe_topic(topic)
    assert d.self.name == topic_name
    assert d.min_active_partitions == 3 and [p.partition_id for p in d.partitions] == [0, 1, 2]
    assert d.retention_period == dt.timedelta(hours=5)
    assert d.retention_storage_mb == 64
    assert d.supported_codecs == [ydb.TopicCodec.RAW, ydb.TopicCodec.GZIP]
    consumers = {c.name: c for c in d.consumers}
    assert set(consumers) == {"audit", "plain"}
    assert consumers["audit"].important and consumers["audit"].read_from == read_from
    assert not consumers["plain"].important

    tc.alter_topic(
        topic,
        set_min_active_partitions=5,
        set_retention_period=dt.timedelta(days=2),
        add_consumers=["late"],
        drop_consumers=["plain"],
        alter_consumers=[ydb.TopicAlterConsumer("audit", set_important=False)],
        set_supported_codecs=[ydb.TopicCodec.RAW],
    )
    d = tc.describe_topic(topic)
    assert [p.partition_id for p in d.partitions] == [0, 1, 2, 3, 4]
    assert d.retention_period == dt.timedelta(days=2)
    assert d.supported_codecs == [ydb.TopicCodec.RAW]
    consumers = {c.name: c for c in d.consumers}
    assert set(consumers) == {"audit", "late"}
    assert not consumers["audit"].important and consumers["audit"].read_from == read_from

    tc.drop_topic(topic)
    with pytest.raises(ydb.SchemeError):
        tc.describe_topic(topic)


def test_relative_and_absolute_paths_name_the_same_topic(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    tc.create_topic(topic_name)  # relative to the database
    assert tc.describe_topic(path(topic_name)).self.name == topic_name
    with tc.writer(path(topic_name), producer_id="p") as w:
        w.write(ydb.TopicWriterMessage(b"x"))
    assert tc.describe_topic(topic_name).partitions[0].partition_stats.partition_end == 1


def test_partition_stats_and_consumer_offsets(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, min_active_partitions=1, consumers=["c"])
    with tc.writer(topic, producer_id="p") as w:
        w.write([ydb.TopicWriterMessage(b"m%d" % i) for i in range(30)])
    stats = tc.describe_topic(topic, include_stats=True).partitions[0].partition_stats
    assert (stats.partition_start, stats.partition_end) == (0, 30)
    assert stats.store_size_bytes > 30 * 2
    assert abs(stats.last_write_time - dt.datetime.utcnow()) < dt.timedelta(minutes=5)

    reader = tc.reader(topic, consumer="c")
    try:
        msgs = receive(reader, 12)
        for m in msgs[:11]:  # commits are ranges: the offset moves over contiguous ones
            reader.commit(m)
        reader.commit_with_ack(msgs[11], timeout=10)
    finally:
        reader.close()
    cons = tc.describe_consumer(topic, "c", include_stats=True)
    assert cons.consumer.name == "c"
    assert cons.partitions[0].partition_consumer_stats.committed_offset == 12
    assert cons.partitions[0].partition_stats.partition_end == 30

    # the unary commit sets the offset (backwards too) and a new reader starts there
    tc.commit_offset(topic, "c", 0, 25)
    assert (
        tc.describe_consumer(topic, "c").partitions[0].partition_consumer_stats.committed_offset
        == 25
    )
    tc.commit_offset(topic, "c", 0, 5)
    reader = tc.reader(topic, consumer="c")
    try:
        assert [m.offset for m in receive(reader, 25)] == list(range(5, 30))
    finally:
        reader.close(flush=False)
    with pytest.raises(ydb.SchemeError):
        tc.describe_consumer(topic, "nobody")

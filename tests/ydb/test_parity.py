"""Scheme answers as a real YDB gives them, seen from the ydb SDK (sync and asyncio).

Each setting the SDK can send is either acted on, stored and reported back by
DescribeTopic / DescribeConsumer, or refused with a status: never accepted and
dropped.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import ydb
import ydb.aio
from ydb import _apis
from ydb._grpc.common.protos import ydb_topic_pb2
from ydb._topic_common.common import wrap_operation

import weir
from tests.conftest import ServerProcess
from tests.ydb.conftest import DATABASE, connect, path, receive

MIB = 1 << 20


def test_describe_consumer_names_the_consumer_under_its_topic(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    tc.create_topic(path(topic_name), consumers=["billing"])
    d = tc.describe_consumer(path(topic_name), "billing")
    assert d.self.name == f"{topic_name}/billing"  # YDB: the topic's entry, named topic/consumer
    assert d.self.type == ydb.SchemeEntryType.TOPIC
    assert d.consumer.name == "billing"
    assert tc.describe_topic(path(topic_name)).self.name == topic_name


def test_a_path_that_cannot_be_a_topic_is_a_scheme_error(driver: ydb.Driver) -> None:
    tc = driver.topic_client
    for bad in (DATABASE, DATABASE + "/", "/"):
        with pytest.raises(ydb.SchemeError):
            tc.create_topic(bad)
    with pytest.raises(ydb.BadRequest, match="bad topic name"):  # a bad name is still that
        tc.create_topic(path("bad name!"))


def test_creating_a_topic_that_exists_succeeds_and_changes_nothing(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, min_active_partitions=2, consumers=["a"])
    with tc.writer(topic, producer_id="p") as w:
        w.write([ydb.TopicWriterMessage(b"m%d" % i) for i in range(3)])
    # YDB: "path exist, request accepts it" -> SUCCESS; the topic keeps its own settings
    tc.create_topic(topic, min_active_partitions=5, consumers=["b"])
    tc.create_topic(topic_name)  # relative path: the same topic
    d = tc.describe_topic(topic)
    assert len(d.partitions) == 2
    assert [c.name for c in d.consumers] == ["a"]
    assert sum(p.partition_stats.partition_end for p in d.partitions) == 3
    # a request that is invalid in itself is refused before the existence check
    with pytest.raises(ydb.BadRequest):
        tc.create_topic(topic, min_active_partitions=-1)


def test_partitioning_settings_are_stored_and_reported(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(
        topic,
        min_active_partitions=2,
        max_active_partitions=6,
        partition_write_speed_bytes_per_second=2 * MIB,
        partition_write_burst_bytes=4 * MIB,
        auto_partitioning_settings=ydb.TopicAutoPartitioningSettings(
            strategy=ydb.TopicAutoPartitioningStrategy.SCALE_UP,
            stabilization_window=dt.timedelta(minutes=2),
            up_utilization_percent=75,
            down_utilization_percent=25,
        ),
    )
    d = tc.describe_topic(topic)
    assert (d.min_active_partitions, d.max_active_partitions) == (2, 6)
    assert len(d.partitions) == 2  # weir does not split partitions under load
    assert d.partition_write_speed_bytes_per_second == 2 * MIB
    assert d.partition_write_burst_bytes == 4 * MIB
    aps = d.auto_partitioning_settings
    assert aps is not None
    assert aps.strategy == ydb.TopicAutoPartitioningStrategy.SCALE_UP
    assert aps.stabilization_window == dt.timedelta(minutes=2)
    assert (aps.up_utilization_percent, aps.down_utilization_percent) == (75, 25)

    tc.alter_topic(
        topic,
        set_max_active_partitions=10,
        set_partition_write_speed_bytes_per_second=3 * MIB,
        alter_auto_partitioning_settings=ydb.TopicAlterAutoPartitioningSettings(
            set_strategy=ydb.TopicAutoPartitioningStrategy.SCALE_UP_AND_DOWN,
            set_up_utilization_percent=60,
        ),
    )
    d = tc.describe_topic(topic)
    assert d.max_active_partitions == 10
    assert d.partition_write_speed_bytes_per_second == 3 * MIB
    assert d.partition_write_burst_bytes == 4 * MIB  # untouched
    aps = d.auto_partitioning_settings
    assert aps is not None
    assert aps.strategy == ydb.TopicAutoPartitioningStrategy.SCALE_UP_AND_DOWN
    assert (aps.up_utilization_percent, aps.down_utilization_percent) == (60, 25)
    assert aps.stabilization_window == dt.timedelta(minutes=2)

    tc.alter_topic(
        topic,
        alter_auto_partitioning_settings=ydb.TopicAlterAutoPartitioningSettings(
            set_strategy=ydb.TopicAutoPartitioningStrategy.DISABLED
        ),
    )
    aps = tc.describe_topic(topic).auto_partitioning_settings
    assert aps is not None and aps.strategy == ydb.TopicAutoPartitioningStrategy.DISABLED

    # settings that contradict each other are refused, and nothing changes
    with pytest.raises(ydb.BadRequest, match="max_active_partitions"):
        tc.alter_topic(topic, set_max_active_partitions=1)
    with pytest.raises(ydb.BadRequest, match="max_active_partitions"):
        tc.alter_topic(topic, set_min_active_partitions=11)
    with pytest.raises(ydb.BadRequest, match="utilization"):
        tc.alter_topic(
            topic,
            alter_auto_partitioning_settings=ydb.TopicAlterAutoPartitioningSettings(
                set_up_utilization_percent=101
            ),
        )
    with pytest.raises(ydb.BadRequest, match="max_active_partitions"):
        tc.create_topic(path(f"{topic_name}_b"), min_active_partitions=4, max_active_partitions=2)
    d = tc.describe_topic(topic)
    assert (len(d.partitions), d.max_active_partitions) == (2, 10)


def test_a_topic_without_partitioning_settings_reports_its_partition_count(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    tc.create_topic(path(topic_name), min_active_partitions=3)
    d = tc.describe_topic(path(topic_name))
    assert (d.min_active_partitions, d.max_active_partitions, d.partition_count_limit) == (3, 3, 3)
    aps = d.auto_partitioning_settings
    assert aps is not None and aps.strategy == ydb.TopicAutoPartitioningStrategy.DISABLED
    assert d.partition_write_speed_bytes_per_second == 0 and d.attributes == {}


def test_topic_attributes_are_acted_on_or_refused(
    shared_server: ServerProcess, driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, attributes={"_max_partition_storage_size": str(MIB)})
    assert tc.describe_topic(topic).attributes == {"_max_partition_storage_size": str(MIB)}
    with weir.Client(shared_server.endpoint) as client:
        assert client.describe_topic(topic_name).max_partition_bytes == MIB  # acted on
        tc.alter_topic(topic, alter_attributes={"_max_partition_storage_size": ""})  # YDB: unset
        assert client.describe_topic(topic_name).max_partition_bytes is None
    assert tc.describe_topic(topic).attributes == {}
    with pytest.raises(ydb.BadRequest, match=r"owner.{0,4} is not supported"):
        tc.alter_topic(topic, alter_attributes={"owner": "team-a"})
    with pytest.raises(ydb.BadRequest, match="_message_group_seqno_retention_period_ms"):
        tc.create_topic(
            path(f"{topic_name}_b"), attributes={"_message_group_seqno_retention_period_ms": "1"}
        )
    with pytest.raises(ydb.BadRequest, match="not a size"):
        tc.alter_topic(topic, alter_attributes={"_max_partition_storage_size": "lots"})
    with pytest.raises(ydb.SchemeError):
        tc.describe_topic(path(f"{topic_name}_b"))


def test_metering_mode_is_refused_as_on_a_dedicated_database(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    with pytest.raises(ydb.PreconditionFailed, match="serverless"):
        tc.create_topic(path(topic_name), metering_mode=ydb.TopicMeteringMode.RESERVED_CAPACITY)
    with pytest.raises(ydb.SchemeError):
        tc.describe_topic(path(topic_name))
    tc.create_topic(path(topic_name))
    with pytest.raises(ydb.PreconditionFailed, match="serverless"):
        tc.alter_topic(path(topic_name), set_metering_mode=ydb.TopicMeteringMode.REQUEST_UNITS)
    assert tc.describe_topic(path(topic_name)).metering_mode in (
        None,
        ydb.TopicMeteringMode.UNSPECIFIED,
    )


def test_consumer_codecs_are_stored_and_consumer_attributes_refused(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    gzip_raw = [ydb.TopicCodec.RAW, ydb.TopicCodec.GZIP]
    tc.create_topic(topic, consumers=[ydb.TopicConsumer("c", supported_codecs=gzip_raw)])
    assert tc.describe_topic(topic).consumers[0].supported_codecs == gzip_raw
    assert tc.describe_consumer(topic, "c").consumer.supported_codecs == gzip_raw
    tc.alter_topic(
        topic,
        alter_consumers=[ydb.TopicAlterConsumer("c", set_supported_codecs=[ydb.TopicCodec.RAW])],
    )
    assert tc.describe_consumer(topic, "c").consumer.supported_codecs == [ydb.TopicCodec.RAW]
    with pytest.raises(ydb.BadRequest, match="consumer attributes"):
        tc.alter_topic(topic, add_consumers=[ydb.TopicConsumer("d", attributes={"k": "v"})])
    with pytest.raises(ydb.BadRequest, match="consumer attributes"):
        tc.alter_topic(
            topic, alter_consumers=[ydb.TopicAlterConsumer("c", alter_attributes={"k": "v"})]
        )
    with pytest.raises(ydb.BadRequest, match="codec 7"):
        tc.alter_topic(topic, add_consumers=[ydb.TopicConsumer("e", supported_codecs=[7])])
    assert [c.name for c in tc.describe_topic(topic).consumers] == ["c"]


def _call(driver: ydb.Driver, method: str, request: Any) -> None:
    """A raw TopicService call through the SDK's driver: for the fields its topic client
    does not expose."""
    driver(request, _apis.TopicService.Stub, getattr(_apis.TopicService, method), wrap_operation)


def test_settings_the_sdk_api_does_not_expose_are_refused(
    driver: ydb.Driver, topic_name: str
) -> None:
    topic = path(topic_name)
    create = ydb_topic_pb2.CreateTopicRequest
    for request, what in [
        (create(path=topic, content_based_deduplication=True), "content_based_deduplication"),
        (create(path=topic, metrics_level=2), "metrics_level"),
        (
            create(
                path=topic,
                consumers=[ydb_topic_pb2.Consumer(name="c", availability_period={"seconds": 60})],
            ),
            "availability_period",
        ),
    ]:
        with pytest.raises(ydb.issues.Unsupported, match=what):
            _call(driver, "CreateTopic", request)
    with pytest.raises(ydb.SchemeError):
        driver.topic_client.describe_topic(topic)

    driver.topic_client.create_topic(topic, consumers=["c"])
    alter = ydb_topic_pb2.AlterTopicRequest
    for request, what in [
        (alter(path=topic, set_content_based_deduplication=True), "content_based_deduplication"),
        (alter(path=topic, set_metrics_level=3), "metrics_level"),
        (
            alter(
                path=topic,
                alter_consumers=[
                    ydb_topic_pb2.AlterConsumer(name="c", set_availability_period={"seconds": 9})
                ],
            ),
            "availability_period",
        ),
    ]:
        with pytest.raises(ydb.issues.Unsupported, match=what):
            _call(driver, "AlterTopic", request)
    # turning off what is off is fine
    _call(driver, "AlterTopic", alter(path=topic, set_content_based_deduplication=False))
    _call(driver, "AlterTopic", alter(path=topic, reset_metrics_level={}))


def test_write_session_meta_reaches_every_batch_it_wrote(
    shared_server: ServerProcess, driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, min_active_partitions=1, consumers=["c"])
    meta = {"host": "web-1", "build": "42"}
    with tc.writer(topic, producer_id="with-meta", session_metadata=meta) as w:
        w.write([ydb.TopicWriterMessage(b"a", metadata_items={"trace": b"t1"}), b"b"])
    with tc.writer(topic, producer_id="plain") as w:
        w.write(b"c")
    reader = tc.reader(topic, consumer="c")
    try:
        got = receive(reader, 3)
    finally:
        reader.close(flush=False)
    by_data = {m.data: (dict(m.session_metadata), m.metadata_items) for m in got}
    assert by_data == {b"a": (meta, {"trace": b"t1"}), b"b": (meta, {}), b"c": ({}, {})}
    with weir.Client(shared_server.endpoint) as client:  # the weir SDK sees it as headers
        msgs = [m for c in client.read_range(topic_name, 0, 0, 3) for m in c.messages()]
    assert msgs[0].headers == {
        "trace": "t1",
        "ydb.session.host": "web-1",
        "ydb.session.build": "42",
    }
    # a message's own metadata cannot pose as the session's
    writer = tc.writer(topic, producer_id="forger")
    with pytest.raises(ydb.BadRequest, match="reserved"):
        writer.write_with_ack(ydb.TopicWriterMessage(b"x", metadata_items={"ydb.session.h": b"1"}))
    with pytest.raises(ydb.BadRequest):
        writer.close()
    assert tc.describe_topic(topic).partitions[0].partition_stats.partition_end == 3


async def test_asyncio_driver_gets_the_same_answers(
    shared_server: ServerProcess, topic_name: str
) -> None:
    topic = path(topic_name)
    async with ydb.aio.Driver(endpoint=f"grpc://{shared_server.endpoint}", database=DATABASE) as d:
        await d.wait(timeout=15, fail_fast=True)
        tc = d.topic_client
        await tc.create_topic(topic, min_active_partitions=1, consumers=["billing"])
        await tc.create_topic(topic, min_active_partitions=4)  # exists: SUCCESS, unchanged
        described = await tc.describe_consumer(topic, "billing")
        assert described.self.name == f"{topic_name}/billing"
        with pytest.raises(ydb.SchemeError):
            await tc.create_topic(DATABASE)
        await tc.alter_topic(
            topic,
            set_max_active_partitions=3,
            alter_auto_partitioning_settings=ydb.TopicAlterAutoPartitioningSettings(
                set_strategy=ydb.TopicAutoPartitioningStrategy.SCALE_UP
            ),
        )
        info = await tc.describe_topic(topic)
        assert len(info.partitions) == 1 and info.max_active_partitions == 3
        assert info.auto_partitioning_settings is not None
        assert (
            info.auto_partitioning_settings.strategy == ydb.TopicAutoPartitioningStrategy.SCALE_UP
        )
        assert (
            info.auto_partitioning_settings.up_utilization_percent,
            info.auto_partitioning_settings.down_utilization_percent,
            info.auto_partitioning_settings.stabilization_window,
        ) == (90, 30, dt.timedelta(minutes=5))  # YDB's defaults when a strategy is turned on
        with pytest.raises(ydb.PreconditionFailed):
            await tc.alter_topic(topic, set_metering_mode=ydb.TopicMeteringMode.REQUEST_UNITS)


def test_stored_settings_and_custom_codec_data_survive_a_kill(
    server: ServerProcess, topic_name: str
) -> None:
    topic = path(topic_name)
    custom = 10042

    def reverse(b: bytes) -> bytes:
        return b[::-1]

    with connect(server) as driver:
        tc = driver.topic_client
        tc.create_topic(
            topic,
            min_active_partitions=1,
            max_active_partitions=4,
            supported_codecs=[ydb.TopicCodec.RAW, custom],
            partition_write_burst_bytes=MIB,
            attributes={"_max_partition_storage_size": str(64 * MIB)},
            auto_partitioning_settings=ydb.TopicAutoPartitioningSettings(
                strategy=ydb.TopicAutoPartitioningStrategy.SCALE_UP, up_utilization_percent=70
            ),
            consumers=[ydb.TopicConsumer("c", supported_codecs=[custom])],
        )
        with tc.writer(topic, producer_id="p", codec=custom, encoders={custom: reverse}) as w:
            w.write([ydb.TopicWriterMessage(b"abc"), ydb.TopicWriterMessage(b"xyz")])
    server.kill()
    server.start()
    with connect(server) as driver:
        tc = driver.topic_client
        d = tc.describe_topic(topic)
        assert d.max_active_partitions == 4 and d.partition_write_burst_bytes == MIB
        assert d.supported_codecs == [ydb.TopicCodec.RAW, custom]
        assert d.attributes == {"_max_partition_storage_size": str(64 * MIB)}
        aps = d.auto_partitioning_settings
        assert aps is not None and aps.strategy == ydb.TopicAutoPartitioningStrategy.SCALE_UP
        assert aps.up_utilization_percent == 70
        assert d.consumers[0].supported_codecs == [custom]
        reader = tc.reader(topic, consumer="c", decoders={custom: reverse})
        try:
            assert [m.data for m in receive(reader, 2)] == [b"abc", b"xyz"]
        finally:
            reader.close(flush=False)

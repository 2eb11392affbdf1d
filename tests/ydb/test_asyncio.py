"""The asyncio SDK (``ydb.aio.Driver``): the same protocol on native grpc.aio streams."""

from __future__ import annotations

import asyncio

import ydb
import ydb.aio

from tests.conftest import ServerProcess
from tests.ydb.conftest import DATABASE, path


async def test_asyncio_writer_and_reader_with_gzip_raw_and_one_big_request(
    shared_server: ServerProcess, topic_name: str
) -> None:
    topic = path(topic_name)
    async with ydb.aio.Driver(endpoint=f"grpc://{shared_server.endpoint}", database=DATABASE) as d:
        await d.wait(timeout=15, fail_fast=True)
        tc = d.topic_client
        await tc.create_topic(topic, min_active_partitions=2, consumers=["c"])
        async with tc.writer(topic, producer_id="gz", codec=ydb.TopicCodec.GZIP) as w:
            for i in range(500):
                await w.write(ydb.TopicWriterMessage(b"gzip text %d " % i * 5))
        # a tight loop never yields, so all 20,000 go out in one WriteRequest
        async with tc.writer(topic, producer_id="raw", codec=ydb.TopicCodec.RAW) as w:
            for i in range(20_000):
                await w.write(ydb.TopicWriterMessage(b"raw %d" % i))
            result = await w.write_with_ack(ydb.TopicWriterMessage(b"acked"))
            assert isinstance(result, ydb.TopicWriteResult.Written)
            assert result.offset == 20_000

        got: list[ydb.TopicReaderMessage] = []
        async with tc.reader(topic, consumer="c") as reader:
            while len(got) < 20_501:
                batch = await asyncio.wait_for(reader.receive_batch(), 30)
                got.extend(batch.messages)
                reader.commit(batch)
        by_producer = {pid: [m.data for m in got if m.producer_id == pid] for pid in ("gz", "raw")}
        assert by_producer["gz"] == [b"gzip text %d " % i * 5 for i in range(500)]
        assert by_producer["raw"] == [b"raw %d" % i for i in range(20_000)] + [b"acked"]
        described = await tc.describe_consumer(topic, "c")
        assert sum(p.partition_consumer_stats.committed_offset for p in described.partitions) == (
            20_501
        )

"""Codecs on the YDB front: the SDK's own encoders and decoders (custom ids 10000-19999, LZOP)
are stored as written and served with their codec id; weir's LZ4 reads as RAW."""

from __future__ import annotations

import zlib

import pytest
import ydb
import ydb.aio

import weir
from tests.cli.conftest import Weir
from tests.conftest import ServerProcess
from tests.ydb.conftest import DATABASE, path, receive
from weir.errors import UnsupportedCodecError

CUSTOM = 10001


def encode(data: bytes) -> bytes:
    """A custom codec: raw deflate behind a marker, so that stored bytes are not the data."""
    co = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return b"C1" + co.compress(data) + co.flush()


def decode(data: bytes) -> bytes:
    assert data[:2] == b"C1"
    return zlib.decompress(data[2:], -zlib.MAX_WBITS)


def payloads(n: int) -> list[bytes]:
    return [b"custom payload %d " % i * 20 for i in range(n)]


def test_a_custom_codec_is_stored_as_written_and_read_with_the_readers_decoder(
    driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, min_active_partitions=1, supported_codecs=[ydb.TopicCodec.RAW, CUSTOM])
    assert tc.describe_topic(topic).supported_codecs == [ydb.TopicCodec.RAW, CUSTOM]
    with tc.writer(topic, producer_id="custom", codec=CUSTOM, encoders={CUSTOM: encode}) as w:
        assert w.wait_init(timeout=10).supported_codecs == [ydb.TopicCodec.RAW, CUSTOM]
        w.write([ydb.TopicWriterMessage(d) for d in payloads(40)])
        result = w.write_with_ack(ydb.TopicWriterMessage(b"last"))
        assert isinstance(result, ydb.TopicWriteResult.Written) and result.offset == 40

    reader = tc.reader(topic, consumer="with-decoder", decoders={CUSTOM: decode})
    try:
        got = receive(reader, 41)
    finally:
        reader.close(flush=False)
    assert [m.data for m in got] == [*payloads(40), b"last"]

    # without the decoder the SDK says which codec it got: the id travelled unchanged
    reader = tc.reader(topic, consumer="without-decoder")
    try:
        with pytest.raises(ydb.TopicReaderUnexpectedCodecError, match=str(CUSTOM)):
            reader.receive_batch(timeout=10)
    finally:
        reader.close(flush=False)


def test_lzop_is_stored_as_written(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, supported_codecs=[ydb.TopicCodec.LZOP])  # YDB accepts LZOP too
    lzop = ydb.TopicCodec.LZOP
    with tc.writer(topic, producer_id="p", codec=lzop, encoders={lzop: encode}) as w:
        w.write([ydb.TopicWriterMessage(d) for d in payloads(5)])
    reader = tc.reader(topic, consumer="c", decoders={lzop: decode})
    try:
        assert [m.data for m in receive(reader, 5)] == payloads(5)
    finally:
        reader.close(flush=False)


def test_codec_ids_outside_the_api_are_bad_requests(driver: ydb.Driver, topic_name: str) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    for codec in (5, 9999, 20000):  # reserved by the API (5 to 9999, 20000 and up)
        with pytest.raises(ydb.BadRequest, match=f"codec {codec}"):
            tc.create_topic(topic, supported_codecs=[codec])
    tc.create_topic(topic, min_active_partitions=1)  # no codec list: any codec of the API
    writer = tc.writer(topic, producer_id="p", codec=5, encoders={5: encode})
    with pytest.raises(ydb.BadRequest, match="codec 5"):
        writer.write_with_ack(ydb.TopicWriterMessage(b"x"))
    with pytest.raises(ydb.BadRequest):
        writer.close()
    with tc.writer(topic, producer_id="q", codec=19999, encoders={19999: encode}) as w:
        w.write(ydb.TopicWriterMessage(b"y"))
    assert tc.describe_topic(topic).partitions[0].partition_stats.partition_end == 1


def test_the_weir_sdk_and_cli_on_a_topic_with_a_custom_codec(
    shared_server: ServerProcess, driver: ydb.Driver, topic_name: str
) -> None:
    tc = driver.topic_client
    topic = path(topic_name)
    tc.create_topic(topic, min_active_partitions=1, supported_codecs=[ydb.TopicCodec.RAW, CUSTOM])
    with tc.writer(topic, producer_id="raw", codec=ydb.TopicCodec.RAW) as w:
        w.write(ydb.TopicWriterMessage(b"plain"))
    with tc.writer(topic, producer_id="custom", codec=CUSTOM, encoders={CUSTOM: encode}) as w:
        w.write(ydb.TopicWriterMessage(b"secret"))

    described = Weir(shared_server.endpoint)("topic", "describe", topic_name, "--json")
    info = described.json()
    assert info["codecs"] == ["raw", f"custom-{CUSTOM}"]

    with weir.Client(shared_server.endpoint) as client:
        assert client.describe_topic(topic_name).codecs == ["raw", f"custom-{CUSTOM}"]
        chunks = list(client.read_range(topic_name, 0, 0, 2))
        with pytest.raises(UnsupportedCodecError, match=f"codec {CUSTOM}"):
            [m for c in chunks for m in c.messages()]
        # the weir SDK can still set and keep the codec list of such a topic
        client.alter_topic(topic_name, codecs=["raw", "gzip", f"custom-{CUSTOM}"])
    assert tc.describe_topic(topic).supported_codecs == [1, 2, CUSTOM]


def test_lz4_from_the_weir_sdk_reads_as_raw_on_this_front(
    shared_server: ServerProcess, driver: ydb.Driver, topic_name: str
) -> None:
    with weir.Client(shared_server.endpoint) as client:
        client.create_topic(topic_name, partitions=1, codecs=["lz4"])
        with client.writer(topic_name, producer_id="weir-lz4", codec="lz4") as w:
            for i in range(50):
                w.write(b"lz4 compressed %d " % i * 10)
    tc = driver.topic_client
    # the API has no LZ4 (ids 5 to 9999 are reserved): an LZ4 topic takes RAW, which weir serves
    assert tc.describe_topic(path(topic_name)).supported_codecs == [ydb.TopicCodec.RAW]
    with tc.writer(path(topic_name), producer_id="ydb") as w:
        assert w.wait_init(timeout=10).supported_codecs == [ydb.TopicCodec.RAW]
        w.write(ydb.TopicWriterMessage(b"from ydb"))
    reader = tc.reader(path(topic_name), consumer="c")
    try:
        got = receive(reader, 51)
    finally:
        reader.close(flush=False)
    assert [m.data for m in got] == [b"lz4 compressed %d " % i * 10 for i in range(50)] + [
        b"from ydb"
    ]


async def test_asyncio_custom_codec_round_trip(
    shared_server: ServerProcess, topic_name: str
) -> None:
    topic = path(topic_name)
    async with ydb.aio.Driver(endpoint=f"grpc://{shared_server.endpoint}", database=DATABASE) as d:
        await d.wait(timeout=15, fail_fast=True)
        tc = d.topic_client
        await tc.create_topic(topic, supported_codecs=[CUSTOM], consumers=["c"])
        async with tc.writer(topic, producer_id="a", codec=CUSTOM, encoders={CUSTOM: encode}) as w:
            for data in payloads(30):
                await w.write(ydb.TopicWriterMessage(data))
        got: list[bytes] = []
        async with tc.reader(topic, consumer="c", decoders={CUSTOM: decode}) as reader:
            while len(got) < 30:
                batch = await reader.receive_batch()
                got.extend(m.data for m in batch.messages)
        assert got == payloads(30)

"""One message size limit: the server's `limits.max_message_bytes`, enforced on both fronts
and reported to writers, which check it before sending."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import ydb

import weir
import weir.aio
from tests.conftest import ServerProcess
from tests.ydb.conftest import connect, path
from weir.client.connection import Connection
from weir.config import ConfigError, load
from weir.errors import MessageTooLargeError
from weir.protocols.native import weir_pb2 as pb
from weir.protocols.native.wire import RawWriteRequest
from weir.storage.batch_encoding import encode_batch

LIMIT = 64 << 10


@pytest.fixture(scope="module")
def small_limit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose messages may be at most 64 KiB."""
    srv = ServerProcess(
        tmp_path_factory.mktemp("limit"), env={"WEIR_LIMITS_MAX_MESSAGE_BYTES": "64KiB"}
    )
    srv.start()
    yield srv
    srv.stop()


def test_writer_follows_the_servers_limit(small_limit: ServerProcess, topic_name: str) -> None:
    with weir.Client(small_limit.endpoint) as c:
        c.create_topic(topic_name)
        w = c.writer(topic_name).wait_init()
        assert w.max_message_bytes == LIMIT  # reported at init, not the 32 MiB default
        w.write(b"k" * 10, key=b"v" * (LIMIT - 10))  # data plus key: exactly at the limit
        with pytest.raises(MessageTooLargeError, match="65537 bytes exceeds the server's limit"):
            w.write(b"x" * (LIMIT + 1))
        with pytest.raises(MessageTooLargeError):
            w.write_many([b"ok", b"x" * (LIMIT + 1)])  # the whole call is refused
        w.write(b"y" * LIMIT)
        w.close()  # the refused ones did not fail the writer
        # a setting above the server's limit is lowered to it; one below it stays
        assert (
            c.writer(topic_name, max_message_bytes=1 << 30).wait_init().max_message_bytes == LIMIT
        )
        low = c.writer(topic_name, max_message_bytes=100).wait_init()
        assert low.max_message_bytes == 100
        with pytest.raises(MessageTooLargeError, match="exceeds max_message_bytes of 100"):
            low.write(b"z" * 101)
        stored = [m for chunk in c.read_range(topic_name, 0, 0) for m in chunk.messages()]
        assert [len(m.data) + len(m.key) for m in stored] == [LIMIT, LIMIT]


async def test_asyncio_writer_follows_the_servers_limit(
    small_limit: ServerProcess, topic_name: str
) -> None:
    async with weir.aio.Client(small_limit.endpoint) as c:
        await c.create_topic(topic_name)
        w = await c.writer(topic_name).wait_init()
        assert w.max_message_bytes == LIMIT
        with pytest.raises(MessageTooLargeError):
            await w.write(b"x" * (LIMIT + 1))
        await w.write(b"x" * LIMIT)
        await w.close()


async def raw_write(endpoint: str, topic: str, size: int) -> pb.WriteResponse:
    """Send one message of ``size`` bytes past the SDK's own check, as a hostile client would."""
    conn = Connection(endpoint)
    try:
        call = conn.stream_write()
        await call.write(pb.WriteRequest(init=pb.WriteInit(topic=topic, producer_id="raw")))
        init = await call.read()
        assert init.init.max_message_bytes == LIMIT
        await call.write(RawWriteRequest([encode_batch([b"r" * size], producer_id="raw")]))
        resp = await asyncio.wait_for(call.read(), 30)
        call.cancel()
        return resp
    finally:
        await conn.close()


async def test_native_front_refuses_a_message_over_the_limit(
    small_limit: ServerProcess, topic_name: str
) -> None:
    async with weir.aio.Client(small_limit.endpoint) as c:
        await c.create_topic(topic_name)
    over = await raw_write(small_limit.endpoint, topic_name, LIMIT + 1)
    assert over.WhichOneof("kind") == "error", over
    assert (
        over.error.code == "MESSAGE_TOO_LARGE" and "limits.max_message_bytes" in over.error.message
    )
    at = await raw_write(small_limit.endpoint, topic_name, LIMIT)
    assert at.WhichOneof("kind") == "ack" and at.ack.acks[0].written == 1


def test_ydb_sdk_cannot_write_past_the_limit(small_limit: ServerProcess, topic_name: str) -> None:
    with weir.Client(small_limit.endpoint) as c:
        c.create_topic(topic_name)
        driver = connect(small_limit)
        try:
            with driver.topic_client.writer(path(topic_name), producer_id="ydb") as w:
                w.write_with_ack(ydb.TopicWriterMessage(b"a" * LIMIT))
            w = driver.topic_client.writer(path(topic_name), producer_id="ydb-big")
            with pytest.raises(ydb.issues.BadRequest, match="65537 bytes exceeds the limit"):
                w.write_with_ack(ydb.TopicWriterMessage(b"b" * (LIMIT + 1)), timeout=30)
        finally:
            driver.stop(timeout=10)
        stored = [m for chunk in c.read_range(topic_name, 0, 0) for m in chunk.messages()]
        assert [len(m.data) for m in stored] == [LIMIT]


def test_one_configured_limit_that_fits_in_a_batch() -> None:
    assert load().broker.message_limit == 32 << 20
    assert load(env={"WEIR_LIMITS_MAX_MESSAGE_BYTES": "1MiB"}).broker.message_limit == 1 << 20
    # a batch holds one message at the least: a smaller batch limit lowers the message limit
    small = load(env={"WEIR_LIMITS_MAX_BATCH_BYTES": "1MiB"}).broker
    assert small.message_limit == (1 << 20) - (4 << 10)
    with pytest.raises(ConfigError, match="WEIR_LIMITS_MAX_MESSAGE_BYTES"):
        load(env={"WEIR_LIMITS_MAX_MESSAGE_BYTES": "lots"})
